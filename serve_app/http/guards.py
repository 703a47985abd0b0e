"""Request-level defences of the ingress: pure ASGI middlewares and helpers (Ray-free).

Each middleware answers a hostile or overloading request itself, in the
project's error shape, through a ``reject(scope, receive, send, error)``
callback (the ingress's, which counts and logs it):

* :class:`DisconnectAsEnd`: a client that went away reaches the routes as an
  ``http.disconnect`` message (Ray's replica raised ``TaskCancelledError`` from ``receive``).
* :class:`ControlHeaderGuard`: Ray Serve's per-request control headers
  (``x-request-disconnect-disabled`` turns off cancellation on disconnect,
  ``x-request-timeout-seconds`` …) are the operator's, not the client's: 400
  naming the header, on every route.
* :class:`CrossSiteGuard`: a state-changing request (POST, PUT, PATCH, DELETE) that a
  web page of another site sent (``Origin`` / ``Sec-Fetch-Site``) is refused with 403,
  unless its origin is in ``security.allowed_origins``; requests without these browser
  headers (curl, SDKs) pass.
* :class:`AdmissionGuard`: every route but the health checks and the event
  subscriptions is admitted up to a number of requests per ingress replica
  (``ingress.max_ongoing_requests``), those with a body also per client
  (``security.max_requests_per_client``: 429), before the body is read; Ray
  Serve's slot count is that plus the subscriber slots plus
  ``security.reserved_slots``, so ``/healthz`` and ``/readyz`` never queue behind
  uploads, slow bodies or subscribers. It also refuses a clip request before its
  body when the pipeline behind is known to be full: the last clip request to
  end was refused by a full decoder or model queue (:func:`mark_pipeline_full`)
  less than ``retry_after_s`` ago.
* :class:`BodyGuard`: wraps ``receive``: a body must arrive within
  ``body_timeout_s + received / body_min_rate_bytes_s`` seconds (408), is counted
  as it streams and cut off at its route's limit (413, nothing more read, chunked
  or not), and large bodies (``security.large_body_bytes``) are limited in
  number (503).

Also :class:`SharedResult` (one call shared by concurrent callers and reused
for a TTL: the readiness check's controller round trip) and
:func:`client_key` (the identity of per-client limits). Escaping logged fields: :mod:`serve_app.text`.

Errors raised inside ``receive`` reach the route handler, which maps them as
every other :class:`serve_app.errors.ServeAppError`; if one escapes a handler
before the response starts, the middleware sends it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Generic, TypeVar

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve_app.errors import (
    CrossSiteRequestError,
    InvalidRequestError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ServeAppError,
    TooManyRequestsError,
)

logger = logging.getLogger(__name__)

Reject = Callable[[Scope, Receive, Send, ServeAppError], Awaitable[None]]
#: Scope key the route sets when the pipeline refused the request for load (a full decoder or model
#: queue: Serve's ``BackPressureError``); see :func:`mark_pipeline_full`.
PIPELINE_FULL = "serve_app.pipeline_full"


def mark_pipeline_full(scope: Scope) -> None:
    """Records on the request's scope that the pipeline refused it for load (a full queue).

    :class:`AdmissionGuard` then refuses new clip requests before their body until a request
    ends otherwise (at most ``retry_after_s``). A replica that died under a request is not load:
    do not mark it.
    """
    scope[PIPELINE_FULL] = True
T = TypeVar("T")


def app_path(scope: Scope) -> str:
    """The request path below the app's mount point (Serve's route prefix is the ASGI ``root_path``)."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    return path or "/"


def header_map(scope: Scope) -> Headers:
    """The request's headers (Starlette's case-insensitive, read-only view of ``scope["headers"]``)."""
    return Headers(scope=scope)


# --------------------------------------------------------------------------- client disconnects


class DisconnectAsEnd:
    """ASGI middleware: a client that went away is an ``http.disconnect`` message, never an exception.

    Ray Serve's replica reads a request's ASGI messages from its proxy; once the client has gone the
    proxy cancels that read, and the replica's ``receive()`` raises Ray's ``TaskCancelledError``
    instead of returning ``http.disconnect``. Starlette's event streams (which listen for the
    disconnect) and body reads then failed with it: closing many event subscriptions logged
    ``ERROR … Request failed`` with ``TaskCancelledError`` tracebacks and "Future exception was never
    retrieved"; a body cut off by its client could be a 500. Here those errors become the disconnect
    message, which Starlette handles as the normal end it is (an event stream stops, a body read
    raises ``ClientDisconnect``: 499).

    Args:
        app: the wrapped ASGI app.
        disconnect_errors: exception types a ``receive()`` raises for a client that went away
            (the ingress passes Ray's ``TaskCancelledError``).
    """

    def __init__(self, app: ASGIApp, disconnect_errors: tuple[type[BaseException], ...]):
        self.app = app
        self.errors = disconnect_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.errors:
            await self.app(scope, receive, send)
            return
        gone = False

        async def receive_or_disconnect() -> Message:
            nonlocal gone
            if gone:
                return {"type": "http.disconnect"}
            try:
                return await receive()
            except self.errors:
                gone = True
                return {"type": "http.disconnect"}

        await self.app(scope, receive_or_disconnect, send)


