"""Load-test metrics: pure functions over per-request records (no I/O, no clocks).

Times in a :class:`RequestRecord` are seconds since the run started
(``time.perf_counter`` based), durations are milliseconds where the name says
``_ms``. Definitions (also in the README's "Load testing" section):

* **latency**: response complete − request sent (client side).
* **TTFT**: first streamed ``delta`` event − request sent (streaming only).
* **scheduling lag**: request sent − request scheduled (the client's own delay).
* **freshness**: answer time − end of the window the answer is about. For the
  real-time schedule a window ends when its last frame would have been
  recorded, which is also when its request is scheduled.
* **deadline miss**: the answer arrives after the camera's next window ends
  (freshness > the gap to the camera's next window).
* **lag growth**: least-squares slope of freshness against window end time,
  seconds per second; > 0 means answers fall further behind the live feed.
* **keeps up**: p95 freshness ≤ SLO, error rate < the limit, lag growth ≤ its limit.

A request still running when the run stops is recorded as an ``unfinished``
error whose freshness is a lower bound (stop time − window end); so is a
client timeout. Other errors have no freshness; every error is a deadline miss.

Percentiles use numpy's default (linear interpolation between order statistics).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

#: Percentiles reported for every distribution.
PERCENTILES = (50, 90, 95, 99)

#: Error kinds (``RequestRecord.error_kind``).
ERROR_KINDS = ("http", "stream", "timeout", "connect", "protocol", "unfinished")
#: Error kinds where the answer may still be coming: their freshness is a lower bound.
CENSORED_KINDS = ("timeout", "unfinished")


@dataclasses.dataclass
class RequestRecord:
    """One request of a run; one row of ``requests.csv``.

    Attributes:
        seq: request number in schedule order.
        camera_id: the camera that sent it.
        window_index: window number within the camera's source.
        warmup: sent during warm-up (excluded from every metric).
        scheduled_s: when the schedule wanted it sent (s since run start).
        sent_s: when the client started sending it (s).
        window_end_s: end of the window the request is about (s); freshness is measured from it.
        deadline_s: time allowed before the camera's next window ends (s after ``window_end_s``).
        first_token_s: first streamed delta received (s), streaming only.
        done_s: response fully received (s); None if it never finished.
        stopped_s: when the run gave up on an unfinished request (s).
        status: HTTP status (0: no response).
        error_kind: None (success) or one of :data:`ERROR_KINDS`.
        error_type, error_message: the server's ``error.type``/``message`` or the client exception.
        request_id: the server's ``X-Request-Id``.
        decode_ms, queue_ms, model_ms, server_ttft_ms, server_total_ms: the response's ``timings``.
        prompt_tokens, completion_tokens, video_tokens: the response's ``usage``.
        num_frames: frames the server sampled.
        bytes_sent: clip bytes uploaded.
    """

    seq: int
    camera_id: str
    window_index: int
    warmup: bool
    scheduled_s: float
    sent_s: float
    window_end_s: float
    deadline_s: float
    first_token_s: float | None = None
    done_s: float | None = None
    stopped_s: float | None = None
    status: int = 0
    error_kind: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    request_id: str | None = None
    decode_ms: float | None = None
    queue_ms: float | None = None
    model_ms: float | None = None
    server_ttft_ms: float | None = None
    server_total_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    video_tokens: int | None = None
    num_frames: int | None = None
    bytes_sent: int = 0

    @property
    def ok(self) -> bool:
        """Answered with a 2xx and a complete response."""
        return self.error_kind is None and self.done_s is not None

    @property
    def lag_ms(self) -> float:
        """Client scheduling lag: sent − scheduled, milliseconds."""
        return (self.sent_s - self.scheduled_s) * 1000

    @property
    def latency_ms(self) -> float | None:
        """End-to-end latency (sent → complete), milliseconds; None if unfinished."""
        return None if self.done_s is None else (self.done_s - self.sent_s) * 1000

    @property
    def ttft_ms(self) -> float | None:
        """Client-side time to first token, milliseconds (streaming only)."""
        return None if self.first_token_s is None else (self.first_token_s - self.sent_s) * 1000

    @property
    def freshness_s(self) -> float | None:
        """Answer time − window end, seconds.

        For a client timeout or an unfinished request it is a lower bound (the
        time the client gave up); for other errors there is no answer: None.
        """
        if self.ok:
            return self.done_s - self.window_end_s
        if self.error_kind in CENSORED_KINDS:
            end = self.stopped_s if self.stopped_s is not None else self.done_s
            return None if end is None else end - self.window_end_s
        return None

    @property
    def missed(self) -> bool:
        """Deadline miss: not answered before the camera's next window ended."""
        return (not self.ok) or self.freshness_s > self.deadline_s

    #: Derived columns written to the CSV after the stored fields.
    DERIVED = ("ok", "lag_ms", "latency_ms", "ttft_ms", "freshness_s", "missed")

    def row(self) -> dict[str, Any]:
        """The CSV/JSON row: stored fields then derived ones."""
        d = dataclasses.asdict(self)
        for name in self.DERIVED:
            d[name] = getattr(self, name)
        return d

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "RequestRecord":
        """Inverse of :meth:`row`; accepts CSV strings ('' = None) as well as typed values."""
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            typ = str(f.type)
            v = row.get(f.name)
            if v is None or v == "":
                if "None" in typ:
                    kwargs[f.name] = None
                elif f.default is not dataclasses.MISSING:
                    kwargs[f.name] = f.default
                else:
                    raise ValueError(f"row has no value for {f.name}")
            elif typ.startswith("int"):
                kwargs[f.name] = int(float(v))
            elif typ.startswith("float"):
                kwargs[f.name] = float(v)
            elif typ == "bool":
                kwargs[f.name] = v if isinstance(v, bool) else str(v).strip().lower() == "true"
            else:
                kwargs[f.name] = str(v)
        return cls(**kwargs)


