"""CPU seconds of a call in this process or of a child process, and their summary (medians)."""

from __future__ import annotations

import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

#: What a measured call returns.
R = TypeVar("R")


def child_cpu_s(cmd: list[str]) -> float:
    """CPU seconds (user + system) a child process used."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def own_cpu_s(fn: Callable[[], R]) -> tuple[float, R]:
    """CPU seconds of this process (all threads) spent in ``fn()``, and its result."""
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def cpu_summary(xs: list[float]) -> dict[str, Any]:
    """Median, minimum and every value of CPU-second samples (4 decimals)."""
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "all": [round(x, 4) for x in xs]}
