"""Coalescing a token stream before it crosses a ``DeploymentHandle``.

Every item a Serve streaming handle yields is a Ray object: at 64 clips in
flight a GPU replica produces hundreds of one-token deltas per second, and
shipping each separately costs the replica's event loop (the same loop that
feeds the engine) more than the tokens are worth. :func:`coalesce_deltas`
merges consecutive :class:`~serve_app.protocol.Delta` chunks and lets one out per
interval; the first delta of a request passes at once (TTFT is unchanged),
and every other chunk kind passes through in order. Ray Serve LLM does the
same with a 50-ms default (``RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS``,
``ray.llm._internal.serve.utils.batcher.Batcher``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TypeVar

from serve_app.protocol import Delta

T = TypeVar("T")


class _Failure:
    """What the pump puts on the queue when ``source`` raised: re-raised by the consumer."""

    def __init__(self, error: BaseException):
        self.error = error


class _End:
    """What the pump puts on the queue when ``source`` is exhausted."""


_DONE = _End()


async def coalesce_deltas(  # noqa: C901 - one async merge loop: branches for deltas, final chunks, errors and the batch timer
    source: AsyncIterator[T | Delta], interval_s: float, clock: Callable[[], float] = time.monotonic
) -> AsyncGenerator[T | Delta, None]:
    """Yields ``source``'s chunks with :class:`Delta` chunks merged per ``interval_s`` seconds.

    Args:
        source: a chunk stream; :class:`Delta` items are merged, every other item passes in order.
        interval_s: the most often a merged delta is yielded (0: pass everything through).
        clock: seconds from any fixed origin (tests inject a fake); :func:`time.monotonic` by default.

    Raises:
        Whatever ``source`` raises, after the deltas received before it.
    """
    if interval_s <= 0:
        async for chunk in source:
            yield chunk
        return
    queue: asyncio.Queue[T | Delta | _Failure | _End] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for chunk in source:
                queue.put_nowait(chunk)
        except BaseException as e:  # re-raised on the consumer side
            queue.put_nowait(_Failure(e))
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            queue.put_nowait(_DONE)

    task = asyncio.create_task(pump())
    pending: Delta | None = None
    last_emit = -float("inf")
    try:
        while True:
            timeout = None if pending is None else max(0.0, last_emit + interval_s - clock())
            try:
                item = await asyncio.wait_for(queue.get(), timeout)
            except TimeoutError:
                assert pending is not None  # the wait has no timeout while nothing is pending
                yield pending
                pending, last_emit = None, clock()
                continue
            if isinstance(item, _End):
                if pending is not None:
                    yield pending
                return
            if isinstance(item, _Failure):
                if pending is not None:
                    yield pending
                raise item.error
            if isinstance(item, Delta):
                now = clock()
                if pending is None and now - last_emit >= interval_s:
                    yield item  # first token, or the stream was idle: no reason to wait
                    last_emit = now
                else:
                    pending = item if pending is None else pending.merge(item)
            else:
                if pending is not None:
                    yield pending
                    pending = None
                yield item
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # the consumer is leaving
                await task