# --------------------------------------------------------------------------- control headers


class ControlHeaderGuard:
    """ASGI middleware: 400 for a request carrying any of ``headers`` (``_`` and ``-`` alike, any case).

    Ray's proxy acts on its control headers before the ingress runs; refusing them here
    turns the request away before it costs anything (a long generation that its client
    made uncancellable, a replica pinned by a session id). Fronting proxies should strip
    them as well (README, Security).

    Args:
        app: the wrapped ASGI app.
        headers: refused header names.
        reject: sends the error response.
    """

    def __init__(self, app: ASGIApp, headers: Iterable[str], reject: Reject):
        self.app = app
        self.refused = frozenset(_norm(h) for h in headers)
        self.reject = reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.refused:
            for name in Headers(scope=scope):
                if _norm(name) in self.refused:
                    shown = name.lower()
                    err = InvalidRequestError(
                        f"header {shown!r} is a Ray Serve control header and is not accepted from clients; "
                        "remove it",
                        param=shown,
                    )
                    await self.reject(scope, receive, send, err)
                    return
        await self.app(scope, receive, send)


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


# --------------------------------------------------------------------------- cross-site requests

#: Methods that change state: a web page of another site must not be able to send them here.
STATE_CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def origin_of(value: str) -> str | None:
    """``scheme://host[:port]`` of an ``Origin`` header or a configured origin, lower case, the default
    port left out; None for ``null`` or anything that is not an http(s) origin."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in ("http", "https") or not host:
        return None
    host = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return f"{scheme}://{host}" + (f":{port}" if port and port != default else "")


class CrossSiteGuard:
    """ASGI middleware: 403 for a state-changing request (POST, PUT, PATCH, DELETE) that a web page of
    another site sent (cross-site request forgery).

    A browser says where a request comes from: ``Sec-Fetch-Site`` (``same-origin``, ``same-site``,
    ``cross-site``, ``none``) and ``Origin``. A request is refused when ``Sec-Fetch-Site`` is
    ``cross-site`` or ``same-site``, or, without it, when ``Origin`` is present and is neither this
    server's own origin (its host and port are the request's ``Host``) nor one of ``allowed_origins``
    (``null``, a sandboxed or file page, is never allowed); an allowed origin passes either way.
    Requests without both headers (curl, SDKs, other servers) pass: only browsers send them, and a
    browser always does on a cross-site POST. A page of another site could otherwise register
    cameras and webhooks on a server without an API key (a ``text/plain`` or ``multipart/form-data``
    POST needs no CORS preflight).

    Args:
        app: the wrapped ASGI app.
        allowed_origins: origins whose pages may send such requests (``security.allowed_origins``).
        reject: sends the error response.
    """

    def __init__(self, app: ASGIApp, allowed_origins: Iterable[str], reject: Reject):
        self.app = app
        self.allowed = frozenset(o for o in (origin_of(x) for x in allowed_origins) if o)
        self.reject = reject

    def refuses(self, headers: Headers) -> bool:
        """Whether a state-changing request with these headers came from another site's page."""
        site = headers.get("sec-fetch-site", "").strip().lower()
        raw_origin = headers.get("origin")
        origin = origin_of(raw_origin) if raw_origin is not None else None
        if origin is not None and origin in self.allowed:
            return False
        if site in ("cross-site", "same-site"):
            return True
        if site in ("same-origin", "none"):  # the browser's own word: this origin, or the user typed it
            return False
        if raw_origin is None:
            return False  # not a browser's cross-site request (curl, SDKs)
        host = headers.get("host", "").strip().lower()
        return origin is None or origin.split("://", 1)[1] != _authority(host, origin.split("://", 1)[0])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        changes_state = scope["type"] == "http" and scope.get("method") in STATE_CHANGING_METHODS
        if changes_state and self.refuses(Headers(scope=scope)):
            err = CrossSiteRequestError(
                "cross-site request refused: a web page of another origin may not change this server's "
                "state (the request's Origin / Sec-Fetch-Site headers say so); list a trusted origin in "
                "security.allowed_origins. Requests without these browser headers (curl, SDKs) are not "
                "affected",
                param="Origin",
            )
            await self.reject(scope, receive, send, err)
            return
        await self.app(scope, receive, send)


