"""Overload bench: 4× more requests than the CPU graph can serve; rejected requests must be fast
and the server's memory bounded.

Run from the project root (CPU, outside CI; starts its own Ray + Serve with ``configs/cpu.yaml``'s
application args, so the bounded queues measured are the shipped ones)::

    python -m benchmarks.overload --out results/overload-cpu.json

1. **Capacity.** ``--cameras`` closed-loop clients for ``--capacity-s`` seconds: completed
   requests per second is the capacity ``X``.
2. **Overload.** Open-loop Poisson arrivals at ``--factor`` × X for ``--overload-s`` seconds;
   each request's status and latency are recorded.
3. **Memory.** Summed RSS of the Serve processes (controller, proxy, replicas) every second
   through both phases.

Traffic comes from the load tester (:mod:`loadtest.traffic`: its client, schedules and records).

Every request uploads the test clip (multipart, 2.8 MB) and asks about a 10-s window (40 frames
of 420×756) for ``--max-tokens`` tokens with ``ignore_eos``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from benchmarks import harness, replicas
from benchmarks.memory import RssSample, RssSampler, mib
from benchmarks.result import command, machine, write_result
from loadtest import traffic
from loadtest.records import RequestRecord
from loadtest.statistics import percentiles
from serve_app.testing.local_serve import CLIP

logger = logging.getLogger(__name__)

QUESTION = "Is anyone in danger?"
#: The clip window every request asks about (s): 40 frames of 420×756.
WINDOW_S = (5, 15)
#: Client timeout per request (s).
TIMEOUT_S = 300


def request_fields(max_tokens: int) -> dict[str, Any]:
    """Form fields of one bench request (a 10-s window, fixed output length), as the result file states them."""
    return {"question": QUESTION, "start_s": WINDOW_S[0], "end_s": WINDOW_S[1], "max_tokens": max_tokens,
            "ignore_eos": "true"}


def latency_summary(latencies_s: Sequence[float]) -> dict[str, Any]:
    """p50/p95/p99 and max of a list of seconds (3 decimals; None when empty)."""
    top = round(max(latencies_s), 3) if latencies_s else None
    return percentiles(latencies_s, (50, 95, 99), digits=3) | {"max": top}


def latency_s(r: RequestRecord) -> float:
    """A finished request's latency in seconds.

    Raises:
        ValueError: the request never finished (no answer time).
    """
    if r.latency_ms is None:
        raise ValueError(f"request {r.request_id} has no latency: it never finished")
    return r.latency_ms / 1000


def summarize(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Counts by status and latency percentiles (s) of accepted (200) and rejected (503) requests."""
    done = [r for r in records if r.done_s is not None]
    return {
        "requests": len(records),
        "by_status": dict(Counter(str(r.status) for r in records)),
        "accepted_latency_s": latency_summary([latency_s(r) for r in done if r.status == 200]),
        "rejected_latency_s": latency_summary([latency_s(r) for r in done if r.status == 503]),
        "rejected_without_retry_after": sum(r.status == 503 and r.retry_after_s is None for r in records),
    }


def memory_summary(sampler: RssSampler, at_overload_end: list[dict[str, Any]]) -> dict[str, Any]:
    """RSS by phase, the overload phase's growth over the capacity peak and its first/second-half maxima."""

    def phase_rss(samples: list[RssSample]) -> dict[str, Any] | None:
        if not samples:
            return None
        rss = [s.rss_bytes for s in samples]
        private = [s.private_bytes for s in samples]
        return {"first_mb": mib(rss[0]), "max_mb": mib(max(rss)), "last_mb": mib(rss[-1]),
                "private_max_mb": mib(max(private)), "private_last_mb": mib(private[-1])}

    def max_mb(samples: list[RssSample], private: bool = False) -> float | None:
        return mib(max(s.private_bytes if private else s.rss_bytes for s in samples)) if samples else None

    rss = sampler.samples
    ov, cap = sampler.of_phase("overload"), sampler.of_phase("capacity")
    half = len(ov) // 2
    first, second = (ov[:half], ov[half:]) if half else ([], [])
    return {
        "serve_processes": rss[-1].processes if rss else None,
        "by_phase": {p: phase_rss(sampler.of_phase(p)) for p in ("idle", "capacity", "overload", "after")},
        "overload_growth_over_capacity_peak_pct": None if not (ov and cap) else round(
            100 * (max(s.rss_bytes for s in ov) / max(s.rss_bytes for s in cap) - 1), 2),
        # A trend check: a leak grows from the first to the second half of the overload phase.
        "overload_first_half_max_mb": max_mb(first),
        "overload_second_half_max_mb": max_mb(second),
        "overload_private_first_half_max_mb": max_mb(first, private=True),
        "overload_private_second_half_max_mb": max_mb(second, private=True),
        "per_process_at_overload_end": at_overload_end,
        "samples": [s.row() for s in rss],
    }


