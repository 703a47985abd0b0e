"""Virtual time for asyncio tests: timers fire at once, in order, and ``loop.time()`` jumps to them.

A unit test of code that sleeps (a load schedule, a coalescing interval) runs
in an event loop whose clock is virtual: when every task is waiting on a
timer, the loop advances its clock to the earliest one instead of blocking.
Seconds of schedule then take microseconds of wall time, and the times the
code observes are exact (no scheduler noise), so tests can assert them.

Code under test must read time from the loop (``asyncio.get_running_loop().time``)
or take it injected (``clock=loop.time``). Sockets, threads and subprocesses do
not work in this loop (it never waits for I/O); use ``httpx.MockTransport``.

    async def main():
        loop = asyncio.get_running_loop()   # loop.time() starts at 0.0
        await asyncio.sleep(3600)           # returns at once
        return loop.time()                  # 3600.0

    assert run_virtual(main()) == 3600.0    # like asyncio.run
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _TimerOnlySelector(selectors.DefaultSelector):
    """Never waits for I/O: a blocking ``select(timeout)`` advances the loop's clock instead."""

    def __init__(self, loop: VirtualTimeLoop):
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None):
        if timeout is None:
            raise RuntimeError("virtual-time loop: every task waits and no timer is set (deadlock)")
        events = super().select(0)
        if not events and timeout > 0:
            self._loop.advance(timeout)
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` (seconds, from 0.0) only moves when the loop is idle."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(selector=_TimerOnlySelector(self))

    def time(self) -> float:
        """Virtual seconds since the loop was made."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Moves the clock forward by ``seconds`` (≥ 0)."""
        self._virtual_now += max(0.0, seconds)


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Runs ``main`` to completion on a fresh :class:`VirtualTimeLoop` (``asyncio.run`` for virtual time)."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
