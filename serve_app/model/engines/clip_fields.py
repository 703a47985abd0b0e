"""A window's questions patchify its frames once: the table patchify's output kept by clip identity.

Every question about one window carries the same frames and the same server-made clip identity
(:attr:`serve_app.model.engines.base.GenerationRequest.clip_id`). With ``model.patchify: table`` each question
patchified them again on the replica's preprocessing threads: on one H200 ~220 ms a question, against ~25 ms for
vLLM's own input processing; a 3-question step of 64 windows in flight spent 173.8 s of thread time in the
patchify and 19.1 s in vLLM's inputs, and its first questions waited 4.2 s (p50) for a thread, against 0.19 s with
one question (``results/gpu/fleet-lease9/README.md``). :class:`ClipFieldsCache` keeps the first question's
patchify output for the clip's other questions.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

T = TypeVar("T")

#: Clips kept at most. A 10-s window at 4 fps and 420x756 px patchifies to 76.2 MB of bf16 rows
#: (``results/gpu/fleet-lease9/``, ``pixel_bytes``), so 32 clips hold at most ~2.4 GB of host memory.
MAX_CLIPS = 32
#: Seconds a clip's output is kept after its last use. A window's questions reach the preprocessing threads
#: within seconds of each other (their wait for a thread: p50 4.7 s for the later ones, H200, 64 windows x 3
#: questions in flight, ``results/gpu/fleet-lease9/README.md``).
TTL_S = 30.0


@dataclass
class _Entry(Generic[T]):
    """One clip's output: set once ``ready`` is; ``failed`` when its build raised."""

    ready: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    failed: bool = False
    used_s: float = 0.0


class ClipFieldsCache(Generic[T]):
    """The output built for a clip identity, shared by the clip's later requests.

    At most ``max_clips`` clips are kept (the least recently used leaves first), each for ``ttl_s`` seconds after
    its last use. Thread-safe: the first caller for a clip builds; callers for the same clip meanwhile wait for
    that build and share its output. When the build raises, the error goes to its caller and each waiting caller
    builds on its own. A request without a clip identity (None) always builds, and nothing is kept.

    Args:
        max_clips: clips kept at most (>= 1).
        ttl_s: seconds a clip's output is kept after its last use (> 0).
        clock: monotonic seconds (tests pass their own).

    Raises:
        ValueError: ``max_clips`` < 1 or ``ttl_s`` <= 0.
    """

    def __init__(self, max_clips: int = MAX_CLIPS, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_clips < 1 or ttl_s <= 0:
            raise ValueError(f"max_clips must be >= 1 and ttl_s > 0 (got {max_clips}, {ttl_s})")
        self._max_clips = max_clips
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry[T]] = OrderedDict()

    def __len__(self) -> int:
        """Clips kept now (those being built included)."""
        return len(self._entries)

    def get(self, clip_id: str | None, build: Callable[[], T]) -> tuple[T, bool]:
        """The output for ``clip_id``: another request's, or ``build()``'s.

        Returns:
            ``(output, reused)``: ``reused`` is True when another request of the clip built it.

        Raises:
            Exception: whatever ``build`` raises, when this caller ran it.
        """
        if clip_id is None:
            return build(), False
        with self._lock:
            now_s = self._clock()
            self._expire(now_s)
            entry = self._entries.get(clip_id)
            owner = entry is None
            if entry is None:
                entry = _Entry(used_s=now_s)
                self._entries[clip_id] = entry
                while len(self._entries) > self._max_clips:
                    self._entries.popitem(last=False)  # a waiter keeps its own reference to an evicted entry
            else:
                self._entries.move_to_end(clip_id)
        if owner:
            return self._build(clip_id, entry, build), False
        entry.ready.wait()
        if entry.failed:
            return build(), False  # the clip's build failed: this request's own try
        with self._lock:
            entry.used_s = self._clock()
        return cast(T, entry.value), True

    def _build(self, clip_id: str, entry: _Entry[T], build: Callable[[], T]) -> T:
        """Runs the clip's build as its owner; wakes the waiters whatever happens."""
        try:
            value = build()
            entry.value = value
        except BaseException:
            entry.failed = True
            with self._lock:
                if self._entries.get(clip_id) is entry:
                    del self._entries[clip_id]
            raise
        finally:
            entry.ready.set()
        return value

    def _expire(self, now_s: float) -> None:
        """Drops the built clips unused for ``ttl_s`` (the lock is held)."""
        for clip_id in [c for c, e in self._entries.items() if e.ready.is_set() and now_s - e.used_s > self._ttl_s]:
            del self._entries[clip_id]
