"""The streams routes: register cameras, read their state, follow their events, the dashboard page.

* ``POST /v1/streams`` → 201 :class:`~serve_app.cameras.protocol.StreamStatus`
* ``GET /v1/streams``, ``GET /v1/streams/{id}``, ``DELETE /v1/streams/{id}``
* ``GET /v1/streams/{id}/thumbnail`` (JPEG of the latest answered window), ``GET /v1/streams/{id}/answers``
* ``GET /v1/streams/{id}/events``, ``GET /v1/events``: server-sent events
  (``id:``/``event:``/``data:``), replay after ``Last-Event-ID`` (or ``?after=``) from the worker's
  bounded history; at most ``streams.max_subscribers`` at once per ingress replica (beyond: 503, from the
  admission guard, :mod:`serve_app.deployments.ingress_guards`).
* ``GET /`` and ``GET /dashboard``: the static dashboard page (no data in it: it asks for the key), and its
  script and style sheet under ``/static/``; all three with a Content-Security-Policy (nothing inline).

Validation happens here, before the worker sees a stream: the body's shape
(:class:`~serve_app.cameras.protocol.StreamCreate`), the configured limits, and the source and
webhook URLs through the same checks as clip sources (:mod:`serve_app.sources.rules`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from serve_app.cameras.protocol import EventBatch, StreamCreate
from serve_app.cameras.rules import check_stream_limits
from serve_app.config import AppConfig
from serve_app.errors import (
    ErrorEvent,
    ErrorInfo,
    InvalidRequestError,
    OverloadedError,
    ServeAppError,
    error_body,
)
from serve_app.http.context import (
    RequestContext,
    RouteRunner,
    json_response,
)
from serve_app.http.json_body import parse_json_object, read_body, require_json, validation_error
from serve_app.http.sse import sse_event
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.sources.rules import check_url, normalize_url, resolve_local_path, url_scheme

logger = get_logger(__name__)

ROUTE = "/v1/streams"
EVENTS_ROUTE = "/v1/events"
DASHBOARD_ROUTES = ("/", "/dashboard")
#: Largest POST /v1/streams body, bytes.
MAX_BODY_BYTES = 64 * 1024
#: Seconds one long poll of the worker waits for events (a keep-alive comment is sent after each empty one).
POLL_S = 15.0


def _as_param(e: ServeAppError, param: str) -> ServeAppError:
    """A source-check error re-labelled for the streams API's field name."""
    e.message = e.message.replace("video_url", param).replace("video_path", param)
    e.param = param
    return e


def validate_stream(body: dict[str, Any], config: AppConfig) -> StreamCreate:
    """The body of ``POST /v1/streams`` checked against the schema, the limits and the source rules.

    Raises:
        InvalidRequestError (400): a malformed field, a value over a ``streams.*``/``limits.*`` limit
            (the message names it), a URL scheme that is not a camera's.
        ForbiddenSourceError (403) / NotFoundError (404) / UnprocessableClipError (422): the source or
            webhook fails the source checks (:func:`serve_app.sources.rules.check_url`, ``resolve_local_path``).
    """
    try:
        spec = StreamCreate.model_validate(body)
    except ValidationError as e:
        raise validation_error(e) from None
    check_stream_limits(spec, config)
    lim = config.limits
    try:
        if url_scheme(spec.url) is not None:
            check_url(spec.url, config.sources)
        else:
            resolve_local_path(spec.url, config.sources.allowed_roots, lim.max_upload_bytes)
    except ServeAppError as e:
        raise _as_param(e, "url") from None
    if spec.webhook is not None:
        if url_scheme(spec.webhook) not in ("http", "https"):
            raise InvalidRequestError("webhook must be an http:// or https:// URL", param="webhook")
        try:
            check_url(spec.webhook, config.sources)
        except ServeAppError as e:
            raise _as_param(e, "webhook") from None
    # Stored with their schemes in lower case: the reader and the webhooks see what was checked.
    webhook = None if spec.webhook is None else normalize_url(spec.webhook)
    return spec.model_copy(update={"url": normalize_url(spec.url), "webhook": webhook})


def _value(result: Any) -> Any:
    """A worker result: raises its :class:`ErrorInfo`, else returns it."""
    if isinstance(result, ErrorInfo):
        result.raise_()
    return result


