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
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib import resources
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from serve_app.cameras.protocol import EventBatch, StreamCreate, StreamList
from serve_app.cameras.rules import check_stream_limits
from serve_app.cameras.shards import Cursor, shard_of
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
#: Seconds before the merged event stream polls a stream worker again that failed (several workers only).
WORKER_RETRY_S = 1.0


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

    With several stream workers (``streams.workers``), a request about one stream goes to the worker that
    owns it (:func:`serve_app.cameras.shards.shard_of`), a new stream to the next worker in turn (the
    following ones when it answers 503: full), the list and ``GET /v1/events`` to all of them.

    Args:
        runner: the ingress's route runner (config, metrics, error mapping).
        workers: the ``StreamWorker`` handles, worker ``k`` at index ``k``.
    """

    def __init__(self, runner: RouteRunner, workers: Sequence[Any]):
        if not workers:
            raise ValueError("the streams routes need at least one stream worker")
        self.runner = runner
        self.config = runner.config
        self.workers = list(workers)
        self._turn = 0  # the worker asked first for the next new stream

    def _owner(self, stream_id: str) -> Any:
        """The handle of the worker that owns ``stream_id``."""
        return self.workers[shard_of(stream_id, len(self.workers))]

    async def create(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            require_json(req)  # security: a web page cannot send application/json cross-site without a preflight
            body = parse_json_object(await read_body(req, MAX_BODY_BYTES))
            spec = await asyncio.to_thread(validate_stream, body, self.config)  # DNS lookups off the loop
            n = len(self.workers)
            first, self._turn = self._turn % n, self._turn + 1
            for i in range(n):  # each worker in turn; a full one (503) passes the stream on to the next
                result = await self.workers[(first + i) % n].create.remote(spec)
                if not (isinstance(result, ErrorInfo) and result.status == 503):
                    break
            status = _value(result)
            return Response(status.model_dump_json(), status_code=201, media_type="application/json")

        return await self.runner.run(request, ROUTE, handle)

    async def list(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            lists: list[StreamList] = await asyncio.gather(*(w.list.remote() for w in self.workers))
            streams = sorted((s for part in lists for s in part.data), key=lambda s: s.created_at)
            return json_response(StreamList(data=streams))

        return await self.runner.run(request, ROUTE, handle)

    async def get(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            return json_response(_value(await self._owner(req.path_params["id"]).get.remote(req.path_params["id"])))

        return await self.runner.run(request, ROUTE + "/{id}", handle)

    async def delete(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            return json_response(_value(await self._owner(req.path_params["id"]).delete.remote(req.path_params["id"])))

        return await self.runner.run(request, ROUTE + "/{id}", handle)

    async def thumbnail(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            sid = req.path_params["id"]
            jpeg = _value(await self._owner(sid).thumbnail.remote(sid))
            if jpeg is None:
                return Response(status_code=204)
            return Response(jpeg, media_type="image/jpeg", headers={"cache-control": "no-store"})

        return await self.runner.run(request, ROUTE + "/{id}/thumbnail", handle)

    async def answers(self, request: Request) -> Response:
        async def handle(req: Request, ctx: RequestContext) -> Response:
            sid = req.path_params["id"]
            rows = _value(await self._owner(sid).answers.remote(sid, self.config.streams.answer_history))
            return JSONResponse({"object": "list", "data": [e.model_dump(mode="json") for e in rows]})

        return await self.runner.run(request, ROUTE + "/{id}/answers", handle)

    async def events(self, request: Request) -> Response:
        """Server-sent events of one stream (``/v1/streams/{id}/events``) or of all (``/v1/events``, every
        worker's merged: each event's ``id`` is the :class:`~serve_app.cameras.shards.Cursor` after it)."""
        stream_id = request.path_params.get("id")
        route = EVENTS_ROUTE if stream_id is None else ROUTE + "/{id}/events"

        async def handle(req: Request, ctx: RequestContext) -> Response:
            raw = req.headers.get("last-event-id") or req.query_params.get("after")
            cursor = Cursor.parse(raw, len(self.workers))  # 400 on a malformed id
            if stream_id is None:
                handles, after = self.workers, cursor.after
            else:
                k = shard_of(stream_id, len(self.workers))
                handles, after = [self.workers[k]], (cursor.after[k],)
            # The subscriber cap is the admission guard's (streams.max_subscribers, taken before any await).
            # The first poll answers at once: a 404 for an unknown stream is a status, not an event.
            firsts: list[EventBatch | ErrorInfo] = await asyncio.gather(
                *(h.events.remote(a, stream_id, 0.0) for h, a in zip(handles, after, strict=True))
            )
            batches: list[EventBatch] = [_value(b) for b in firsts]
            start = Cursor(tuple(b.last_id if a is None else a for a, b in zip(after, batches, strict=True)))
            return StreamingResponse(self._events(handles, batches, start, stream_id), media_type="text/event-stream",
                                     headers={"cache-control": "no-store", "x-accel-buffering": "no"})

        return await self.runner.run(request, route, handle)

    async def _events(
        self, handles: Sequence[Any], batches: Sequence[EventBatch], cursor: Cursor, stream_id: str | None
    ) -> AsyncIterator[bytes]:
        """The event stream: each worker's batch is sent as it comes, then that worker is polled again
        (a long poll of up to :data:`POLL_S`). A worker that fails a poll (its replica died or is being
        replaced): with one worker the stream ends with an ``error`` event (the client reconnects with its
        Last-Event-ID); with several a comment says so, the others' events go on, and that worker is polled
        again after :data:`WORKER_RETRY_S` from its position. A deleted stream ends it with an ``error`` event."""
        yield b": stream of events; reconnect with Last-Event-ID to resume\n\n"
        ready: list[tuple[int, EventBatch]] = list(enumerate(batches))
        pending: dict[asyncio.Future[EventBatch | ErrorInfo], int] = {}
        try:
            while True:
                for k, batch in ready:
                    chunks, cursor = _batch_events(k, batch, cursor)
                    for chunk in chunks:
                        yield chunk
                if any(not batch.events for _, batch in ready):
                    yield b": keep-alive\n\n"
                for k, _ in ready:
                    pending[asyncio.ensure_future(_poll(handles[k], cursor.after[k], stream_id))] = k
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                ready = []
                for task in done:
                    k = pending.pop(task)
                    try:
                        result = task.result()
                    except Exception as e:  # noqa: BLE001 - the worker replica died or is being replaced
                        if len(handles) > 1:  # the other workers' events go on; this one's when it is back
                            LOG_LIMIT.log(logger, logging.INFO, "event stream worker unavailable",
                                          "event stream: stream worker %d unavailable (%s); polling it again", k,
                                          type(e).__name__)  # fmt: skip
                            yield f": stream worker {k} unavailable; its events follow when it is back\n\n".encode()
                            retry = _poll(handles[k], cursor.after[k], stream_id, delay_s=WORKER_RETRY_S)
                            pending[asyncio.ensure_future(retry)] = k
                            continue
                        LOG_LIMIT.log(logger, logging.INFO, "event stream worker unavailable",
                                      "event stream ended: stream worker unavailable (%s)", type(e).__name__)
                        restarting = OverloadedError("the stream worker is restarting; reconnect with Last-Event-ID")
                        yield sse_event(ErrorEvent(error=error_body(restarting).error), event="error")
                        return
                    if isinstance(result, ErrorInfo):  # the stream was deleted
                        gone = ErrorInfo(type=result.type, message="stream gone", status=result.status)
                        yield sse_event(ErrorEvent(error=error_body(gone).error), event="error")
                        return
                    ready.append((k, result))
                ready.sort()
        finally:
            for task in pending:
                task.cancel()


def _batch_events(shard: int, batch: EventBatch, cursor: Cursor) -> tuple[list[bytes], Cursor]:
    """The SSE bytes of one worker's batch (each event with the cursor after it as its ``id``) and the cursor
    after the batch (at the worker's newest id when the batch is empty)."""
    out = [b": some events fell out of the server's history\n\n"] if batch.missed else []
    for e in batch.events:
        cursor = cursor.moved(shard, e.id)
        out.append(sse_event(e, event=e.type, event_id=cursor.text()))
    if not batch.events:
        cursor = cursor.moved(shard, batch.last_id)
    return out, cursor


async def _poll(handle: Any, after: int | None, stream_id: str | None, delay_s: float = 0.0) -> EventBatch | ErrorInfo:
    """One long poll of a stream worker (up to :data:`POLL_S`), sent after ``delay_s`` (a worker that just
    failed: Serve holds the poll until its replacement is up)."""
    if delay_s:
        await asyncio.sleep(delay_s)
    result: EventBatch | ErrorInfo = await handle.events.remote(after, stream_id, POLL_S)
    return result


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
