"""The one polling helper of the tests and benches: call a predicate until it holds or time runs out.

* :func:`wait_for`: blocking, with :func:`time.sleep` between calls (a test or bench thread that
  waits on a server, a camera, a replica).
* :func:`wait_for_async`: the same inside an event loop, with :func:`asyncio.sleep` between calls;
  it reads the loop's clock, so under a virtual-time loop (``tests/clock.py``) it costs no real time.

Both return the predicate's first truthy value (so a predicate may return the status it checked),
or ``None`` once ``timeout_s`` has passed; the predicate is always called once more at the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(pred: Callable[[], T], timeout_s: float, step_s: float = 0.25) -> T | None:
    """``pred()``'s first truthy value, calling it every ``step_s``; ``None`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(step_s, left))


async def wait_for_async(pred: Callable[[], T], timeout_s: float, step_s: float = 0.05) -> T | None:
    """:func:`wait_for` on the running loop's clock, sleeping with :func:`asyncio.sleep`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        left = deadline - loop.time()
        if left <= 0:
            return None
        await asyncio.sleep(min(step_s, left))
