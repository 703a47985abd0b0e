"""Request bodies: a deadline that grows with the bytes received (408), a size limit per route counted as
the body streams (413), and a cap on large bodies at once (503)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve_app.errors import (
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ServeAppError,
    SizeLimit,
    declared_length,
)
from serve_app.http.guards.request import Reject, app_path, header_map


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
        max_bytes = self.max_bytes.get(path)
        limit = None if max_bytes is None else SizeLimit(max_bytes, param="video")
        declared_raw = header_map(scope).get("content-length")
        declared = declared_length(declared_raw)
        if limit is not None:
            try:
                limit.check_declared(declared_raw)
            except PayloadTooLargeError as e:
                st.too_large += 1
                await self.reject(scope, receive, send, e)
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
            if limit is not None and received > limit.limit_bytes:
                st.too_large += 1
                done = True
                limit.check_received(received)  # raises PayloadTooLargeError (413)
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
