"""Arrival schedules: when each camera sends its requests (pure; seconds since run start).

* ``realtime`` (default): a camera sends window ``k`` when its last frame would
  have been recorded, i.e. every ``window_s`` seconds, from a per-camera phase.
* ``interval``: open loop, one request every ``interval_s`` per camera.
* ``poisson``: open loop, exponential gaps with mean ``interval_s`` per camera
  (Poisson arrivals; the aggregate of N cameras is Poisson at N/interval_s).
* ``closed``: closed loop, ``concurrency`` workers each send the next window as
  soon as the previous answer arrives (no times are planned); with ``interval_s``
  a worker waits at least that long between sends (paced, phases as below).

Phases spread cameras over one interval so a fleet does not fire at once
(``uniform``: camera c at c·interval/N; ``random``: uniform random; ``none``: all at 0).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

SCHEDULES = ("realtime", "interval", "poisson", "closed")
STAGGERS = ("uniform", "random", "none")


@dataclasses.dataclass(frozen=True)
class Arrival:
    """One planned request.

    Attributes:
        camera: camera index.
        k: the camera's request number (0, 1, …); window ``k`` of its cycle.
        at_s: when to send it (s since run start); also the end of its window.
        deadline_s: gap to the same camera's next window end (s): answers later than
            ``at_s + deadline_s`` are deadline misses.
    """

    camera: int
    k: int
    at_s: float
    deadline_s: float


def phases(n: int, interval_s: Sequence[float], mode: str = "uniform", rng: random.Random | None = None) -> list[float]:
    """Start offset of each of ``n`` cameras (s), within its own interval.

    Raises:
        ValueError: unknown mode or a length mismatch.
    """
    if len(interval_s) != n:
        raise ValueError(f"need {n} intervals, got {len(interval_s)}")
    if mode == "none":
        return [0.0] * n
    if mode == "uniform":
        return [c * interval_s[c] / n for c in range(n)]
    if mode == "random":
        rng = rng or random.Random(0)
        return [rng.uniform(0, iv) for iv in interval_s]
    raise ValueError(f"unknown stagger {mode!r} (one of {', '.join(STAGGERS)})")


def camera_times(
    kind: str, phase_s: float, interval_s: float, duration_s: float, rng: random.Random | None = None
) -> list[float]:
    """Send times of one camera in ``[0, duration_s)``.

    Args:
        kind: ``realtime``, ``interval`` or ``poisson``.
        phase_s: first send time (realtime/interval) or start of the Poisson process.
        interval_s: window length (realtime), period (interval) or mean gap (poisson), seconds.

    Raises:
        ValueError: unknown kind or a non-positive interval.
    """
    if interval_s <= 0:
        raise ValueError(f"interval must be > 0 s (got {interval_s})")
    if kind in ("realtime", "interval"):
        times, k = [], 0
        while (t := phase_s + k * interval_s) < duration_s:
            times.append(t)
            k += 1
        return times
    if kind == "poisson":
        rng = rng or random.Random(0)
        times, t = [], phase_s
        while True:
            t += rng.expovariate(1.0 / interval_s)
            if t >= duration_s:
                return times
            times.append(t)
    raise ValueError(f"schedule {kind!r} has no planned times (one of realtime, interval, poisson)")


def plan(
    kind: str,
    interval_s: Sequence[float],
    duration_s: float,
    *,
    stagger: str = "uniform",
    max_requests: int | None = None,
    seed: int = 0,
) -> list[Arrival]:
    """All planned arrivals of an open-loop run, in send order.

    Args:
        kind: ``realtime``, ``interval`` or ``poisson``.
        interval_s: per camera, its window length / period / mean gap (s).
        duration_s: no request is planned at or after this time (s).
        stagger: phase mode (see :func:`phases`); Poisson cameras start at 0 regardless.
        max_requests: keep only the first this many arrivals (None: all).
        seed: RNG seed for random phases and Poisson gaps.

    Returns:
        Arrivals sorted by time; each camera's ``deadline_s`` is the gap to its next
        arrival (its nominal interval for the last one).
    """
    rng = random.Random(seed)
    n = len(interval_s)
    ph = [0.0] * n if kind == "poisson" else phases(n, interval_s, stagger, rng)
    out: list[Arrival] = []
    for c in range(n):
        times = camera_times(kind, ph[c], interval_s[c], duration_s, rng)
        for k, t in enumerate(times):
            gap = times[k + 1] - t if k + 1 < len(times) else interval_s[c]
            out.append(Arrival(c, k, t, gap))
    out.sort(key=lambda a: (a.at_s, a.camera))
    return out if max_requests is None else out[:max_requests]
