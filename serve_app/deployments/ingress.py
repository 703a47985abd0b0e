"""The HTTP ingress: a Starlette app on a Serve deployment.

Routes:
  * ``POST /v1/video/query``: a clip and a question in, the answer out (JSON,
    or server-sent events with ``stream: true``), with timings and timestamps.
  * ``POST /v1/chat/completions``: the OpenAI-compatible route (see
    :mod:`serve_app.openai_api`): ``chat.completion`` or ``chat.completion.chunk``
    events ending with ``data: [DONE]``.
  * ``GET /v1/models``, ``GET /v1/models/{model}``: the served model, OpenAI's shapes.
  * ``GET /healthz``: liveness of the ingress (never needs the API key).
  * ``GET /readyz``: readiness: 200 once every deployment of the application has a
    running replica, else 503 naming those still starting (never needs the API key).

Every error leaves as ``{"error": {"type", "message", "param"}}`` with its
status and Ray Serve's ``X-Request-Id`` header; a 500 carries only the request id.
Back-pressure: the decoder and model deployments have bounded queues
(``max_queued_requests``); their ``BackPressureError`` — and a replica that is
unavailable or died under a request — become the project's 503 with
``Retry-After``. A client that disconnects cancels its request down to the
engine (the model deployment aborts the generation).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator

from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ray.serve.handle import DeploymentHandle
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from serve_app import openai_api
from serve_app.api import (
    FORM_OVERHEAD_BYTES,
    QueryRequest,
    new_request_id,
    parse_query,
    read_body,
    query_response,
    sample_request,
    sampling_options,
)
from serve_app.auth import ApiKey, ApiKeyMiddleware
from serve_app.config import AppConfig
from serve_app.errors import (
    AuthenticationError,
    ErrorInfo,
    NotFoundError,
    NotReadyError,
    OverloadedError,
    ServeAppError,
    UnsupportedMediaError,
    UpstreamTimeoutError,
    internal_error,
    to_http,
)
from serve_app.guards import (  # security: request-level defences (issue 13)
    AdmissionGuard,
    BodyGuard,
    ControlHeaderGuard,
    SharedResult,
    client_key,
    log_safe,
    mark_pipeline_full,
)
from serve_app.metrics import IngressMetrics
from serve_app.sources import ClipSource

logger = logging.getLogger("ray.serve")

QUERY_ROUTE = "/v1/video/query"
CHAT_ROUTE = "/v1/chat/completions"
MODELS_ROUTE = "/v1/models"
HEALTH_ROUTE = "/healthz"
READY_ROUTE = "/readyz"


def error_response(err: ServeAppError | ErrorInfo, request_id: str) -> JSONResponse:
    """The one JSON error response of every route.

    ``request_id`` is Ray Serve's own (its proxy sets the ``X-Request-Id``
    request and response headers), so logs, responses and headers agree.
    """
    status, body, headers = to_http(err)
    return JSONResponse(body, status_code=status, headers=headers)


def client_error(exc: BaseException, request_id: str, retry_after_s: int) -> ServeAppError | ErrorInfo:
    """The client-visible error for an exception raised while serving a request.

    Serve's back-pressure (``BackPressureError``: a downstream queue is full),
    an unavailable deployment, and a replica that died under the request
    (``RayActorError``, e.g. a killed decode replica) are transient: 503 with
    ``Retry-After: retry_after_s``. Timeouts are 504; anything else is a bug (500).
    """
    chain = _causes(exc)
    exc = next((e for e in chain if isinstance(e, (ServeAppError, BackPressureError, DeploymentUnavailableError,
                                                     RayActorError))), exc)
    if isinstance(exc, ServeAppError):
        return exc
    if isinstance(exc, (BackPressureError, DeploymentUnavailableError)):
        return OverloadedError(
            f"server busy: {'queue full' if isinstance(exc, BackPressureError) else 'deployment unavailable'}; "
            f"retry after {retry_after_s} s",
            retry_after_s=retry_after_s,
        )
    if isinstance(exc, RayActorError):
        logger.warning("request %s: a replica died under it: %s", request_id, type(exc).__name__)
        return OverloadedError(
            f"a replica serving this request failed and is being replaced; retry after {retry_after_s} s",
            retry_after_s=retry_after_s,
        )
    if isinstance(exc, TimeoutError):
        return UpstreamTimeoutError("request exceeded the server's request timeout")
    logger.error("request %s failed", request_id, exc_info=exc)
    return internal_error(request_id)


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps: ``RayTaskError.cause`` and ``__cause__`` links.

    Serve wraps a replica that died under a dependency (e.g. a killed decode replica
    whose output the model awaited) as ``RayServeException`` caused by
    ``RayTaskError(ActorDiedError)``; the useful error is at the end of that chain.
    """
    out: list[BaseException] = []
    while exc is not None and exc not in out and len(out) < 8:
        out.append(exc)
        exc = exc.cause if isinstance(exc, RayTaskError) and isinstance(exc.cause, BaseException) else exc.__cause__
    return out


