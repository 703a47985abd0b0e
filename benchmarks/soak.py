"""Soak bench: the 4-camera scenario for 30 minutes on CPU; memory and latency over time.

Run from the project root (CPU, outside CI; starts its own Ray + Serve with
``configs/cpu.yaml``'s application args)::

    nohup python -m benchmarks.soak --out results/soak-cpu.json &

Live cameras (``/v1/streams``) instead of posted clips: ``--streams`` (see :mod:`benchmarks.cameras`).

Each of ``--cameras`` cameras sends one clip every ``--period-s`` seconds (a camera cutting its
stream into windows; starts staggered; a request that outlasts the period delays the next one,
never overlaps it: the load tester's paced closed loop, :func:`loadtest.traffic.paced`).
A request uploads the test clip (2.8 MB) and asks about a 10-s window (40 frames of 420×756)
for 16 tokens with ``ignore_eos``.

Every ``--sample-s`` seconds the summed RSS of the Serve processes (controller, proxy,
replicas) is sampled; each minute gets its request count, errors and latency percentiles.
The file is rewritten every minute, so a run cut short still leaves its data.

Goal (issue "A service a camera fleet can depend on"): after ``--warmup-min`` minutes of
warm-up, summed RSS grows < 5 % (mean of the last 5 minutes vs. the 5 minutes after warm-up)
and no request fails.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import harness, replicas
from benchmarks.memory import RssSample, RssSampler, mib
from benchmarks.result import command, machine, write_result
from loadtest import traffic
from loadtest.records import RequestRecord
from loadtest.runner import Runner
from loadtest.statistics import percentiles
from serve_app.testing.local_serve import CLIP

logger = logging.getLogger(__name__)

FIELDS: dict[str, Any] = {
    "question": "Is anyone in danger?",
    "start_s": 5,
    "end_s": 15,
    "max_tokens": 16,
    "ignore_eos": "true",
}
GOAL_RSS_GROWTH_PCT = 5.0
#: Client timeout per request (s).
TIMEOUT_S = 300


def outcome(r: RequestRecord) -> dict[str, Any]:
    """A request as the result file lists it: camera, start/end (s since the soak began), latency, status, error."""
    end = r.done_s if r.done_s is not None else r.stopped_s
    error = None if r.ok else ": ".join(x for x in (r.error_type or r.error_kind, r.error_message) if x)
    return {"camera": r.camera_id, "start_s": round(r.sent_s, 2), "end_s": None if end is None else round(end, 2),
            "latency_s": None if end is None else round(end - r.sent_s, 3), "status": r.status, "error": error}


def minute_stats(outcomes: list[dict[str, Any]], rss: Sequence[RssSample], duration_s: float) -> list[dict[str, Any]]:
    """Per-minute requests, errors, latency p50/p95 (s) and mean RSS (MiB)."""
    rows = []
    for m in range(int(duration_s // 60)):
        lo, hi = m * 60, (m + 1) * 60
        done = [o for o in outcomes if o["end_s"] is not None and lo <= o["end_s"] < hi]
        ok = [o["latency_s"] for o in done if o["status"] == 200]
        mem = [r.rss_bytes for r in rss if lo <= r.t_s < hi]
        priv = [r.private_bytes for r in rss if lo <= r.t_s < hi]
        p = percentiles(ok, (50, 95), digits=3)
        rows.append({
            "minute": m,
            "requests": len(done),
            "errors": len(done) - len(ok),
            "latency_p50_s": p["p50"],
            "latency_p95_s": p["p95"],
            "rss_mean_mb": None if not mem else mib(sum(mem) / len(mem)),
            "rss_max_mb": None if not mem else mib(max(mem)),
            "private_mean_mb": None if not priv else mib(sum(priv) / len(priv)),
        })
    return rows


def verdict(rows: list[dict[str, Any]], warmup_min: int, outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """RSS growth after warm-up (mean of the last 5 minutes vs. the 5 after warm-up) and error count."""
    after = [r for r in rows if r["minute"] >= warmup_min and r["rss_mean_mb"] is not None]
    errors = sum(1 for o in outcomes if o["status"] != 200)
    out: dict[str, Any] = {
        "errors": errors, "requests": len(outcomes), "goal_rss_growth_pct_below": GOAL_RSS_GROWTH_PCT
    }
    if len(after) >= 10:
        first = sum(r["rss_mean_mb"] for r in after[:5]) / 5
        last = sum(r["rss_mean_mb"] for r in after[-5:]) / 5
        pfirst = sum(r["private_mean_mb"] for r in after[:5]) / 5
        plast = sum(r["private_mean_mb"] for r in after[-5:]) / 5
        out.update(
            rss_after_warmup_mb=round(first, 1),
            rss_last_5_min_mb=round(last, 1),
            rss_growth_pct=round(100 * (last / first - 1), 2),
            private_after_warmup_mb=round(pfirst, 1),
            private_last_5_min_mb=round(plast, 1),
            private_growth_pct=round(100 * (plast / pfirst - 1), 2),
        )
        out["goal_met"] = out["rss_growth_pct"] < GOAL_RSS_GROWTH_PCT and errors == 0
    else:
        out["goal_met"] = None  # too short to judge
    return out


async def soak(
    url: str, args: argparse.Namespace, write: Callable[[list[dict[str, Any]], list[RssSample], float], None]
) -> None:
    """Runs the cameras and the sampler; calls ``write(outcomes, rss, elapsed_s)`` every minute."""
    held: list[Runner] = []
    t0 = time.monotonic()
    last_write = [t0]

    def finished(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
        return [outcome(r) for r in records if r.done_s is not None or r.stopped_s is not None]

    def on_sample(_: RssSample) -> None:
        if time.monotonic() - last_write[0] >= 60 and held:
            write(finished(held[0].records), sampler.samples, time.monotonic() - t0)
            last_write[0] = time.monotonic()

    def on_record(r: RequestRecord) -> None:
        if not r.ok:
            logger.warning("%s: %s %s", r.camera_id, r.status, outcome(r)["error"])

    sampler = RssSampler(args.sample_s, on_sample=on_sample)
    sampler.phase = "soak"
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop))
    records = await traffic.paced(
        url, traffic.ClipQuery(CLIP, FIELDS["question"], FIELDS["start_s"], FIELDS["end_s"]),
        cameras=args.cameras, period_s=args.period_s, duration_s=args.duration_min * 60,
        max_tokens=FIELDS["max_tokens"], ignore_eos=True, request_timeout_s=TIMEOUT_S,
        started=held.append, on_record=on_record,
    )
    await asyncio.sleep(max(0.0, t0 + args.duration_min * 60 + 5 - time.monotonic()))
    stop.set()
    await sampling
    write(finished(records), sampler.samples, time.monotonic() - t0)


def main(argv: list[str] | None = None) -> None:
    """Command line: starts Serve with configs/cpu.yaml's app args and soaks it.

    ``--streams``: the live-camera soak instead (:mod:`benchmarks.cameras`, its options).
    """
    rest = list(sys.argv[1:] if argv is None else argv)
    if "--streams" in rest:
        from benchmarks import cameras

        rest.remove("--streams")
        raise SystemExit(cameras.main(["soak", *rest]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_serve_options(ap, port=0, out="results/soak-cpu.json")
    ap.add_argument("--period-s", type=float, default=10.0, help="seconds between one camera's clips")
    ap.add_argument("--duration-min", type=float, default=30)
    ap.add_argument("--warmup-min", type=int, default=5)
    ap.add_argument("--sample-s", type=float, default=10.0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    header = {
        "bench": "soak",
        "command": command("benchmarks.soak", argv),
        "machine": machine(),
        "config": args.config,
        "object_store_mb": harness.object_store(args),
        "scenario": {"cameras": args.cameras, "period_s": args.period_s, "duration_min": args.duration_min,
                     "warmup_min": args.warmup_min, "request": FIELDS, "upload_bytes": CLIP.stat().st_size},
    }

    def write(outcomes: list[dict[str, Any]], rss: list[RssSample], elapsed_s: float) -> None:
        rows = minute_stats(outcomes, rss, elapsed_s)
        write_result(args.out, {
            **header,
            "elapsed_s": round(elapsed_s, 1),
            "complete": elapsed_s >= args.duration_min * 60,
            "verdict": verdict(rows, args.warmup_min, outcomes),
            "serve_processes": rss[-1].processes if rss else None,
            "per_process": replicas.serve_memory(),
            "minutes": rows,
            "errors": [o for o in outcomes if o["status"] != 200][:50],
            "rss_samples": [r.row() for r in rss],
        })

    with harness.serving(args, "soak") as url:
        asyncio.run(soak(url, args, write))
    print(args.out)


if __name__ == "__main__":
    main()
