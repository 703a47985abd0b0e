"""The Ray-free pieces of live streams: window cutting, newest-wins queue, backoff, stats, events.

* :class:`WindowCutter`: frames in presentation order in, sampled at ``fps`` on a grid of
  stream time, cut into windows ``[k·every_s, k·every_s + window_s)``; a window is complete
  when the first frame past its end arrives (frames are never decoded twice).
* :class:`NewestWinsQueue`: a bounded queue of pending windows; when full, the oldest is
  dropped and counted (the model fell behind: the newest window is what matters).
* :class:`Backoff`: exponential reconnect delays with a cap, deterministic (no jitter) for tests.
* :class:`Percentiles`: p50/p95 over the last N samples (bounded memory).
* :class:`EventLog`: a bounded history of events with increasing ids, for ``Last-Event-ID``
  replay, and waiters woken on each new event.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np

from serve_app.cameras.protocol import EventBatch, LatencySummary, StreamEvent

T = TypeVar("T")


@dataclasses.dataclass
class Window(Generic[T]):
    """One cut window.

    Attributes:
        index: k (window k starts at ``k * every_s`` stream seconds).
        start_s, end_s: the window in stream seconds.
        times_s: presentation time of each sampled frame, seconds (increasing).
        frames: the sampled frames (payload type of the cutter, e.g. ``(H, W, 3) uint8``).
        wall_start, wall_end: wall clock (Unix seconds) when its first frame / the frame closing it arrived.
    """

    index: int
    start_s: float
    end_s: float
    times_s: list[float]
    frames: list[T]
    wall_start: float
    wall_end: float = 0.0


class WindowCutter(Generic[T]):
    """Samples frames at ``fps`` and cuts windows as frames arrive (see the module docstring).

    Sampling: grid targets ``n / fps`` seconds; a frame is kept for the next unfilled target when
    it lies at or after ``target - 0.1 / fps`` (the first frame at, just before, or past it: frames
    arrive live, so there is no waiting for a nearer later one), so a camera slower than ``fps``
    yields its own rate and nothing is invented.

    Args:
        window_s: window length, seconds.
        every_s: seconds between window starts (≥ ``window_s``; equal: back-to-back windows).
        fps: sampling rate, frames per second.
        convert: turns a kept frame into the stored payload (e.g. resize to RGB); only called for kept frames.

    Raises:
        ValueError: ``every_s < window_s`` or a non-positive parameter.
    """

    def __init__(self, window_s: float, every_s: float, fps: float, convert: Callable[[Any], T] = lambda f: f):
        if window_s <= 0 or fps <= 0 or every_s < window_s:
            raise ValueError("need window_s > 0, fps > 0 and every_s >= window_s")
        self.window_s, self.every_s, self.fps = window_s, every_s, fps
        self.convert = convert
        self._next_n = 0  # next unfilled grid target
        self._open: Window[T] | None = None
        self.last_t = -math.inf

    @property
    def frames_per_window(self) -> int:
        """Most frames one window holds."""
        return max(1, math.ceil(self.window_s * self.fps - 1e-9))

    def push(self, t_s: float, frame: object, wall: float | None = None) -> list[Window[T]]:
        """Offers a frame shown at ``t_s`` stream seconds; returns the windows this frame completed.

        Out-of-order or repeated timestamps are ignored.
        """
        if t_s <= self.last_t:
            return []
        self.last_t = t_s
        wall = time.time() if wall is None else wall
        done: list[Window[T]] = []
        n = math.floor(t_s * self.fps + 0.1)  # the grid target this frame is at, or just (0.1/fps) before
        target_s = n / self.fps
        if self._open is not None and max(t_s, target_s) >= self._open.end_s:
            self._open.wall_end = wall
            done.append(self._open)
            self._open = None
        if n < self._next_n:  # that target is filled already
            return done
        self._next_n = n + 1
        k = math.floor(target_s / self.every_s + 1e-9)
        start = k * self.every_s
        if target_s >= start + self.window_s - 1e-9:  # in the gap between windows (every_s > window_s)
            return done
        if self._open is None or self._open.index != k:
            self._open = Window(k, start, start + self.window_s, [], [], wall)
        if len(self._open.frames) < self.frames_per_window:
            self._open.frames.append(self.convert(frame))
            self._open.times_s.append(t_s)
        return done

    def reset(self) -> None:
        """Drops the open window (the source broke: its frames would straddle a gap)."""
        self._open = None


class NewestWinsQueue(Generic[T]):
    """A bounded FIFO: :meth:`put` on a full queue drops the oldest item and returns it.

    Args:
        maxsize: items held (≥ 1).
    """

    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise ValueError("maxsize must be >= 1")
        self._items: collections.deque[T] = collections.deque()
        self.maxsize = maxsize
        self._ready = asyncio.Event() if _has_loop() else None

    def put(self, item: T) -> T | None:
        """Adds ``item``; returns the dropped oldest item, or None."""
        dropped = self._items.popleft() if len(self._items) >= self.maxsize else None
        self._items.append(item)
        if self._ready is not None:
            self._ready.set()
        return dropped

    def get_nowait(self) -> T | None:
        """The oldest item, or None when empty."""
        item = self._items.popleft() if self._items else None
        if not self._items and self._ready is not None:
            self._ready.clear()
        return item

    async def get(self) -> T:
        """Waits for and returns the oldest item (needs a running loop at construction)."""
        assert self._ready is not None
        while not self._items:
            await self._ready.wait()
        return self.get_nowait()  # type: ignore[return-value]  # items is non-empty here: never None

    def __len__(self) -> int:
        return len(self._items)


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Reconnect delays: ``initial_s · 2^attempt`` capped at ``max_s`` (attempt 0 is the first retry)."""

    initial_s: float
    max_s: float

    def delay_s(self, attempt: int) -> float:
        """Seconds to wait before retry ``attempt`` (0, 1, 2, …)."""
        return min(self.max_s, self.initial_s * 2.0 ** min(attempt, 30))