def _authority(host: str, scheme: str) -> str:
    """A ``Host`` header as an origin's ``host[:port]`` (the scheme's default port left out)."""
    default = ":443" if scheme == "https" else ":80"
    return host[: -len(default)] if host.endswith(default) else host


# --------------------------------------------------------------------------- admission


@dataclasses.dataclass
class AdmissionState:
    """Counters of one ingress replica's admission (read by tests and metrics).

    Attributes:
        in_flight: requests admitted and not finished (event subscriptions apart).
        subscribers: event subscriptions admitted and not ended.
        per_client: admitted requests with a body per client key.
        saturated_until: ``time.monotonic()`` until which new clip requests are refused
            for load (0: not saturated).
        refused: requests refused so far, by reason (``busy``, ``client_limit``, ``saturated``, ``subscribers``).
    """

    in_flight: int = 0
    subscribers: int = 0
    per_client: dict[str, int] = dataclasses.field(default_factory=dict)
    saturated_until: float = 0.0
    refused: dict[str, int] = dataclasses.field(default_factory=dict)


#: Methods whose requests carry a body (the per-client limit counts these).
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class AdmissionGuard:
    """ASGI middleware: admits requests by count, before their body is read.

    Every request is admitted here but those ``exempt`` says pass (the health checks, answered
    from the slots Serve keeps for them): event subscriptions (``subscriber`` paths) up to
    ``max_subscribers`` at once, every other request up to ``max_in_flight`` at once per ingress
    replica (503 past either), those with a body also up to ``max_per_client`` per client (429),
    and the clip routes (``pipeline_paths``) not while the pipeline behind is known to be full.
    So no route, with or without a body, can hold the slots kept for the health checks.

    A request's place is taken before anything is awaited and given back when its response has
    ended, however it ends (an event stream: when its client leaves): concurrent requests can
    never overshoot a cap (was: 40 of 40 simultaneous subscriptions got in past a cap of 16,
    counted after the first call to the stream worker).

    Args:
        app: the wrapped ASGI app.
        exempt: ``exempt(path)`` → True for paths (below the route prefix) that pass untouched.
        pipeline_paths: the clip routes, refused before their body while the pipeline is full.
        subscriber: ``subscriber(path)`` → True for event subscriptions (counted apart).
        max_subscribers: event subscriptions this replica holds at once; more get 503 + ``Retry-After``.
        max_in_flight: requests this replica admits at once; more get 503 + ``Retry-After``.
        max_per_client: requests with a body one client holds at once (None: no limit); more get
            429 + ``Retry-After``.
        client_key: ``client_key(scope, headers)`` → the client's identity (see :func:`client_key`).
        retry_after_s: the ``Retry-After`` value, seconds; also how long, at most, a 503 for
            load from the pipeline makes new clip requests be refused before their body.
        reject: sends the error response.
        clock: ``time.monotonic``-like (tests inject one).
    """

    def __init__(
        self,
        app: ASGIApp,
        exempt: Callable[[str], bool],
        pipeline_paths: Iterable[str],
        max_in_flight: int,
        max_per_client: int | None,
        client_key: Callable[[Scope, Mapping[str, str]], str],
        retry_after_s: int,
        reject: Reject,
        subscriber: Callable[[str], bool] = lambda path: False,
        max_subscribers: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.app = app
        self.exempt = exempt
        self.pipeline_paths = frozenset(pipeline_paths)
        self.subscriber = subscriber
        self.max_subscribers = max_subscribers
        self.max_in_flight = max_in_flight
        self.max_per_client = max_per_client
        self.client_key = client_key
        self.retry_after_s = retry_after_s
        self.reject = reject
        self.clock = clock
        self.state = AdmissionState()

    def _refuse(self, reason: str) -> ServeAppError:
        self.state.refused[reason] = self.state.refused.get(reason, 0) + 1
        retry = max(1, self.retry_after_s)
        if reason == "subscribers":
            return OverloadedError(
                f"{self.state.subscribers} event subscribers are connected; the limit is {self.max_subscribers} "
                f"(streams.max_subscribers); retry after {retry} s",
                retry_after_s=retry,
            )
        if reason == "client_limit":
            return TooManyRequestsError(
                f"this client already has {self.max_per_client} requests in progress (the per-client limit, "
                f"security.max_requests_per_client); retry after {retry} s",
                retry_after_s=retry,
            )
        why = (
            f"{self.max_in_flight} requests in progress (ingress.max_ongoing_requests)"
            if reason == "busy"
            else "the decode and model queues are full"
        )
        return OverloadedError(f"server busy: {why}; retry after {retry} s", retry_after_s=retry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: C901 - an ASGI guard: one branch per message type and limit, in the order the bytes arrive
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = app_path(scope)
        if self.exempt(path):
            await self.app(scope, receive, send)
            return
        st = self.state
        if self.subscriber(path):
            if st.subscribers >= self.max_subscribers:
                await self.reject(scope, receive, send, self._refuse("subscribers"))
                return
            st.subscribers += 1  # taken before any await: simultaneous subscriptions cannot overshoot
            try:
                await self.app(scope, receive, send)
            finally:
                st.subscribers -= 1
            return
        per_client = scope.get("method", "GET") in BODY_METHODS
        pipeline = path in self.pipeline_paths
        key = self.client_key(scope, header_map(scope)) if per_client else ""
        err = None
        if st.in_flight >= self.max_in_flight:
            err = self._refuse("busy")
        elif per_client and self.max_per_client is not None and st.per_client.get(key, 0) >= self.max_per_client:
            err = self._refuse("client_limit")
        elif pipeline and st.saturated_until > self.clock():
            err = self._refuse("saturated")
        if err is not None:
            await self.reject(scope, receive, send, err)
            return
        st.in_flight += 1
        if per_client:
            st.per_client[key] = st.per_client.get(key, 0) + 1
        try:
            await self.app(scope, receive, send)
        finally:
            st.in_flight -= 1
            if per_client:
                left = st.per_client.get(key, 1) - 1
                if left > 0:
                    st.per_client[key] = left
                else:
                    st.per_client.pop(key, None)
            if pipeline:
                if scope.get(PIPELINE_FULL):
                    st.saturated_until = self.clock() + max(1, self.retry_after_s)
                else:  # a clip request ended (answered, failed or abandoned by its client): a slot may be free
                    st.saturated_until = 0.0


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request presents: ``Authorization: Bearer …`` first, then ``X-API-Key``; else None."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    key = headers.get("x-api-key", "").strip()
    return key or None


def client_key(scope: Scope, headers: Mapping[str, str], identity: str = "address", keys_on: bool = False) -> str:
    """The identity of a request's client for per-client limits.

    ``identity="api_key"`` with API keys on: a hash of the presented key (the key itself
    is never kept); otherwise the client's IP address as the ingress sees it (Ray's
    proxy passes the TCP peer: behind a fronting proxy, every client is the proxy).
    """
    if identity == "api_key" and keys_on:
        key = presented_key(headers)
        if key:
            return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]
    client = scope.get("client")
    host = client[0] if isinstance(client, (tuple, list)) and client else "unknown"
    return f"addr:{host}"


# --------------------------------------------------------------------------- bodies


@dataclasses.dataclass
class BodyState:
    """Counters of one ingress replica's bodies (read by tests).

    Attributes:
        large_in_flight: large bodies being received or held now.
        timed_out: bodies cut off for arriving too slowly (408).
        too_large: bodies cut off at their limit (413).
        max_bytes_read: the most bytes read of any one body so far.
    """

    large_in_flight: int = 0
    timed_out: int = 0
    too_large: int = 0
    max_bytes_read: int = 0


class BodyGuard:
    """ASGI middleware: deadlines, streaming size limits and a large-body count for request bodies.

    Args:
        app: the wrapped ASGI app.
        max_bytes: path → the largest body accepted there, bytes (paths absent: no size limit,
            but the deadline and large-body count still apply).
        timeout_s: seconds a body may take on top of ``received / min_rate_bytes_s``.
        min_rate_bytes_s: slowest accepted average rate, bytes/s.
        large_body_bytes: a body over this size (declared or received) is large.
        max_large_bodies: large bodies received or held at once; more: 503.
        retry_after_s: ``Retry-After`` of that 503, seconds.
        reject: sends an error response when the app has not started one.
        clock: ``time.monotonic``-like.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: Mapping[str, int],
        timeout_s: float,
        min_rate_bytes_s: float,
        large_body_bytes: int,
        max_large_bodies: int,
        retry_after_s: int,
        reject: Reject,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.app = app
        self.max_bytes = dict(max_bytes)
        self.timeout_s = timeout_s
        self.min_rate = float(min_rate_bytes_s)
        self.large_body_bytes = large_body_bytes
        self.max_large_bodies = max_large_bodies
        self.retry_after_s = retry_after_s
        self.reject = reject
        self.clock = clock
        self.state = BodyState()

    def _too_many_large(self) -> OverloadedError:
        retry = max(1, self.retry_after_s)
        return OverloadedError(
            f"server busy: {self.max_large_bodies} large uploads (over {self.large_body_bytes} bytes) are being "
            f"received already (security.max_large_bodies); retry after {retry} s",
            retry_after_s=retry,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: C901 - an ASGI guard: one branch per message type and limit, in the order the bytes arrive
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        st = self.state
        path = app_path(scope)
        limit = self.max_bytes.get(path)
        declared_raw = header_map(scope).get("content-length", "")
        declared = int(declared_raw) if declared_raw.isdigit() else None
        if limit is not None and declared is not None and declared > limit:
            st.too_large += 1
            await self.reject(scope, receive, send, PayloadTooLargeError(
                f"request body is {declared} bytes; the limit is {limit} bytes", param="video"
            ))
            return
        holds_large = False
        if declared is not None and declared > self.large_body_bytes:
            if st.large_in_flight >= self.max_large_bodies:
                await self.reject(scope, receive, send, self._too_many_large())
                return
            st.large_in_flight += 1
            holds_large = True
        t0 = self.clock()
        received = 0
        done = False

        async def guarded_receive() -> Message:
            nonlocal received, done, holds_large
            if done:
                return await receive()
            remaining = t0 + self.timeout_s + received / self.min_rate - self.clock()
            try:
                async with asyncio.timeout(max(0.0, remaining)):
                    message = await receive()
            except TimeoutError:
                st.timed_out += 1
                done = True
                raise RequestTimeoutError(
                    f"the request body arrived too slowly: {received} bytes in {self.clock() - t0:.0f} s "
                    f"(a body must arrive at {self.min_rate:.0f} bytes/s or more on average after the first "
                    f"{self.timeout_s:g} s; security.body_timeout_s, security.body_min_rate_bytes_s)"
                ) from None
            if message["type"] != "http.request":
                done = True
                return message
            received += len(message.get("body", b""))
            st.max_bytes_read = max(st.max_bytes_read, received)
            if limit is not None and received > limit:
                st.too_large += 1
                done = True
                raise PayloadTooLargeError(
                    f"request body exceeds the limit of {limit} bytes", param="video"
                )
            if not holds_large and received > self.large_body_bytes:
                if st.large_in_flight >= self.max_large_bodies:
                    done = True
                    raise self._too_many_large()
                st.large_in_flight += 1
                holds_large = True
            if not message.get("more_body", False):
                done = True
            return message

        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, tracked_send)
        except ServeAppError as e:
            if started:
                raise
            await self.reject(scope, receive, send, e)
        finally:
            if holds_large:
                st.large_in_flight -= 1


# --------------------------------------------------------------------------- shared results


class SharedResult(Generic[T]):
    """One async call shared by concurrent callers and reused for ``ttl_s`` seconds.

    ``/readyz`` reads Serve's status from the controller: with this, 64 pollers cost one
    round trip per ``ttl_s``, not 64. A failed call is not cached (the next caller retries).

    Args:
        fn: the call, ``async fn() -> T``.
        ttl_s: seconds a result is reused (0: only shared between concurrent callers).
        clock: ``time.monotonic``-like.

    Attributes:
        calls: how many times ``fn`` ran.
    """

    def __init__(self, fn: Callable[[], Awaitable[T]], ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.fn = fn
        self.ttl_s = ttl_s
        self.clock = clock
        self.calls = 0
        self._value: tuple[float, T] | None = None
        self._pending: asyncio.Future[tuple[T, int]] | None = None

    async def get(self) -> tuple[T, int]:
        """The result and the number of the call that produced it (1, 2, …).

        Raises:
            Exception: whatever ``fn`` raised (shared by the callers waiting on that call).
        """
        now = self.clock()
        if self._value is not None and now - self._value[0] < self.ttl_s:
            return self._value[1], self.calls
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._run())
        pending = self._pending
        return await asyncio.shield(pending)

    async def _run(self) -> tuple[T, int]:
        try:
            self.calls += 1
            n = self.calls
            value = await self.fn()
            self._value = (self.clock(), value)
            return value, n
        finally:
            self._pending = None
