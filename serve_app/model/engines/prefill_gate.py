"""Holds a clip's later questions until its first question's prefill is done, so that they reuse it.

Several questions about one window share a server-made clip identity (:attr:`GenerationRequest.clip_id`):
vLLM keys the clip's encoder output and its prefix-cache blocks by it. But vLLM 0.24 looks a request's
prefix up in its cache once, when it admits the request (``Scheduler.schedule``: ``get_computed_blocks``
for a waiting request). Sent together to a busy engine, the later questions found only the 32 tokens before
the video (or none), so the first one had not been given its whole prefill when they were admitted, and
each prefilled the video's ~8,100 tokens again (H200, 64 windows x 3 questions at once with
``max_num_seqs: 256``: 184 of 192 requests had < 100 cached tokens, 1.14 windows/s against 2.92 with one
question; ``results/gpu/fleet-lease8/README.md``).
Sent once the first question's first token came (its prefill done, its blocks written), each later
question reads them all.

The hold pays when the engine is saturated; when it has room, a later question only waits for its first
question's TTFT. With 8 real-time cameras x 3 questions on one H100 (bf16; one 60-s level each) p95 freshness
was 3.018 s held against 2.684 s not, and vLLM computed the same prefill tokens per second both ways (the
later questions found the video in its prefix cache without the hold too; ``results/gpu/fleet-lease23/
README.md``). So the caller may tell a later question not to wait (``turn(..., wait=False)``:
``model.prefill_hold_min_requests`` in the vLLM engine, by vLLM's count of unfinished requests).

The engine processes every question's input at once (the HF processor, in its thread pool) and only
their submission to the engine core waits here; ``release`` is called at the first question's first
output and in its ``finally`` (it failed or was aborted), so a later question never waits for a
question that no longer runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class PrefillGate:
    """One gate per engine: per clip identity, the first request to arrive leads and the rest wait.

    Requests without a clip identity (the clip is theirs alone) never wait. A request that arrives after
    its clip's leader was released goes at once (the prefix is in the cache by then).
    """

    def __init__(self) -> None:
        self._leaders: dict[str, asyncio.Event] = {}

    def __len__(self) -> int:
        """Clips whose first question has not produced its first output yet."""
        return len(self._leaders)

    async def turn(self, clip_id: str | None, wait: bool = True) -> Callable[[], None]:
        """Waits until a request about clip ``clip_id`` may go to the engine; returns its ``release``.

        The leader (the first request of the clip) returns at once and must call ``release`` at its first
        output and when it ends, whichever comes first (calling it again does nothing); for the others
        ``release`` does nothing. A later request with ``wait=False`` returns at once too, without leading
        (its leader still leads the rest). Cancelling the wait leaves no state behind.
        """
        if clip_id is None:
            return _nothing
        opened = self._leaders.get(clip_id)
        if opened is not None:
            if wait:
                await opened.wait()
            return _nothing
        opened = asyncio.Event()
        self._leaders[clip_id] = opened

        def release() -> None:
            opened.set()
            if self._leaders.get(clip_id) is opened:
                del self._leaders[clip_id]

        return release


def _nothing() -> None:
    """The ``release`` of a request that leads no one."""
