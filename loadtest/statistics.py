"""Statistics over request records: percentiles, distributions, lag growth, verdicts, timelines.

Pure functions (no I/O, no clocks). Definitions beyond those of :mod:`loadtest.records`:

* **lag growth**: least-squares slope of freshness against window end time,
  seconds per second; > 0 means answers fall further behind the live feed.
* **freshness** in summaries is per window: with several questions per window
  (``all_questions``), a window's freshness is that of its last answer.
* **keeps up**: p95 freshness ≤ SLO, error rate < the limit, lag growth ≤ its limit.

:func:`percentiles` is the project's one percentile helper (the benches use it
too): numpy's default method, linear interpolation between order statistics.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

import numpy as np

from loadtest.records import RequestRecord

#: Percentiles reported for every distribution.
PERCENTILES = (50, 90, 95, 99)


def _sample(values: Iterable[float | None]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)


def percentiles(
    values: Iterable[float | None], qs: Sequence[float] = PERCENTILES, digits: int | None = None
) -> dict[str, float | None]:
    """``{"p50": …, "p95": …}`` of a sample (Nones and NaNs dropped; linear interpolation).

    Args:
        values: the sample, in any unit (the result keeps it).
        qs: percentiles to report, 0–100; key ``f"p{q:g}"`` each.
        digits: round each value to this many decimals (None: unrounded).

    Returns:
        One entry per ``q``; every value None for an empty sample.
    """
    arr = _sample(values)
    keys = [f"p{q:g}" for q in qs]
    if arr.size == 0:
        return dict.fromkeys(keys)
    vals = (float(v) for v in np.percentile(arr, list(qs)))
    return {k: (v if digits is None else round(v, digits)) for k, v in zip(keys, vals, strict=True)}


def percentile(values: Iterable[float | None], q: float, digits: int | None = 3) -> float | None:
    """One percentile ``q`` (0–100) of a sample, as :func:`percentiles` computes it, rounded to ``digits``
    decimals (None: unrounded); None for an empty sample. The unit is the sample's."""
    return percentiles(values, (q,), digits)[f"p{q:g}"]


