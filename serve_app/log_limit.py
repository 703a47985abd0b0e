"""The project's logging rules: one logger rule (:func:`get_logger`) and rate-limited logging of repeated errors.

Every module of ``serve_app`` logs through ``get_logger(__name__)``: a child of Ray Serve's ``ray.serve`` logger
(``ray.serve.serve_app.<module>``), as Ray Serve LLM's ``get_logger`` does
(``python/ray/llm/_internal/serve/observability/logging/__init__.py``), so each record reaches the replica's log
with Serve's format and request context and follows the application's ``logging_config``, and one name prefix
selects all of this project's lines.

Rate-limited logging: one helper for everything that logs in a loop.

A camera that fails the same way forever (an HTTP MP4 that ignores ``Range`` once wrote 14,955
tracebacks, 13 MB, in 20 s for one stream), a webhook endpoint that is down, a model that keeps
failing a stream's windows: each of these logs from a loop. :class:`LogLimiter` lets the first
``burst`` messages of a *key* (a stream id, a webhook host …) through in every ``window_s``, drops
the rest, and says how many it dropped in the next message of that key that gets through::

    LOG_LIMIT.log(logger, logging.INFO, f"stream {sid}", "stream %s: %s; reconnecting", sid, msg)

Keys are bounded (the least recently used is forgotten past ``max_keys``), so a hostile client that
makes up keys cannot grow it. Thread-safe: camera readers log from their own threads.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

#: Ray Serve's logger: the parent of every logger of this project.
SERVE_LOGGER = "ray.serve"


def get_logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (pass ``__name__``): ``ray.serve.<name>``, a child of Ray Serve's logger."""
    return logging.getLogger(f"{SERVE_LOGGER}.{name}")


@dataclasses.dataclass
class _Key:
    window_start_s: float
    logged: int = 0
    dropped: int = 0


class LogLimiter:
    """Per-key log limiter (see the module docstring).

    Args:
        burst: messages of one key let through per window.
        window_s: the window, seconds.
        max_keys: keys remembered at once (least recently used forgotten first).
        clock: monotonic seconds (tests inject one).
    """

    def __init__(self, burst: int = 5, window_s: float = 60.0, max_keys: int = 4096,
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
        self.burst, self.window_s, self.max_keys, self.clock = burst, window_s, max_keys, clock
        self._keys: collections.OrderedDict[str, _Key] = collections.OrderedDict()
        self._lock = threading.Lock()
        #: messages dropped so far, all keys together
        self.dropped_total = 0

    def allow(self, key: str) -> int | None:
        """None: drop this message of ``key``; else log it, noting this many messages dropped before it."""
        now = self.clock()
        with self._lock:
            k = self._keys.get(key)
            if k is None:
                k = self._keys[key] = _Key(now)
                while len(self._keys) > self.max_keys:
                    self._keys.popitem(last=False)
            self._keys.move_to_end(key)
            if now - k.window_start_s >= self.window_s:
                k.window_start_s, k.logged = now, 0
            if k.logged >= self.burst:
                k.dropped += 1
                self.dropped_total += 1
                return None
            k.logged += 1
            dropped, k.dropped = k.dropped, 0
            return dropped

    def log(self, logger: logging.Logger, level: int, key: str, msg: str, *args: Any, **kwargs: Any) -> bool:
        """``logger.log(level, msg, *args, **kwargs)`` unless ``key`` is over its rate; True if logged.

        A message that follows dropped ones ends with ``(N similar messages dropped in the last … s)``.
        """
        dropped = self.allow(key)
        if dropped is None:
            return False
        if dropped:
            msg = msg + " (%d similar messages dropped in the last %.0f s)"
            args = (*args, dropped, self.window_s)
        logger.log(level, msg, *args, **kwargs)
        return True


#: The process's limiter: every loop that logs uses it (keys name their source, e.g. ``stream str_…``).
LOG_LIMIT = LogLimiter()