async def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Both phases with the RSS sampler running; returns the result dict."""
    sampler = RssSampler()
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop))
    query = traffic.ClipQuery(CLIP, QUESTION, *WINDOW_S)
    options = {"max_tokens": args.max_tokens, "ignore_eos": True, "request_timeout_s": TIMEOUT_S}
    await asyncio.sleep(3)
    sampler.phase = "capacity"
    t = time.monotonic()
    closed = await traffic.closed_loop(url, query, clients=args.cameras, duration_s=args.capacity_s, **options)
    elapsed = time.monotonic() - t
    ok = [r for r in closed if r.ok]
    capacity = len(ok) / elapsed
    logger.info("capacity: %d ok in %.1f s = %.2f req/s", len(ok), elapsed, capacity)
    sampler.phase = "overload"
    offered = args.factor * capacity
    t = time.monotonic()
    records = await traffic.open_loop(url, query, rate_rps=offered, duration_s=args.overload_s, **options)
    overload_elapsed = time.monotonic() - t
    sampler.phase = "after"
    at_overload_end = await asyncio.to_thread(replicas.serve_memory)
    await asyncio.sleep(5)
    stop.set()
    await sampling
    summary = summarize(records)
    # Until the last answer (requests admitted near the end finish after the arrivals stop).
    summary["goodput_rps"] = round(summary["by_status"].get("200", 0) / overload_elapsed, 3)
    return {
        "capacity": {
            "cameras": args.cameras, "duration_s": round(elapsed, 1), "ok": len(ok), "requests": len(closed),
            "rps": round(capacity, 3),
            "latency_p50_s": percentiles([latency_s(r) for r in ok], (50,))["p50"],
        },
        "overload": {"factor": args.factor, "offered_rps": round(offered, 3), "duration_s": args.overload_s, **summary},
        "memory": memory_summary(sampler, at_overload_end),
    }


def main(argv: list[str] | None = None) -> None:
    """Command line: starts Serve with configs/cpu.yaml's app args, runs both phases, writes JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_serve_options(ap, port=0, out="results/overload-cpu.json")
    ap.add_argument("--capacity-s", type=float, default=60)
    ap.add_argument("--overload-s", type=float, default=90)
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    app = harness.app_of(args.config)
    with harness.serving(args, "overload") as url:
        result = asyncio.run(run(url, args))
    ov = result["overload"]
    result = {
        "bench": "overload",
        "command": command("benchmarks.overload", argv),
        "machine": machine(),
        "config": args.config,
        "object_store_mb": harness.object_store(args),
        "limits": {k: app["args"][k] for k in ("decoder", "model_replica", "ingress")},
        "request": request_fields(args.max_tokens) | {"upload_bytes": CLIP.stat().st_size},
        "goal": {"rejected_p99_s_below": 1.0, "memory": "bounded (no growth trend under overload)",
                 "every_503_has_retry_after": True},
        "verdict": {
            "rejected_p99_s": ov["rejected_latency_s"]["p99"],
            "rejected_p99_below_1s": (ov["rejected_latency_s"]["p99"] is not None
                                      and ov["rejected_latency_s"]["p99"] < 1.0),
            "client_timeouts_or_errors": ov["by_status"].get("0", 0),
            "rejected_without_retry_after": ov["rejected_without_retry_after"],
        },
        **result,
    }
    print(write_result(args.out, result))


if __name__ == "__main__":
    main()