class Percentiles:
    """p50 / p95 over the last ``size`` samples."""

    def __init__(self, size: int = 256):
        self._values: collections.deque[float] = collections.deque(maxlen=size)

    def add(self, value: float) -> None:
        self._values.append(float(value))

    def summary(self, digits: int = 3) -> LatencySummary:
        """The percentiles (None before the first sample)."""
        if not self._values:
            return LatencySummary()
        arr = np.asarray(self._values)
        return LatencySummary(
            p50=round(float(np.percentile(arr, 50)), digits),
            p95=round(float(np.percentile(arr, 95)), digits),
            count=len(arr),
        )


class EventLog:
    """Bounded event history with increasing ids; :meth:`wait` for events after an id.

    Ids start at ``first_id`` (the worker seeds it from the wall clock in milliseconds × 1000, so
    ids keep increasing across worker restarts and a client's ``Last-Event-ID`` stays meaningful)
    and go up by ``step`` (the number of stream workers: each worker keeps its own residue class,
    :func:`serve_app.cameras.shards.first_event_id`).

    Args:
        size: events kept.
        first_id: the first id handed out.
        step: the difference between consecutive ids.
    """

    def __init__(self, size: int, first_id: int = 1, step: int = 1):
        self._events: collections.deque[StreamEvent] = collections.deque(maxlen=size)
        self._next = first_id
        self._step = step
        self._cond: asyncio.Condition | None = None

    def next_id(self) -> int:
        """Reserves the next event id."""
        i = self._next
        self._next += self._step
        return i

    def append(self, event: StreamEvent) -> None:
        """Records ``event`` (its id from :meth:`next_id`) and wakes waiters."""
        self._events.append(event)
        if self._cond is not None:
            cond = self._cond

            async def notify() -> None:
                async with cond:
                    cond.notify_all()

            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(notify())

    def since(self, after: int | None, stream_id: str | None = None, limit: int = 500) -> EventBatch:
        """Events with id > ``after`` (None: none of the past), optionally of one stream, oldest first."""
        if after is None:
            return EventBatch(events=[], last_id=self.last_id)
        missed = bool(self._events) and self._events[0].id > after + self._step and after > 0
        out = [e for e in self._events if e.id > after and (stream_id is None or e.stream_id == stream_id)]
        return EventBatch(events=out[:limit], missed=missed, last_id=self.last_id)

    @property
    def last_id(self) -> int:
        """The id of the newest event handed out (``first_id - step`` before any)."""
        return self._next - self._step

    async def wait(self, after: int, stream_id: str | None, timeout_s: float) -> EventBatch:
        """Events after ``after``; waits up to ``timeout_s`` for one if there is none yet."""
        if self._cond is None:
            self._cond = asyncio.Condition()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            batch = self.since(after, stream_id)
            remaining = deadline - asyncio.get_running_loop().time()
            if batch.events or remaining <= 0:
                return batch
            async with self._cond:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._cond.wait(), remaining)
