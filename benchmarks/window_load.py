"""Windows with N questions each to ``POST /v1/video/query``: a burst (all at once) and a closed loop
(a fixed number in flight for a fixed time), for issue 26's "windows/s at saturation, 3 questions against 1".

A burst of B windows measures B / wall time, and the wall time includes a ramp (the first answers come
only after a whole prefill and decode) and a drain (the last windows' 256 decode steps, with the GPU less
and less full). With 3 questions the drain is longer: the later questions start their decode only after
the first one's prefill (the replica's prefill hold). The closed loop (:func:`sustain`) measures the
sustained rate instead: ``concurrency`` windows are kept in flight, a new one sent as soon as one ends,
for ``duration_s`` seconds, and the rate counts only the windows that end between ``warmup_s`` and the
end of sending, the usual way a saturation throughput is read off a closed-loop load test.

Every window of a run is a different file (a new clip): the server's prefix cache can serve only the
questions of one window from each other.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from loadtest import statistics as stats

#: Output tokens of every answer (``ignore_eos``): the issue's 256.
MAX_TOKENS = 256

T = TypeVar("T")


@dataclass(frozen=True)
class WindowOutcome:
    """One window's request: HTTP status (0: no response), completion tokens summed over its answers,
    its send and end times in seconds from the run's start, and where the server says the time went
    (milliseconds from the response's ``timings``: the decoder's wall time, the first question's time from the
    model replica's engine call to its first token and to its last chunk (``queue_ms + model_ms``), and the
    ingress's wall time from request in to answer out; None where the response had none, e.g. an error or an
    engine-only loop)."""

    status: int
    completion_tokens: int
    sent_s: float
    ended_s: float
    decode_ms: float | None = None
    ttft_ms: float | None = None
    server_total_ms: float | None = None
    replica_ms: float | None = None


async def ask_window(client: httpx.AsyncClient, url: str, path: Path, questions: list[str], t0: float) -> WindowOutcome:
    """Asks every question of ``questions`` about the window file ``path`` in one request
    (``/v1/video/query`` with ``questions``, :data:`MAX_TOKENS` tokens each, ``ignore_eos``).

    Args:
        client: the HTTP client (its timeout bounds the request).
        url: the service's base URL, e.g. ``http://127.0.0.1:8000``.
        path: a window file under the service's ``sources.allowed_roots``.
        questions: one or more questions.
        t0: ``time.perf_counter()`` at the run's start; the outcome's times are seconds after it.

    Returns:
        The outcome; a transport error gives status 0 (counted, never raised).
    """
    body = {"video_path": str(path), "questions": questions, "max_tokens": MAX_TOKENS, "ignore_eos": True}
    sent_s = time.perf_counter() - t0
    try:
        r = await client.post(f"{url}/v1/video/query", json=body)
    except httpx.HTTPError:
        return WindowOutcome(0, 0, sent_s, time.perf_counter() - t0)
    ended_s = time.perf_counter() - t0
    if r.status_code != 200:
        return WindowOutcome(r.status_code, 0, sent_s, ended_s)
    j = r.json()
    tokens = sum(int(a["usage"]["completion_tokens"]) for a in j.get("answers") or [j])
    t = j.get("timings") or {}
    replica_ms = None if t.get("model_ms") is None else (t.get("queue_ms") or 0.0) + t["model_ms"]
    return WindowOutcome(200, tokens, sent_s, ended_s, t.get("decode_ms"), t.get("ttft_ms"), t.get("total_ms"),
                         replica_ms)


def server_split_ms(outcomes: list[WindowOutcome]) -> dict[str, float] | None:
    """Where a window's time went, as means in milliseconds over ``outcomes`` that carry the server's timings:
    ``decode`` (decoder wall time), ``ttft`` (first question, engine call to first token), ``replica`` (first
    question, the model replica's engine call to its last chunk; with one question the whole answer),
    ``server_total`` (ingress wall time) and ``client_total`` (send to answer at the client).
    ``client_total - server_total`` is the HTTP path (proxy, connection); ``server_total - decode - replica`` (one
    question) the hand-offs between the tiers and the answer's way back to the ingress; ``replica`` minus vLLM's
    own time for the request (its per-request timings) what the replica adds around the engine. ``replica`` is
    left out where the responses lack it. None when no outcome has the timings."""
    timed = [o for o in outcomes if o.decode_ms is not None and o.ttft_ms is not None and o.server_total_ms is not None]
    if not timed:
        return None

    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 1)

    split = {"windows": len(timed), "decode": mean([o.decode_ms or 0.0 for o in timed]),
             "ttft": mean([o.ttft_ms or 0.0 for o in timed])}
    if all(o.replica_ms is not None for o in timed):
        split["replica"] = mean([o.replica_ms or 0.0 for o in timed])
    return {**split, "server_total": mean([o.server_total_ms or 0.0 for o in timed]),
            "client_total": mean([(o.ended_s - o.sent_s) * 1000 for o in timed])}


def _statuses(outcomes: list[WindowOutcome]) -> dict[str, int]:
    """How many windows got each HTTP status (0: no response), keyed by the status as text, in order."""
    return {str(s): n for s, n in sorted(Counter(o.status for o in outcomes).items())}


def burst_figures(outcomes: list[WindowOutcome], n_questions: int, wall_s: float) -> dict[str, Any]:
    """A burst's figures: windows answered (status 200), statuses, windows/s and answers/s over ``wall_s``
    (seconds), completion tokens."""
    ok = sum(1 for o in outcomes if o.status == 200)
    return {"windows": len(outcomes), "questions_per_window": n_questions, "ok": ok, "statuses": _statuses(outcomes),
            "wall_s": round(wall_s, 2), "windows_per_s": round(ok / wall_s, 3),
            "answers_per_s": round(ok * n_questions / wall_s, 3),
            "completion_tokens": sum(o.completion_tokens for o in outcomes)}


def sustained_figures(outcomes: list[WindowOutcome], n_questions: int, warmup_s: float, end_s: float,
                      concurrency: int, ran_out: bool) -> dict[str, Any]:
    """The closed loop's figures over the measured interval ``[warmup_s, end_s]`` (seconds from the start).

    Windows count when they were answered (status 200) and ended inside the interval; ``windows_per_s`` is
    their number over the interval's length. Latency percentiles (seconds from send to answer) are over the same
    windows (:func:`loadtest.statistics.percentiles`). ``ended_per_10s`` counts the answered windows by the
    10-s bin they ended in, from the start to ``end_s``: a closed loop started with every window at once ends
    them in cohorts (one latency apart) at first, and an interval that is not yet stationary shows as bins that
    swing. ``server_split_mean_ms`` is :func:`server_split_ms` over the counted windows: set it beside the engine's
    timings of the same windows (:func:`benchmarks.replica_gap.counted_split`), not of all the step's requests,
    whose ramp decodes faster (that mismatch read 2.3 s outside the engine where there were 0.5 s,
    ``results/gpu/fleet-lease17/``).
    ``windows_per_s_by_latency`` is the same rate by Little's law (L = λW; J. D. C. Little, "A proof for
    the queuing formula L = λW", Operations Research 9(3), 1961): a closed loop that keeps ``concurrency``
    windows in flight and sends the next one as a window ends runs ``concurrency`` / mean latency windows/s,
    whichever way the interval cuts the cohorts (H200, 2026-12-03: 64 windows in lockstep, 31.5 s apart,
    counted 1.969/s over a 65-s interval that held two cohorts, against 64 / 31.5 s = 2.03/s).

    Raises:
        ValueError: the interval is empty (``end_s <= warmup_s``): no rate can be read.
    """
    if end_s <= warmup_s:
        raise ValueError(f"the loop sent for {end_s:.1f} s, not past its {warmup_s:.1f}-s warm-up: no rate")
    counted = [o for o in outcomes if o.status == 200 and warmup_s <= o.ended_s <= end_s]
    latencies_s = [o.ended_s - o.sent_s for o in counted]
    lat = stats.percentiles(latencies_s, (50, 95), digits=3)
    mean_s = sum(latencies_s) / len(latencies_s) if latencies_s else None
    measured_s = end_s - warmup_s
    bins = [0] * max(1, math.ceil(end_s / 10))
    for o in outcomes:
        if o.status == 200 and o.ended_s <= end_s:
            bins[min(int(o.ended_s // 10), len(bins) - 1)] += 1
    return {"questions_per_window": n_questions, "concurrency": concurrency, "sent": len(outcomes),
            "statuses": _statuses(outcomes),
            "warmup_s": warmup_s, "measured_s": round(measured_s, 2), "counted": len(counted),
            "windows_per_s": round(len(counted) / measured_s, 3),
            "answers_per_s": round(len(counted) * n_questions / measured_s, 3),
            "windows_per_s_by_latency": round(concurrency / mean_s, 3) if mean_s else None,
            "latency_mean_s": round(mean_s, 3) if mean_s is not None else None,
            "latency_p50_s": lat["p50"], "latency_p95_s": lat["p95"],
            "completion_tokens_counted": sum(o.completion_tokens for o in counted),
            "ended_per_10s": bins,
            "server_split_mean_ms": server_split_ms(counted),
            "ran_out_of_windows": ran_out}


async def burst(url: str, files: list[Path], questions: list[str]) -> dict[str, Any]:
    """Every window of ``files`` at once, each asked ``questions``; :func:`burst_figures`."""
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=len(files))) as client:
        outcomes = await asyncio.gather(*(ask_window(client, url, p, questions, t0) for p in files))
    return burst_figures(list(outcomes), len(questions), time.perf_counter() - t0)


async def sustain(url: str, files: list[Path], questions: list[str], concurrency: int, duration_s: float,
                  warmup_s: float, stagger_s: float = 0.0) -> dict[str, Any]:
    """The closed loop (:func:`closed_loop`) over the window files ``files`` (in order, none twice), each asked
    ``questions`` in one ``/v1/video/query`` request (:func:`ask_window`).

    Raises:
        ValueError: as :func:`closed_loop`.
    """
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=max(concurrency, 1))) as client:
        return await closed_loop(lambda path, t0: ask_window(client, url, path, questions, t0), files,
                                 len(questions), concurrency, duration_s, warmup_s, stagger_s)


async def closed_loop(ask: Callable[[T, float], Awaitable[WindowOutcome]], items: Iterable[T], n_questions: int,
                      concurrency: int, duration_s: float, warmup_s: float, stagger_s: float = 0.0) -> dict[str, Any]:
    """``concurrency`` windows in flight, each next one from ``items`` (in order, none twice) sent as soon as one
    ends, for ``duration_s`` seconds; then the windows in flight are waited for (not counted). Sending also stops
    when ``items`` runs out (``ran_out_of_windows``; the interval then ends there).

    Args:
        ask: sends one window and returns its outcome, times in seconds after its second argument (the loop's
            ``time.perf_counter()`` start); an HTTP request (:func:`sustain`) or engine requests
            (``benchmarks.engine_profile``).
        items: what ``ask`` takes, one per window.
        n_questions: questions per window (for answers/s).

    Returns:
        :func:`sustained_figures` plus ``stagger_s``, ``windows_used`` (windows sent) and ``drain_s`` (seconds
        waited after sending stopped).

    ``stagger_s`` > 0 spreads the first ``concurrency`` sends evenly over that many seconds (slot i waits
    i · ``stagger_s`` / ``concurrency``), as cameras' windows are spread: all sent at once, the windows are
    prefilled, decoded and answered together, and the loop runs in lockstep cohorts (H200, 2026-12-03:
    ``results/gpu/fleet-lease9/README.md``), each cohort's decode tail with no other window's prefill beside it.

    Raises:
        ValueError: no rate could be read (see :func:`sustained_figures`), ``concurrency`` < 1 or
            ``stagger_s`` < 0.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1 (got {concurrency})")
    if stagger_s < 0:
        raise ValueError(f"stagger_s must be >= 0 (got {stagger_s})")
    outcomes: list[WindowOutcome] = []
    queue = iter(items)
    stopped_s: list[float] = []  # when the first worker found no time or no item left
    t0 = time.perf_counter()

    async def worker(slot: int) -> None:
        await asyncio.sleep(slot * stagger_s / concurrency)
        while True:
            now_s = time.perf_counter() - t0
            item = next(queue, None) if now_s < duration_s else None
            if item is None:
                stopped_s.append(now_s)
                return
            outcomes.append(await ask(item, t0))

    await asyncio.gather(*(worker(slot) for slot in range(concurrency)))
    end_s = min(min(stopped_s), duration_s)  # before duration_s only when the items ran out
    res = sustained_figures(outcomes, n_questions, warmup_s, end_s, concurrency, end_s < duration_s)
    return {**res, "stagger_s": stagger_s, "windows_used": len(outcomes),
            "drain_s": round(time.perf_counter() - t0 - end_s, 2)}