class StreamsServing:
    """The streams routes (see the module docstring).

    Args:
        runner: the ingress's route runner (config, metrics, error mapping).
        worker: the ``StreamWorker`` handle.
    """

    def __init__(self, runner: RouteRunner, worker: Any):
        self.runner = runner
        self.config = runner.config
        self.worker = worker

    async def create(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            require_json(req)  # security: a web page cannot send application/json cross-site without a preflight
            body = parse_json_object(await read_body(req, MAX_BODY_BYTES))
            spec = await asyncio.to_thread(validate_stream, body, self.config)  # DNS lookups off the loop
            status = _value(await self.worker.create.remote(spec))
            return Response(status.model_dump_json(), status_code=201, media_type="application/json")

        return await self.runner.run(request, ROUTE, handle)

    async def list(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            return json_response(await self.worker.list.remote())

        return await self.runner.run(request, ROUTE, handle)

    async def get(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            return json_response(_value(await self.worker.get.remote(req.path_params["id"])))

        return await self.runner.run(request, ROUTE + "/{id}", handle)

    async def delete(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            return json_response(_value(await self.worker.delete.remote(req.path_params["id"])))

        return await self.runner.run(request, ROUTE + "/{id}", handle)

    async def thumbnail(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            jpeg = _value(await self.worker.thumbnail.remote(req.path_params["id"]))
            if jpeg is None:
                return Response(status_code=204)
            return Response(jpeg, media_type="image/jpeg", headers={"cache-control": "no-store"})

        return await self.runner.run(request, ROUTE + "/{id}/thumbnail", handle)

    async def answers(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            rows = _value(await self.worker.answers.remote(req.path_params["id"], self.config.streams.answer_history))
            return JSONResponse({"object": "list", "data": [e.model_dump(mode="json") for e in rows]})

        return await self.runner.run(request, ROUTE + "/{id}/answers", handle)

    async def events(self, request: Request) -> Response:
        """Server-sent events of one stream (``/v1/streams/{id}/events``) or of all (``/v1/events``)."""
        stream_id = request.path_params.get("id")
        route = EVENTS_ROUTE if stream_id is None else ROUTE + "/{id}/events"

        async def handle(req: Request, ctx: RequestContext) -> Response:
            raw = req.headers.get("last-event-id") or req.query_params.get("after")
            try:
                after = int(raw) if raw not in (None, "") else None
            except ValueError:
                raise InvalidRequestError(
                    "Last-Event-ID must be an event id (an integer)", param="Last-Event-ID"
                ) from None
            # The subscriber cap is the admission guard's (streams.max_subscribers, taken before any await).
            # The first poll answers at once: a 404 for an unknown stream is a status, not an event.
            first: EventBatch = _value(await self.worker.events.remote(after, stream_id, 0.0))
            return StreamingResponse(self._events(first, stream_id), media_type="text/event-stream",
                                     headers={"cache-control": "no-store", "x-accel-buffering": "no"})

        return await self.runner.run(request, route, handle)

    async def _events(self, batch: EventBatch, stream_id: str | None) -> AsyncIterator[bytes]:
        last = batch.last_id
        yield b": stream of events; reconnect with Last-Event-ID to resume\n\n"
        while True:
            if batch.missed:
                yield b": some events fell out of the server's history\n\n"
            for e in batch.events:
                yield sse_event(e, event=e.type, event_id=e.id)
                last = e.id
            if not batch.events:
                yield b": keep-alive\n\n"
                last = max(last, batch.last_id)
            try:
                result = await self.worker.events.remote(last, stream_id, POLL_S)
            except Exception as e:  # noqa: BLE001 - the worker replica died or is being replaced
                LOG_LIMIT.log(logger, logging.INFO, "event stream worker unavailable",
                              "event stream ended: stream worker unavailable (%s)", type(e).__name__)
                restarting = OverloadedError("the stream worker is restarting; reconnect with Last-Event-ID")
                yield sse_event(ErrorEvent(error=error_body(restarting).error), event="error")
                return
            if isinstance(result, ErrorInfo):  # the stream was deleted
                gone = ErrorInfo(type=result.type, message="stream gone", status=result.status)
                yield sse_event(ErrorEvent(error=error_body(gone).error), event="error")
                return
            batch = result


#: The dashboard's script and style sheet: route (the page names them relative to its own path, so it
#: also works under a route prefix) → (file in ``serve_app/cameras/static``, media type).
DASHBOARD_ASSETS = {
    "/static/dashboard.js": ("dashboard.js", "text/javascript"),
    "/static/dashboard.css": ("dashboard.css", "text/css"),
}
#: The page's Content-Security-Policy: scripts, styles, fetches and images from this server only (``blob:``
#: images: thumbnails are fetched with the Authorization header, then shown from a blob URL), nothing
#: inline, no plugins, no other base URL or form target, and no framing by any other page.
DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: Headers of the page and its assets: the CSP, no framing (also for browsers without
#: ``frame-ancestors``), no content sniffing, no referrer, and no caching of an old page.
DASHBOARD_HEADERS = {
    "content-security-policy": DASHBOARD_CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def _static(name: str) -> str:
    return resources.files("serve_app.cameras").joinpath(f"static/{name}").read_text(encoding="utf-8")


async def dashboard(request: Request) -> Response:
    """``GET /`` and ``GET /dashboard``: the static page (served without the key; it asks for it),
    with :data:`DASHBOARD_HEADERS`."""
    return HTMLResponse(_static("dashboard.html"), headers=DASHBOARD_HEADERS)


def dashboard_asset(route: str) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of one of :data:`DASHBOARD_ASSETS` (no key needed: no data in it), with
    :data:`DASHBOARD_HEADERS`."""
    name, media_type = DASHBOARD_ASSETS[route]

    async def endpoint(request: Request) -> Response:
        return Response(_static(name), media_type=media_type, headers=DASHBOARD_HEADERS)

    return endpoint
