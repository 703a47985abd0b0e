"""Soak bench: the 4-camera scenario for 30 minutes on CPU; memory and latency over time.

Run from the project root (CPU, outside CI; starts its own Ray + Serve with
``configs/cpu.yaml``'s application args)::

    nohup python -m serve_app.bench.soak --out results/soak-cpu.json &

Live cameras (``/v1/streams``) instead of posted clips: ``--streams`` (see :mod:`serve_app.bench.streams`).

Each of ``--cameras`` cameras sends one clip every ``--period-s`` seconds (a camera cutting its
stream into windows; starts staggered; a request that outlasts the period delays the next one,
never overlaps it). A request uploads the test clip (2.8 MB) and asks about a 10-s window
(40 frames of 420×756) for 16 tokens with ``ignore_eos``.

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
import os
import sys
import time

import httpx

from serve_app.bench import local_serve
from serve_app.config import load_serve_config

logger = logging.getLogger(__name__)

FIELDS = {"question": "Is anyone in danger?", "start_s": 5, "end_s": 15, "max_tokens": 16, "ignore_eos": "true"}
GOAL_RSS_GROWTH_PCT = 5.0


def minute_stats(outcomes: list[dict], rss: list[tuple], duration_s: float) -> list[dict]:
    """Per-minute requests, errors, latency p50/p95 (s) and mean RSS (MiB)."""
    rows = []
    for m in range(int(duration_s // 60)):
        lo, hi = m * 60, (m + 1) * 60
        done = [o for o in outcomes if lo <= o["end_s"] < hi]
        ok = [o["latency_s"] for o in done if o["status"] == 200]
        mem = [r[1] for r in rss if lo <= r[0] < hi]
        priv = [r[4] for r in rss if lo <= r[0] < hi]
        rows.append({
            "minute": m,
            "requests": len(done),
            "errors": len(done) - len(ok),
            "latency_p50_s": None if not ok else round(local_serve.percentile(ok, 50), 3),
            "latency_p95_s": None if not ok else round(local_serve.percentile(ok, 95), 3),
            "rss_mean_mb": None if not mem else round(sum(mem) / len(mem) / 2**20, 1),
            "rss_max_mb": None if not mem else round(max(mem) / 2**20, 1),
            "private_mean_mb": None if not priv else round(sum(priv) / len(priv) / 2**20, 1),
        })
    return rows


def verdict(rows: list[dict], warmup_min: int, outcomes: list[dict]) -> dict:
    """RSS growth after warm-up (mean of the last 5 minutes vs. the 5 after warm-up) and error count."""
    after = [r for r in rows if r["minute"] >= warmup_min and r["rss_mean_mb"] is not None]
    errors = sum(1 for o in outcomes if o["status"] != 200)
    out: dict = {"errors": errors, "requests": len(outcomes), "goal_rss_growth_pct_below": GOAL_RSS_GROWTH_PCT}
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


async def soak(url: str, args, write) -> None:
    """Runs the cameras and the sampler; calls ``write(outcomes, rss, elapsed_s)`` every minute."""
    data = local_serve.CLIP.read_bytes()
    outcomes: list[dict] = []
    rss: list[tuple] = []  # (t_s, rss_bytes, processes, 1-min load average, private_bytes)
    t0 = time.monotonic()
    end = t0 + args.duration_min * 60

    async def camera(i: int, client: httpx.AsyncClient) -> None:
        next_t = t0 + i * args.period_s / args.cameras
        while True:
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))
            if time.monotonic() >= end:
                return
            start = time.monotonic()
            status, err = 0, None
            try:
                r = await client.post(
                    f"{url}/v1/video/query",
                    files={"video": (local_serve.CLIP.name, data, "video/mp4")},
                    data={**{k: str(v) for k, v in FIELDS.items()}, "camera_id": f"cam-{i}"},
                    timeout=300,
                )
                status = r.status_code
                if status != 200:
                    err = r.text[:300]
            except httpx.HTTPError as e:
                err = type(e).__name__
            now = time.monotonic()
            outcomes.append({"camera": i, "start_s": round(start - t0, 2), "end_s": round(now - t0, 2),
                             "latency_s": round(now - start, 3), "status": status, "error": err})
            if err:
                logger.warning("camera %d: %s %s", i, status, err)
            next_t = max(next_t + args.period_s, now)

    async def sampler() -> None:
        last_write = time.monotonic()
        while time.monotonic() < end + 5:
            b, private, n = await asyncio.to_thread(local_serve.serve_rss_bytes)
            rss.append((round(time.monotonic() - t0, 1), b, n, os.getloadavg()[0], private))
            if time.monotonic() - last_write >= 60:
                write(outcomes, rss, time.monotonic() - t0)
                last_write = time.monotonic()
            await asyncio.sleep(args.sample_s)

    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=args.cameras + 4)) as client:
        await asyncio.gather(sampler(), *(camera(i, client) for i in range(args.cameras)))
    write(outcomes, rss, time.monotonic() - t0)


def main(argv: list[str] | None = None) -> None:
    """Command line: starts Serve with configs/cpu.yaml's app args and soaks it.

    ``--streams``: the live-camera soak instead (:mod:`serve_app.bench.streams`, its options).
    """
    rest = list(sys.argv[1:] if argv is None else argv)
    if "--streams" in rest:
        from serve_app.bench import streams

        rest.remove("--streams")
        raise SystemExit(streams.main(["soak", *rest]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/cpu.yaml")
    ap.add_argument("--out", default="results/soak-cpu.json")
    ap.add_argument("--port", type=int, default=8434)
    ap.add_argument("--cameras", type=int, default=4)
    ap.add_argument("--period-s", type=float, default=10.0, help="seconds between one camera's clips")
    ap.add_argument("--duration-min", type=float, default=30)
    ap.add_argument("--warmup-min", type=int, default=5)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--object-store-mb", type=int, default=2048,
                    help="Ray object store size (MiB); 0: Ray's default (30%% of RAM)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    app = load_serve_config(args.config)["applications"][0]
    header = {
        "bench": "soak",
        "command": "python -m serve_app.bench.soak " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": local_serve.machine(),
        "config": args.config,
        "object_store_mb": args.object_store_mb or "ray default (30% of RAM)",
        "scenario": {"cameras": args.cameras, "period_s": args.period_s, "duration_min": args.duration_min,
                     "warmup_min": args.warmup_min, "request": FIELDS,
                     "upload_bytes": local_serve.CLIP.stat().st_size},
    }

    def write(outcomes, rss, elapsed_s):
        rows = minute_stats(outcomes, rss, elapsed_s)
        local_serve.write_result(args.out, {
            **header,
            "elapsed_s": round(elapsed_s, 1),
            "complete": elapsed_s >= args.duration_min * 60,
            "verdict": verdict(rows, args.warmup_min, outcomes),
            "serve_processes": rss[-1][2] if rss else None,
            "per_process": local_serve.serve_memory(),
            "minutes": rows,
            "errors": [o for o in outcomes if o["status"] != 200][:50],
            "rss_samples": [{"t_s": t, "rss_mb": round(b / 2**20, 1), "private_mb": round(p / 2**20, 1),
                             "processes": n, "loadavg_1m": la} for t, b, n, la, p in rss],
        })

    url = local_serve.start(args.port, object_store_mb=args.object_store_mb or None)
    try:
        local_serve.deploy("soak", "/", app["args"])
        asyncio.run(soak(url, args, write))
    finally:
        local_serve.stop()
    print(args.out)


if __name__ == "__main__":
    main()
