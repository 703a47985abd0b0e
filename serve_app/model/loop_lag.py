"""How late the model replica's event loop runs what is ready (a bench instrument; off in production).

The replica's user-code event loop runs vLLM's output processing (``AsyncLLM``'s output handler and every
request's generator) and the answers' coalescing. A loop that is busy shows here as lag: a task asking to sleep
``interval_s`` wakes ``interval_s + lag`` later. On an H100 at 64 windows in flight (seventeenth lease,
``results/gpu/fleet-lease17/``) it was 0.32 ms mean, 16 ms at most: the loop is not a bottleneck.

When :data:`LOOP_LAG_ENV` names a file, the model replica appends one JSON row there every ``report_s`` seconds
(:func:`watch_loop_lag`): the wall time, the process id and :func:`lag_summary` of the period's samples.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence

from serve_app.log_limit import get_logger

logger = get_logger(__name__)

#: Environment variable naming a JSON-lines file: when set, the model replica appends its event loop's lag
#: there every few seconds (:func:`watch_loop_lag`). Used by ``benchmarks/fleet_gpu.sh``; off in production.
LOOP_LAG_ENV = "COSMOS_SERVE_LOOP_LAG"


def lag_summary(lags_ms: Sequence[float]) -> dict[str, float]:
    """Count, mean, p50, p95 and max of ``lags_ms`` (milliseconds; nearest-rank percentiles).

    Raises:
        ValueError: ``lags_ms`` is empty.
    """
    if not lags_ms:
        raise ValueError("no loop-lag samples to summarize")
    ordered = sorted(lags_ms)

    def rank(q: float) -> float:
        return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))]

    return {"samples": len(ordered), "lag_mean_ms": round(statistics.fmean(ordered), 2),
            "lag_p50_ms": round(rank(0.50), 2), "lag_p95_ms": round(rank(0.95), 2),
            "lag_max_ms": round(ordered[-1], 2)}


async def watch_loop_lag(
    write: Callable[[dict[str, float]], None],
    interval_s: float = 0.01,
    report_s: float = 5.0,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Samples the running loop's lag every ``interval_s`` seconds and calls ``write`` with
    :func:`lag_summary` of each ``report_s`` seconds' samples (plus ``time_s``, the wall time), until cancelled.

    ``clock`` (seconds) and ``sleep`` are injected by tests; a negative lag (a clock coarser than the sleep)
    counts as 0.
    """
    lags: list[float] = []
    start = clock()
    while True:
        t = clock()
        await sleep(interval_s)
        now = clock()
        lags.append(max(0.0, (now - t - interval_s) * 1000))
        if now - start >= report_s:
            write({"time_s": round(time.time(), 3), **lag_summary(lags)})
            lags, start = [], now


def append_to(path: str) -> Callable[[dict[str, float]], None]:
    """A ``write`` for :func:`watch_loop_lag` that appends each row, with this process's id, to ``path`` as a
    JSON line; an unwritable file is logged once per row and skipped (the replica keeps serving)."""

    def write(row: dict[str, float]) -> None:
        try:
            with open(path, "a") as f:
                f.write(json.dumps({"pid": os.getpid(), **row}) + "\n")
        except OSError:
            logger.warning("could not append the loop lag to %s", path)

    return write
