"""One async call shared by concurrent callers and reused for a TTL (the readiness check's controller round trip)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


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
