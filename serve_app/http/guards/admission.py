"""Admission by count before the body is read: per ingress replica, per client, event subscribers apart,
and clip requests refused while the pipeline behind is full."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from serve_app.errors import OverloadedError, ServeAppError, TooManyRequestsError
from serve_app.http.guards.request import Reject, app_path, header_map

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
        client_key: ``client_key(scope, headers)`` → the client's identity (see
            :func:`serve_app.http.guards.request.client_key`).
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
