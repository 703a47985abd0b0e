"""Coalescing a token stream before it crosses a ``DeploymentHandle``.

Every item a Serve streaming handle yields is a Ray object: at 64 clips in
flight a GPU replica produces hundreds of one-token deltas per second, and
shipping each separately costs the replica's event loop (the same loop that
feeds the engine) more than the tokens are worth. :func:`coalesce_deltas`
merges consecutive ``{"type": "delta"}`` chunks and lets one out per
interval; the first delta of a request passes at once (TTFT is unchanged),
and every other chunk kind passes through in order. Ray Serve LLM does the
same with a 50-ms default (``RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS``,
``ray.llm._internal.serve.utils.batcher.Batcher``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def _merge(pending: dict | None, delta: dict) -> dict:
    if pending is None:
        return dict(delta)
    pending["text"] += delta["text"]
    pending["completion_tokens"] = delta.get("completion_tokens", pending.get("completion_tokens"))
    return pending


async def coalesce_deltas(source: AsyncIterator[dict], interval_s: float) -> AsyncIterator[dict]:
    """Yields ``source``'s chunks with delta chunks merged per ``interval_s`` seconds.

    Args:
        source: chunk dicts with a ``type`` key; deltas carry ``text`` and ``completion_tokens``.
        interval_s: the most often a merged delta is yielded (0: pass everything through).

    Raises:
        Whatever ``source`` raises, after the deltas received before it.
    """
    if interval_s <= 0:
        async for item in source:
            yield item
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in source:
                queue.put_nowait(item)
        except BaseException as e:  # noqa: BLE001 - re-raised on the consumer side
            queue.put_nowait(_Failure(e))
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            queue.put_nowait(_DONE)

    task = asyncio.create_task(pump())
    pending: dict | None = None
    last_emit = -float("inf")
    try:
        while True:
            timeout = None if pending is None else max(0.0, last_emit + interval_s - time.monotonic())
            try:
                item = await asyncio.wait_for(queue.get(), timeout)
            except TimeoutError:
                yield pending
                pending, last_emit = None, time.monotonic()
                continue
            if item is _DONE:
                if pending is not None:
                    yield pending
                return
            if isinstance(item, _Failure):
                if pending is not None:
                    yield pending
                raise item.error
            if item.get("type") == "delta":
                now = time.monotonic()
                if pending is None and now - last_emit >= interval_s:
                    yield item  # first token, or the stream was idle: no reason to wait
                    last_emit = now
                else:
                    pending = _merge(pending, item)
            else:
                if pending is not None:
                    yield pending
                    pending = None
                yield item
    finally:
        if not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the consumer is leaving
                pass