def distribution(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """Summary of a sample: count, mean, p50/p90/p95/p99 and max (Nones dropped).

    Returns:
        ``{"count", "mean", "p50", "p90", "p95", "p99", "max"}``; statistics are None
        for an empty sample.
    """
    arr = _sample(values)
    empty = arr.size == 0
    return {
        "count": int(arr.size),
        "mean": None if empty else float(arr.mean()),
        **percentiles(arr),
        "max": None if empty else float(arr.max()),
    }


def lag_growth(window_end_s: Sequence[float], freshness_s: Sequence[float], min_points: int = 4) -> float | None:
    """Least-squares slope of freshness over window end time (seconds per second).

    A server that keeps up has a slope near 0; one that falls behind by a
    fraction f of the offered load grows its backlog, and freshness, at f s/s.

    Returns:
        The slope, or None with fewer than ``min_points`` points or no spread in time.
    """
    if len(window_end_s) != len(freshness_s):
        raise ValueError("window_end_s and freshness_s differ in length")
    if len(window_end_s) < min_points:
        return None
    t = np.asarray(window_end_s, dtype=np.float64)
    f = np.asarray(freshness_s, dtype=np.float64)
    if np.ptp(t) <= 0:
        return None
    slope, _ = np.polyfit(t, f, 1)
    return float(slope)


@dataclasses.dataclass(frozen=True)
class Criteria:
    """What "keeps up" means.

    Attributes:
        slo_s: p95 freshness objective, seconds (default: the window length).
        max_error_rate: errors / measured requests must stay below this (0.01 = 1%).
        max_lag_growth: largest acceptable lag growth, s/s (0.05: at most +3 s of lag per minute).
    """

    slo_s: float
    max_error_rate: float = 0.01
    max_lag_growth: float = 0.05


def verdict(
    p95_freshness_s: float | None, error_rate: float, growth: float | None, criteria: Criteria
) -> tuple[bool, list[str]]:
    """Keeps-up decision and the reasons it failed (empty when it passed)."""
    reasons = []
    if p95_freshness_s is None:
        reasons.append("no answered requests")
    elif p95_freshness_s > criteria.slo_s:
        reasons.append(f"p95 freshness {p95_freshness_s:.2f} s > SLO {criteria.slo_s:g} s")
    if error_rate >= criteria.max_error_rate:
        reasons.append(f"error rate {error_rate:.1%} ≥ {criteria.max_error_rate:.1%}")
    if growth is not None and growth > criteria.max_lag_growth:
        reasons.append(f"lag growth {growth:+.3f} s/s > {criteria.max_lag_growth:g} s/s")
    return not reasons, reasons


def _freshness_points(records: Sequence[RequestRecord]) -> tuple[list[float], list[float]]:
    """(window end, freshness) in seconds, one point per window: with several questions per window
    (``all_questions``) a window's freshness is its last answer's, as the camera's user sees it; one request
    per window gives one point per request."""
    last: dict[tuple[str, float], float] = {}
    for r in records:
        f = r.freshness_s
        if f is not None and f > last.get((r.camera_id, r.window_end_s), float("-inf")):
            last[(r.camera_id, r.window_end_s)] = f
    pts = sorted((end, f) for (_, end), f in last.items())
    return [p[0] for p in pts], [p[1] for p in pts]


def camera_summary(camera_id: str, records: Sequence[RequestRecord], criteria: Criteria) -> dict[str, Any]:
    """Per-camera metrics and verdict over its measured (non-warm-up) requests."""
    ok = [r for r in records if r.ok]
    errors = len(records) - len(ok)
    t, f = _freshness_points(records)
    growth = lag_growth(t, f)
    fresh = distribution(f)
    rate = errors / len(records) if records else 0.0
    keeps_up, reasons = verdict(fresh["p95"], rate, growth, criteria)
    return {
        "camera_id": camera_id,
        "requests": len(records),
        "ok": len(ok),
        "errors": errors,
        "error_rate": rate,
        "freshness_s": fresh,
        "latency_ms": distribution(r.latency_ms for r in ok),
        "deadline_misses": sum(r.missed for r in records),
        "lag_growth_s_per_s": growth,
        "keeps_up": keeps_up,
        "reasons": reasons,
    }


def summarize(records: Sequence[RequestRecord], criteria: Criteria) -> dict[str, Any]:
    """Aggregate and per-camera metrics of a run (warm-up requests excluded).

    Returns:
        ``{"summary": {...}, "cameras": [...]}``. ``summary`` holds counts, QPS
        (successful responses per second over the measured span: first measured
        send → last measured completion), output tokens/s, errors by status and
        kind, distributions (latency, TTFT, freshness, client lag, server
        timings, tokens), deadline misses, lag growth and the overall verdict.
    """
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    errs = [r for r in measured if not r.ok]
    if measured:
        start = min(r.sent_s for r in measured)
        ends = [r.done_s if r.done_s is not None else (r.stopped_s or r.sent_s) for r in measured]
        span = max(max(ends) - start, 1e-9)
    else:
        span = 0.0
    out_tokens = sum(r.completion_tokens or 0 for r in ok)
    t, f = _freshness_points(measured)
    growth = lag_growth(t, f)
    fresh = distribution(f)
    error_rate = len(errs) / len(measured) if measured else 0.0
    by_camera: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in measured:
        by_camera[r.camera_id].append(r)
    cameras = [camera_summary(c, rs, criteria) for c, rs in sorted(by_camera.items(), key=lambda kv: _cam_key(kv[0]))]
    keeps_up, reasons = verdict(fresh["p95"], error_rate, growth, criteria)
    summary = {
        "requests": len(records),
        "warmup_requests": len(records) - len(measured),
        "measured": len(measured),
        "ok": len(ok),
        "errors": len(errs),
        "error_rate": error_rate,
        "errors_by_status": dict(sorted(Counter(str(r.status) for r in errs).items())),
        "errors_by_kind": dict(sorted(Counter(r.error_kind or "unknown" for r in errs).items())),
        "errors_by_type": dict(sorted(Counter(r.error_type or r.error_kind or "unknown" for r in errs).items())),
        "measured_span_s": span,
        "qps": len(ok) / span if span else 0.0,
        "output_tokens_per_s": out_tokens / span if span else 0.0,
        "output_tokens": out_tokens,
        "bytes_sent": sum(r.bytes_sent for r in measured),
        "latency_ms": distribution(r.latency_ms for r in ok),
        "ttft_ms": distribution(r.ttft_ms for r in ok),
        "freshness_s": fresh,
        "scheduling_lag_ms": distribution(r.lag_ms for r in measured),
        "server_decode_ms": distribution(r.decode_ms for r in ok),
        "server_queue_ms": distribution(r.queue_ms for r in ok),
        "server_model_ms": distribution(r.model_ms for r in ok),
        "server_ttft_ms": distribution(r.server_ttft_ms for r in ok),
        "prompt_tokens": distribution(r.prompt_tokens for r in ok),
        "completion_tokens": distribution(r.completion_tokens for r in ok),
        "deadline_misses": sum(r.missed for r in measured),
        "deadline_miss_rate": (sum(r.missed for r in measured) / len(measured)) if measured else 0.0,
        "lag_growth_s_per_s": growth,
        "cameras": len(cameras),
        "cameras_keeping_up": sum(c["keeps_up"] for c in cameras),
        "criteria": dataclasses.asdict(criteria),
        "keeps_up": keeps_up,
        "reasons": reasons,
    }
    return {"summary": summary, "cameras": cameras}


def _cam_key(camera_id: str) -> tuple[str, int, str]:
    """Natural sort: cam-2 before cam-10."""
    head = camera_id.rstrip("0123456789")
    tail = camera_id[len(head):]
    return (head, int(tail) if tail else -1, camera_id)


class Timeline(TypedDict):
    """The series of :func:`timeline`, one entry per time bin."""

    t_s: list[float]
    qps: list[float]
    latency_p50_ms: list[float | None]
    latency_p95_ms: list[float | None]
    errors: list[int]


def timeline(records: Sequence[RequestRecord], bin_s: float) -> Timeline:
    """Per-time-bin series (by completion time): completions/s, p50 and p95 latency.

    Returns:
        ``{"t_s": bin starts, "qps": ok completions per second, "latency_p50_ms",
        "latency_p95_ms": None for empty bins, "errors": errors per bin}``.
    """
    if bin_s <= 0:
        raise ValueError("bin_s must be > 0")
    measured = [r for r in records if not r.warmup]
    ends = [e for r in measured if (e := r.done_s if r.done_s is not None else r.stopped_s) is not None]
    if not ends:
        return {"t_s": [], "qps": [], "latency_p50_ms": [], "latency_p95_ms": [], "errors": []}
    n = math.floor(max(ends) / bin_s) + 1
    lat: list[list[float]] = [[] for _ in range(n)]
    errors = [0] * n
    for r in measured:
        end = r.done_s if r.done_s is not None else r.stopped_s
        if end is None:
            continue
        b = int(end // bin_s)
        if r.ok and r.latency_ms is not None:  # an ok record always has its answer time
            lat[b].append(r.latency_ms)
        elif not r.ok:
            errors[b] += 1
    bins = [percentiles(x, (50, 95)) for x in lat]
    return {
        "t_s": [i * bin_s for i in range(n)],
        "qps": [len(x) / bin_s for x in lat],
        "latency_p50_ms": [p["p50"] for p in bins],
        "latency_p95_ms": [p["p95"] for p in bins],
        "errors": errors,
    }
