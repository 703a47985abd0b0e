"""The HTTP ingress: a Starlette app on a Serve deployment.

Routes:
  * ``POST /v1/video/query``: a clip and a question in, the answer out (JSON,
    or server-sent events with ``stream: true``).
  * ``GET /healthz``: liveness of the ingress.

Every error leaves as ``{"error": {"type", "message", "param"}}`` with its
status and Ray Serve's ``X-Request-Id`` header; a 500 carries only the request id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator

from ray import serve
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ray.serve.handle import DeploymentHandle
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from serve_app.api import new_request_id, parse_query, query_response, sample_request, sampling_options
from serve_app.config import AppConfig
from serve_app.errors import (
    ErrorInfo,
    NotFoundError,
    OverloadedError,
    ServeAppError,
    UpstreamTimeoutError,
    internal_error,
    to_http,
)

logger = logging.getLogger("ray.serve")


def error_response(err: ServeAppError | ErrorInfo, request_id: str) -> JSONResponse:
    """The one JSON error response of every route.

    ``request_id`` is Ray Serve's own (its proxy sets the ``X-Request-Id``
    request and response headers), so logs, responses and headers agree.
    """
    status, body, headers = to_http(err)
    return JSONResponse(body, status_code=status, headers=headers)


def _sse(obj) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {data}\n\n".encode()


@serve.deployment(name="Ingress")
@serve.ingress()
class Ingress:
    """HTTP front door: parses requests, calls the decoder and the model through handles.

    Args:
        config: the application config (as a dict).
        decoder: handle of :class:`serve_app.deployments.decoder.VideoDecoder`.
        model: handle of :class:`serve_app.deployments.model.VideoModel`.
    """

    def __init__(self, config: dict, decoder: DeploymentHandle, model: DeploymentHandle):
        self.config = AppConfig.model_validate(config)
        self.decoder = decoder
        self.model = model

    def __serve_build_asgi_app__(self) -> Starlette:
        async def http_error(request: Request, exc: HTTPException) -> Response:
            rid = request.headers.get("x-request-id") or new_request_id()
            if exc.status_code == 404:
                return error_response(NotFoundError(f"no route {request.method} {request.url.path}"), rid)
            info = ErrorInfo(exc.status_code, "invalid_request_error", str(exc.detail))
            return error_response(info, rid)

        return Starlette(
            routes=[
                Route("/v1/video/query", self.video_query, methods=["POST"]),
                Route("/healthz", self.healthz, methods=["GET"]),
            ],
            exception_handlers={HTTPException: http_error},
        )

    async def healthz(self, request: Request) -> Response:
        """Liveness: 200 while the ingress replica runs."""
        return JSONResponse({"status": "ok"})

    async def video_query(self, request: Request) -> Response:
        """``POST /v1/video/query`` (see :mod:`serve_app.api` for the fields)."""
        rid = request.headers.get("x-request-id") or new_request_id()
        t0 = time.perf_counter()
        gen = None
        try:
            q, source = await parse_query(request, self.config)
            decoded = self.decoder.decode.remote(source, sample_request(q, self.config), rid)
            gen = self.model.options(stream=True).generate.remote(
                rid, decoded, q.question, sampling_options(q, self.config)
            )
            async with asyncio.timeout(self.config.limits.request_timeout_s):
                first = await gen.__anext__()
            if first["type"] == "error":
                return error_response(first["error"], rid)
            if q.stream:
                stream, gen = self._stream(rid, t0, first, gen), None
                return StreamingResponse(stream, media_type="text/event-stream")
            async with asyncio.timeout(self.config.limits.request_timeout_s):
                body = await self._collect(rid, t0, first, gen)
            gen = None
            if isinstance(body, ErrorInfo):
                return error_response(body, rid)
            return JSONResponse(body)
        except ServeAppError as e:
            return error_response(e, rid)
        except (BackPressureError, DeploymentUnavailableError) as e:
            return error_response(OverloadedError(f"server busy ({type(e).__name__}); retry shortly"), rid)
        except TimeoutError:
            return error_response(
                UpstreamTimeoutError(f"request exceeded {self.config.limits.request_timeout_s:.0f} s"), rid
            )
        except Exception:
            logger.exception("request %s failed", rid)
            return error_response(internal_error(rid), rid)
        finally:
            if gen is not None:
                gen.cancel()

    def _finish(self, rid: str, t0: float, first: dict, text: str, done: dict) -> dict:
        return query_response(
            request_id=rid,
            model=first["model"],
            random_weights=first["random_weights"],
            text=text,
            finish_reason=done.get("finish_reason"),
            video=first["video"],
            warnings=first["warnings"],
            prompt_tokens=done.get("prompt_tokens"),
            completion_tokens=done.get("completion_tokens", 0),
            video_tokens=first.get("video_tokens"),
            timings={
                "decode_ms": first.get("decode_ms"),
                "queue_ms": done.get("queue_ms"),
                "model_ms": done.get("model_ms"),
                "ttft_ms": done.get("ttft_ms"),
                "total_ms": (time.perf_counter() - t0) * 1000,
            },
        )

    async def _collect(self, rid: str, t0: float, first: dict, gen) -> dict | ErrorInfo:
        parts: list[str] = []
        async for chunk in gen:
            kind = chunk["type"]
            if kind == "delta":
                parts.append(chunk["text"])
            elif kind == "error":
                return chunk["error"]
            elif kind == "done":
                return self._finish(rid, t0, first, "".join(parts), chunk)
        return internal_error(rid)

    async def _stream(self, rid: str, t0: float, first: dict, gen) -> AsyncIterator[bytes]:
        parts: list[str] = []
        finished = False
        try:
            yield _sse({"type": "clip", "id": rid, "video": first["video"], "warnings": first["warnings"]})
            async for chunk in gen:
                kind = chunk["type"]
                if kind == "delta":
                    parts.append(chunk["text"])
                    yield _sse({"type": "delta", "text": chunk["text"]})
                elif kind == "error":
                    _, body, _ = to_http(chunk["error"])
                    yield _sse({"type": "error", **body})
                    finished = True
                    break
                elif kind == "done":
                    body = self._finish(rid, t0, first, "".join(parts), chunk)
                    yield _sse({"type": "done", **body})
                    finished = True
            yield _sse("[DONE]")
        finally:
            if not finished:  # client disconnected: cancel down to the engine
                gen.cancel()