def distribution(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """Summary of a sample: count, mean, p50/p90/p95/p99 and max (Nones dropped).

    Returns:
        ``{"count", "mean", "p50", "p90", "p95", "p99", "max"}``; statistics are None
        for an empty sample.
    """
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    out: dict[str, float | int | None] = {"count": int(arr.size)}
    if arr.size == 0:
        out.update({"mean": None, **{f"p{q}": None for q in PERCENTILES}, "max": None})
        return out
    out["mean"] = float(arr.mean())
    for q, v in zip(PERCENTILES, np.percentile(arr, PERCENTILES)):
        out[f"p{q}"] = float(v)
    out["max"] = float(arr.max())
    return out


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
    pts = [(r.window_end_s, r.freshness_s) for r in records if r.freshness_s is not None]
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


def _cam_key(camera_id: str) -> tuple:
    """Natural sort: cam-2 before cam-10."""
    head = camera_id.rstrip("0123456789")
    tail = camera_id[len(head):]
    return (head, int(tail) if tail else -1, camera_id)


def timeline(records: Sequence[RequestRecord], bin_s: float) -> dict[str, list[float | None]]:
    """Per-time-bin series (by completion time): completions/s, p50 and p95 latency.

    Returns:
        ``{"t_s": bin starts, "qps": ok completions per second, "latency_p50_ms",
        "latency_p95_ms": None for empty bins, "errors": errors per bin}``.
    """
    if bin_s <= 0:
        raise ValueError("bin_s must be > 0")
    measured = [r for r in records if not r.warmup]
    ends = [r.done_s if r.done_s is not None else r.stopped_s for r in measured]
    ends = [e for e in ends if e is not None]
    if not ends:
        return {"t_s": [], "qps": [], "latency_p50_ms": [], "latency_p95_ms": [], "errors": []}
    n = int(math.floor(max(ends) / bin_s)) + 1
    lat: list[list[float]] = [[] for _ in range(n)]
    errors = [0] * n
    for r in measured:
        end = r.done_s if r.done_s is not None else r.stopped_s
        if end is None:
            continue
        b = int(end // bin_s)
        if r.ok:
            lat[b].append(r.latency_ms)
        else:
            errors[b] += 1
    return {
        "t_s": [i * bin_s for i in range(n)],
        "qps": [len(x) / bin_s for x in lat],
        "latency_p50_ms": [float(np.percentile(x, 50)) if x else None for x in lat],
        "latency_p95_ms": [float(np.percentile(x, 95)) if x else None for x in lat],
        "errors": errors,
    }


def sweep_decision(levels: Sequence[tuple[int, bool]]) -> int | None:
    """The "cameras per GPU" figure from a sweep.

    Args:
        levels: ``(cameras, keeps_up)`` for every level run, in any order.

    Returns:
        The largest camera count that kept up with every smaller tested count
        also keeping up (a pass above a failure is treated as noise), or None
        if even the smallest level failed.
    """
    best = None
    for cams, passed in sorted(levels):
        if not passed:
            break
        best = cams
    return best


def next_search_level(levels: Sequence[tuple[int, bool]]) -> int | None:
    """Bisection step after a sweep list: the midpoint between the best pass and the first failure.

    Returns:
        A camera count not yet tried strictly between them, or None when they are adjacent
        (or there is no failure, or no pass).
    """
    best = sweep_decision(levels)
    fails = sorted(c for c, p in levels if not p and (best is None or c > best))
    if best is None or not fails:
        return None
    lo, hi = best, fails[0]
    if hi - lo <= 1:
        return None
    return (lo + hi) // 2
