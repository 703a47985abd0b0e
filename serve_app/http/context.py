"""What every pipeline route shares: the request context, the access log, one error mapping.

:class:`RouteRunner` runs a route's handler with metrics and an access-log line, maps
every failure to the one error response (:func:`error_response`), and starts a
request's run through the graph (:meth:`RouteRunner.start`) under the configured
request timeout. Ray-free: the handles are injected, the metrics object is any
:class:`~serve_app.metrics.IngressMetrics`-shaped recorder.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from ray.serve.exceptions import BackPressureError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from serve_app.config import AppConfig
from serve_app.errors import ErrorInfo, ServeAppError, error_body, error_value
from serve_app.http.guards.admission import mark_pipeline_full
from serve_app.http.pipeline import ClipRun, ask_again, causes, client_error, start_run
from serve_app.http.query.protocol import ClipQueryFields, frame_sampling_for, sampling_options
from serve_app.http.request_id import header_text, request_id_of
from serve_app.http.sse import StreamEncoder, sse_stream
from serve_app.log_limit import get_logger
from serve_app.protocol import ClipQuestion, ClipSource, Done, Turn
from serve_app.text import log_safe

logger = get_logger(__name__)

#: Longest ``X-Camera-Id`` header logged, characters (the ``camera_id`` field's limit).
MAX_CAMERA_ID_CHARS = 128


def error_response(err: ServeAppError | ErrorInfo) -> JSONResponse:
    """The one JSON error response of every route: status, ``{"error": {...}}`` body, headers
    (e.g. ``Retry-After``). The ``X-Request-Id`` header is Serve's proxy's."""
    info = error_value(err)
    return JSONResponse(error_body(info).model_dump(), status_code=info.status, headers=dict(info.headers))


def json_response(body: BaseModel) -> Response:
    """A pydantic body as an ``application/json`` response (status 200)."""
    return Response(body.model_dump_json(), media_type="application/json")


@dataclasses.dataclass
class RequestContext:
    """One request as the routes see it.

    Attributes:
        request_id: the request's id (:mod:`serve_app.http.request_id`): logs and responses only.
        t0: ``time.perf_counter()`` when the route started, seconds.
        camera: the camera label for the access log (``camera_id`` field or ``X-Camera-Id``).
    """

    request_id: str
    t0: float
    camera: str | None = None

    def elapsed_ms(self) -> float:
        """Milliseconds since the route started."""
        return (time.perf_counter() - self.t0) * 1000


Handler = Callable[[Request, RequestContext], Awaitable[Response]]


class RouteRunner:
    """Runs pipeline routes: context, metrics, access log, error mapping, and the graph's handles.

    Args:
        config: the application config.
        decoder: the ``VideoDecoder`` handle.
        model: the ``VideoModel`` handle.
        metrics: the ingress's metrics (``finished``, ``error``).
    """

    def __init__(self, config: AppConfig, decoder: Any, model: Any, metrics: Any):
        self.config = config
        self.decoder = decoder
        self.model = model
        self.metrics = metrics

    def error_of(self, exc: BaseException, ctx: RequestContext) -> ServeAppError | ErrorInfo:
        """The client-visible error of ``exc`` (see :func:`serve_app.http.pipeline.client_error`)."""
        return client_error(exc, ctx.request_id, self.config.limits.retry_after_s)

    async def run(self, request: Request, route: str, handler: Handler) -> Response:
        """Runs ``handler`` with metrics and an access-log line; any exception becomes the error response."""
        camera = header_text(request.scope, b"x-camera-id", MAX_CAMERA_ID_CHARS)  # as a request id: bounded, escaped
        ctx = RequestContext(request_id_of(request), time.perf_counter(), camera)
        try:
            response = await handler(request, ctx)
            self._finished(route, ctx, response.status_code, None)
            return response
        except asyncio.CancelledError:  # the client went away; finally-blocks cancel the work
            self._finished(route, ctx, 499, None)
            raise
        except Exception as e:  # noqa: BLE001 - mapped to the one error shape
            err = error_value(self.error_of(e, ctx))
            if any(isinstance(c, BackPressureError) for c in causes(e)):  # security: load is knowable
                mark_pipeline_full(request.scope)
            self._finished(route, ctx, err.status, err.type)
            return error_response(err)

    def _finished(self, route: str, ctx: RequestContext, status: int, err_type: str | None) -> None:
        ms = ctx.elapsed_ms()
        self.metrics.finished(route, status, ms, err_type)
        logger.info(
            "request %s camera=%s %s -> %d%s in %.0f ms",
            log_safe(ctx.request_id),
            log_safe(ctx.camera or "-"),
            route,
            status,
            f" ({err_type})" if err_type else "",
            ms,
        )

    async def start(
        self,
        ctx: RequestContext,
        source: ClipSource,
        question: str,
        fields: ClipQueryFields,
        *,
        system_prompt: str | None = None,
        history: tuple[Turn, ...] = (),
        stop: tuple[str, ...] = (),
        clip_id: str | None = None,
    ) -> ClipRun:
        """Starts the request's run (see :func:`serve_app.http.pipeline.start_run`) under ``limits.request_timeout_s``
        counted from ``ctx.t0``, with the config's defaults filled into ``fields``.

        ``system_prompt`` (None: the configured one), ``history`` (later turns of a conversation about
        the clip) and ``stop`` (stop strings) are the chat route's; ``clip_id`` the shared identity of a
        clip asked several questions; see :class:`serve_app.protocol.ClipQuestion`.
        """
        cfg = self.config
        remaining_s = cfg.limits.request_timeout_s - (time.perf_counter() - ctx.t0)
        sampling = dataclasses.replace(sampling_options(fields, cfg), stop=stop)
        return await start_run(
            self.decoder,
            self.model,
            source=source,
            sample=frame_sampling_for(fields, cfg),
            question=ClipQuestion(ctx.request_id, question, sampling, system_prompt=system_prompt, history=history,
                                  clip_id=clip_id),
            deadline=asyncio.get_running_loop().time() + remaining_s,
        )

    async def ask_again(
        self, ctx: RequestContext, run: ClipRun, question: str, fields: ClipQueryFields, clip_id: str
    ) -> ClipRun:
        """Asks one more question about ``run``'s clip (see :func:`serve_app.http.pipeline.ask_again`)."""
        sampling = sampling_options(fields, self.config)
        return await ask_again(self.model, run, ClipQuestion(ctx.request_id, question, sampling, clip_id=clip_id))

    def stream(self, route: str, ctx: RequestContext, run: ClipRun, encoder: StreamEncoder) -> StreamingResponse:
        """``run`` as server-sent events (:func:`serve_app.http.sse.sse_stream`), errors counted for ``route``."""
        events = sse_stream(
            run,
            encoder,
            error_of=lambda e: self.error_of(e, ctx),
            count_error=lambda error_type: self.metrics.error(route, error_type),
        )
        return StreamingResponse(events, media_type="text/event-stream")

    @staticmethod
    async def collect(run: ClipRun) -> tuple[str, Done]:
        """The whole answer of ``run`` (see :meth:`ClipRun.collect`); the run is cancelled on any exit
        (a no-op once finished; on an error or a client that went away, it stops the generation)."""
        try:
            return await run.collect()
        finally:
            run.cancel()