def _sse(obj) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {data}\n\n".encode()


class _Pipeline:
    """One request's run through decoder and model: first chunk, then the rest under a deadline."""

    def __init__(self, first: dict, gen, deadline: float):
        self.first = first
        self.gen = gen
        self.deadline = deadline

    async def chunks(self) -> AsyncIterator[dict]:
        """The model's chunks after the first; raises TimeoutError past the deadline."""
        while True:
            try:
                async with asyncio.timeout_at(self.deadline):
                    chunk = await self.gen.__anext__()
            except StopAsyncIteration:
                return
            yield chunk

    async def collect(self) -> tuple[str, dict]:
        """The whole answer text and the ``done`` chunk; an error chunk is raised."""
        parts: list[str] = []
        async for chunk in self.chunks():
            kind = chunk["type"]
            if kind == "delta":
                parts.append(chunk["text"])
            elif kind == "error":
                chunk["error"].raise_()
            elif kind == "done":
                return "".join(parts), chunk
        raise RuntimeError("model stream ended without a done chunk")

    def cancel(self) -> None:
        """Cancels the model call (and through it, the engine's generation)."""
        self.gen.cancel()


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
        self.api_key = ApiKey.from_env(self.config.api_key_env)
        self.metrics = IngressMetrics()
        self.started = int(time.time())
        # security: one controller round trip per readiness_cache_s, shared by concurrent /readyz callers
        self.readiness = SharedResult(lambda: asyncio.to_thread(serve.status), self.config.security.readiness_cache_s)
        logger.info(
            "ingress ready: API key %s", f"required (${self.config.api_key_env})" if self.api_key.enabled else "off"
        )

    def __serve_build_asgi_app__(self) -> Starlette:
        async def http_error(request: Request, exc: HTTPException) -> Response:
            rid = request.headers.get("x-request-id") or new_request_id()
            if exc.status_code == 404:
                return error_response(NotFoundError(f"no route {request.method} {request.url.path}"), rid)
            info = ErrorInfo(exc.status_code, "invalid_request_error", str(exc.detail))
            response = error_response(info, rid)
            for name, value in (exc.headers or {}).items():  # e.g. 405's Allow
                response.headers[name] = value
            return response

        async def reject(scope, receive, send, err: ServeAppError) -> None:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            rid = headers.get("x-request-id") or new_request_id()
            route = "auth" if isinstance(err, AuthenticationError) else "guard"
            self.metrics.requests.inc(tags={"route": route, "status": str(err.status)})
            self.metrics.error(route, err.type)
            logger.info(
                "request %s: %s %s rejected: %s",
                log_safe(rid), scope.get("method"), log_safe(scope.get("path")), err.message,
            )
            response = error_response(err, rid)
            if isinstance(err, AuthenticationError):
                response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)

        cfg, sec = self.config, self.config.security
        upload = cfg.limits.max_upload_bytes

        return Starlette(
            routes=[
                Route(QUERY_ROUTE, self.video_query, methods=["POST"]),
                Route(CHAT_ROUTE, self.chat_completions, methods=["POST"]),
                Route(MODELS_ROUTE, self.models, methods=["GET"]),
                Route(MODELS_ROUTE + "/{model:path}", self.model_card, methods=["GET"]),
                Route(HEALTH_ROUTE, self.healthz, methods=["GET"]),
                Route(READY_ROUTE, self.readyz, methods=["GET"]),
            ],
            middleware=[
                # security (issue 13): control headers, key, admission before the body, body deadline/limits
                Middleware(ControlHeaderGuard, headers=sec.refused_headers, reject=reject),
                Middleware(
                    ApiKeyMiddleware, api_key=self.api_key, exempt_paths={HEALTH_ROUTE, READY_ROUTE}, reject=reject
                ),
                Middleware(
                    AdmissionGuard,
                    paths={QUERY_ROUTE, CHAT_ROUTE},
                    max_in_flight=cfg.ingress.max_ongoing_requests,
                    max_per_client=sec.max_requests_per_client,
                    client_key=lambda scope, headers: client_key(
                        scope, headers, sec.client_identity, self.api_key.enabled
                    ),
                    retry_after_s=cfg.limits.retry_after_s,
                    reject=reject,
                ),
                Middleware(
                    BodyGuard,
                    max_bytes={  # multipart: the clip + form overhead; chat: the clip in base64 (4 bytes per 3)
                        QUERY_ROUTE: upload + FORM_OVERHEAD_BYTES,
                        CHAT_ROUTE: upload * 4 // 3 + FORM_OVERHEAD_BYTES,
                    },
                    timeout_s=sec.body_timeout_s,
                    min_rate_bytes_s=sec.body_min_rate_bytes_s,
                    large_body_bytes=sec.large_body_bytes,
                    max_large_bodies=sec.max_large_bodies,
                    retry_after_s=cfg.limits.retry_after_s,
                    reject=reject,
                ),
            ],
            exception_handlers={HTTPException: http_error},
        )

    # --- simple routes ----------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        """Liveness: 200 while the ingress replica runs (the model may still be loading: see readyz)."""
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """Readiness: 200 ``{"status": "ready", "running_replicas": {deployment: n}}`` once every
        deployment of this application has at least one RUNNING replica; before that 503
        (``Retry-After``) naming the deployments without one. Reads Serve's status from the
        controller, so a busy model replica does not make the application look unready. A
        deployment autoscaled down to zero replicas (``min_replicas: 0``) reads as not ready."""
        rid = request.headers.get("x-request-id") or new_request_id()
        app_name = serve.get_replica_context().app_name
        try:
            status, reads = await self.readiness.get()  # security: cached ~1 s (issue 13, item 10)
        except Exception as e:  # noqa: BLE001 - the controller is unreachable or restarting
            logger.warning("readyz: cannot read Serve's status: %r", e)
            err = NotReadyError("not ready: Serve's controller did not answer", retry_after_s=5)
            return error_response(err, rid)
        app = status.applications.get(app_name)
        running = {
            name: d.replica_states.get("RUNNING", 0) for name, d in (app.deployments.items() if app else [])
        }
        waiting = sorted(name for name, n in running.items() if n == 0)
        if app is None or waiting:
            detail = ", ".join(waiting) if waiting else f"application {app_name!r}"
            err = NotReadyError(f"not ready: no running replica yet for {detail}", retry_after_s=5)
            return error_response(err, rid)
        return JSONResponse({"status": "ready", "running_replicas": running, "status_reads": reads})

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the served model (OpenAI's list shape)."""
        return JSONResponse(openai_api.models_list(self.config.model.name, self.started))

    async def model_card(self, request: Request) -> Response:
        """``GET /v1/models/{model}``: the served model's object, or 404 naming the served model."""
        name = request.path_params["model"]
        if name != self.config.model.name:
            rid = request.headers.get("x-request-id") or new_request_id()
            served = self.config.model.name
            err = NotFoundError(f"model {name[:200]!r} is not served here; this server serves {served!r}", param="model")
            return error_response(err, rid)
        return JSONResponse(openai_api.model_card(self.config.model.name, self.started))

    # --- the pipeline -----------------------------------------------------------------------------

    async def _start(self, rid: str, source: ClipSource, q: QueryRequest, t0: float) -> _Pipeline:
        """Sends the clip to the decoder and the result on to the model; waits for the first chunk.

        Raises:
            ServeAppError: the decoder or model rejected the request (its error chunk).
            BackPressureError, DeploymentUnavailableError, RayActorError, TimeoutError: see :func:`client_error`.
        """
        cfg = self.config
        deadline = asyncio.get_running_loop().time() + cfg.limits.request_timeout_s - (time.perf_counter() - t0)
        decoded = self.decoder.decode.remote(source, sample_request(q, cfg), rid)
        gen = None
        try:
            async with asyncio.timeout_at(deadline):
                # Wait only for a decode replica to take the clip (a full decoder queue raises
                # BackPressureError here), then hand the model the decode's ObjectRef: the model's
                # router admits or rejects the request now, against its real queue (with a pending
                # DeploymentResponse argument it would check before the decode and queue without
                # bound after it), and the frames still go decoder → model without a stop here.
                decoded_ref = await decoded._to_object_ref()
                gen = self.model.options(stream=True).generate.remote(
                    rid, decoded_ref, q.question, sampling_options(q, cfg)
                )
                first = await gen.__anext__()
        except BaseException:
            decoded.cancel()
            if gen is not None:
                gen.cancel()
            raise
        if first["type"] == "error":
            first["error"].raise_()
        return _Pipeline(first, gen, deadline)

    def _finished(
        self, route: str, rid: str, camera: str | None, t0: float, status: int, err: ServeAppError | ErrorInfo | None
    ) -> None:
        ms = (time.perf_counter() - t0) * 1000
        err_type = None
        if err is not None:
            err_type = err.info().type if isinstance(err, ServeAppError) else err.type
        self.metrics.finished(route, status, ms, err_type)
        logger.info(
            "request %s camera=%s %s -> %d%s in %.0f ms",
            log_safe(rid), log_safe(camera or "-"), route, status, f" ({err_type})" if err_type else "", ms,
        )

    async def _serve(self, request: Request, route: str, handler) -> Response:
        """Runs a pipeline route: metrics, access log, and one error mapping for every failure."""
        rid = request.headers.get("x-request-id") or new_request_id()
        t0 = time.perf_counter()
        ctx: dict = {"camera": request.headers.get("x-camera-id")}
        self.metrics.started()
        try:
            response = await handler(request, rid, t0, ctx)
            self._finished(route, rid, ctx["camera"], t0, response.status_code, None)
            return response
        except asyncio.CancelledError:  # the client went away; finally-blocks cancel the work
            self._finished(route, rid, ctx["camera"], t0, 499, None)
            raise
        except Exception as e:  # noqa: BLE001 - mapped to the one error shape
            err = client_error(e, rid, self.config.limits.retry_after_s)
            if any(isinstance(c, BackPressureError) for c in _causes(e)):  # security: load is knowable
                mark_pipeline_full(request.scope)
            status, _, _ = to_http(err)
            self._finished(route, rid, ctx["camera"], t0, status, err)
            return error_response(err, rid)

    # --- POST /v1/video/query ---------------------------------------------------------------------

    async def video_query(self, request: Request) -> Response:
        """``POST /v1/video/query`` (see :mod:`serve_app.api` for the fields)."""
        return await self._serve(request, QUERY_ROUTE, self._video_query)

    async def _video_query(self, request: Request, rid: str, t0: float, ctx: dict) -> Response:
        q, source = await parse_query(request, self.config)
        ctx["camera"] = q.camera_id or ctx["camera"]
        run = await self._start(rid, source, q, t0)
        if q.stream:
            return StreamingResponse(self._query_stream(rid, t0, run), media_type="text/event-stream")
        try:
            text, done = await run.collect()
        finally:
            run.cancel()  # no-op when finished; cancels on error or client disconnect
        return JSONResponse(self._query_body(rid, t0, run.first, text, done))

    def _query_body(self, rid: str, t0: float, first: dict, text: str, done: dict) -> dict:
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

    async def _query_stream(self, rid: str, t0: float, run: _Pipeline) -> AsyncIterator[bytes]:
        first = run.first
        parts: list[str] = []
        try:
            yield _sse({"type": "clip", "id": rid, "video": first["video"], "warnings": first["warnings"]})
            async for chunk in run.chunks():
                kind = chunk["type"]
                if kind == "delta":
                    parts.append(chunk["text"])
                    yield _sse({"type": "delta", "text": chunk["text"]})
                elif kind == "error":
                    _, body, _ = to_http(chunk["error"])
                    self.metrics.error(QUERY_ROUTE, chunk["error"].type)
                    yield _sse({"type": "error", **body})
                    break
                elif kind == "done":
                    yield _sse({"type": "done", **self._query_body(rid, t0, first, "".join(parts), chunk)})
        except Exception as e:  # noqa: BLE001 - the status line is sent: report in the stream
            err = client_error(e, rid, self.config.limits.retry_after_s)
            _, body, _ = to_http(err)
            self.metrics.error(QUERY_ROUTE, body["error"]["type"])
            yield _sse({"type": "error", **body})
        finally:
            run.cancel()  # client disconnected (or done): cancel down to the engine
        yield _sse("[DONE]")

    # --- POST /v1/chat/completions ----------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions`` (see :mod:`serve_app.openai_api`)."""
        return await self._serve(request, CHAT_ROUTE, self._chat)

    async def _chat(self, request: Request, rid: str, t0: float, ctx: dict) -> Response:
        cfg = self.config
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise UnsupportedMediaError(f"content type {ctype or '(none)'!r} is not supported: send application/json")
        # A data: URL carries the clip in base64: 4 bytes per 3.
        raw = await read_body(request, cfg.limits.max_upload_bytes * 4 // 3 + FORM_OVERHEAD_BYTES)
        chat, source = openai_api.parse_chat_body(raw, cfg)  # security: frees raw as it goes (issue 13)
        ctx["camera"] = chat.query.camera_id or ctx["camera"]
        del raw
        try:
            run = await self._start(rid, source, chat.query, t0)
        except ServeAppError as e:  # the pipeline names its clip fields in /v1/video/query terms
            if e.param in openai_api.CLIP_PARAMS:
                e.param = openai_api.VIDEO_URL_PARAM
            raise
        cid, created = f"chatcmpl-{rid}", int(time.time())
        if chat.query.stream:
            stream = self._chat_stream(rid, cid, created, run, chat.include_usage)
            return StreamingResponse(stream, media_type="text/event-stream")
        try:
            text, done = await run.collect()
        finally:
            run.cancel()
        return JSONResponse(
            openai_api.chat_completion(
                completion_id=cid,
                created=created,
                model=run.first["model"],
                text=text,
                reason=done.get("finish_reason"),
                prompt_tokens=done.get("prompt_tokens"),
                completion_tokens=done.get("completion_tokens", 0),
            )
        )

    async def _chat_stream(
        self, rid: str, cid: str, created: int, run: _Pipeline, include_usage: bool
    ) -> AsyncIterator[bytes]:
        ids = {"completion_id": cid, "created": created, "model": run.first["model"]}
        try:
            yield _sse(openai_api.chat_chunk(**ids, delta={"role": "assistant", "content": ""}))
            async for chunk in run.chunks():
                kind = chunk["type"]
                if kind == "delta":
                    yield _sse(openai_api.chat_chunk(**ids, delta={"content": chunk["text"]}))
                elif kind == "error":
                    _, body, _ = to_http(chunk["error"])
                    self.metrics.error(CHAT_ROUTE, chunk["error"].type)
                    yield _sse(body)
                    break
                elif kind == "done":
                    yield _sse(openai_api.chat_chunk(**ids, delta={}, reason=chunk.get("finish_reason") or "stop"))
                    if include_usage:
                        u = openai_api.usage(chunk.get("prompt_tokens"), chunk.get("completion_tokens", 0))
                        yield _sse(openai_api.chat_chunk(**ids, usage_obj=u))
        except Exception as e:  # noqa: BLE001 - the status line is sent: report in the stream
            err = client_error(e, rid, self.config.limits.retry_after_s)
            _, body, _ = to_http(err)
            self.metrics.error(CHAT_ROUTE, body["error"]["type"])
            yield _sse(body)
        finally:
            run.cancel()  # client disconnected (or done): cancel down to the engine
        yield _sse("[DONE]")
