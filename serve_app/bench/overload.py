"""Overload bench: 4× more requests than the CPU graph can serve; rejected requests must be fast
and the server's memory bounded.

Run from the project root (CPU, outside CI; starts its own Ray + Serve with ``configs/cpu.yaml``'s
application args, so the bounded queues measured are the shipped ones)::

    python -m serve_app.bench.overload --out results/overload-cpu.json

1. **Capacity.** ``--cameras`` closed-loop clients for ``--capacity-s`` seconds: completed
   requests per second is the capacity ``X``.
2. **Overload.** Open-loop Poisson arrivals at ``--factor`` × X for ``--overload-s`` seconds;
   each request's status and latency are recorded.
3. **Memory.** Summed RSS of the Serve processes (controller, proxy, replicas) every second
   through both phases.

Every request uploads the test clip (multipart, 2.8 MB) and asks about a 10-s window (40 frames
of 420×756) for ``--max-tokens`` tokens with ``ignore_eos``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import sys
import time

import httpx

from serve_app.bench import local_serve
from serve_app.config import load_serve_config

logger = logging.getLogger(__name__)


def request_fields(max_tokens: int) -> dict:
    """Form fields of one bench request (a 10-s window, fixed output length)."""
    return {"question": "Is anyone in danger?", "start_s": 5, "end_s": 15, "max_tokens": max_tokens, "ignore_eos": "true"}


class RssSampler:
    """Samples :func:`local_serve.serve_rss_bytes` every ``period_s`` seconds in the background."""

    def __init__(self, period_s: float = 1.0):
        self.period_s = period_s
        self.samples: list[tuple] = []  # (t_s, rss_bytes, processes, phase, 1-min load average, private_bytes)
        self._t0 = time.monotonic()

    async def run(self, stop: asyncio.Event, phase: list[str]) -> None:
        """Samples until ``stop`` is set; ``phase[0]`` labels each sample."""
        while not stop.is_set():
            rss, private, n = await asyncio.to_thread(local_serve.serve_rss_bytes)
            self.samples.append((round(time.monotonic() - self._t0, 1), rss, n, phase[0], os.getloadavg()[0], private))
            try:
                await asyncio.wait_for(stop.wait(), self.period_s)
            except TimeoutError:
                pass


async def open_loop(url: str, rate_rps: float, duration_s: float, fields: dict, timeout_s: float) -> list[dict]:
    """Poisson arrivals at ``rate_rps`` for ``duration_s``; every request's status and latency."""
    data = local_serve.CLIP.read_bytes()
    results: list[dict] = []
    rng = random.Random(0)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=1024, max_keepalive_connections=64)) as client:

        async def one(i: int) -> None:
            t = time.monotonic()
            status, err = 0, None
            try:
                r = await client.post(
                    f"{url}/v1/video/query",
                    files={"video": (local_serve.CLIP.name, data, "video/mp4")},
                    data={k: str(v) for k, v in {**fields, "camera_id": f"cam-{i % 16}"}.items()},
                    timeout=timeout_s,
                )
                status = r.status_code
                if status != 200:
                    err = r.json()["error"]["type"]
                    if status == 503:
                        assert r.headers.get("retry-after"), "503 without Retry-After"
            except httpx.HTTPError as e:
                err = type(e).__name__
            results.append({"status": status, "latency_s": time.monotonic() - t, "error": err})

        tasks = []
        t0 = time.monotonic()
        next_t = 0.0
        i = 0
        while next_t < duration_s:
            delay = t0 + next_t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
            i += 1
            next_t += rng.expovariate(rate_rps)
        await asyncio.gather(*tasks)
    return results


def summarize(results: list[dict]) -> dict:
    """Counts by status and latency percentiles (s) of accepted (200) and rejected (503) requests."""
    by_status: dict[str, int] = {}
    for r in results:
        by_status[str(r["status"])] = by_status.get(str(r["status"]), 0) + 1
    ok = [r["latency_s"] for r in results if r["status"] == 200]
    rej = [r["latency_s"] for r in results if r["status"] == 503]

    def pct(v):
        return {f"p{q}": None if not v else round(local_serve.percentile(v, q), 3) for q in (50, 95, 99)} | {
            "max": round(max(v), 3) if v else None}

    return {"requests": len(results), "by_status": by_status, "accepted_latency_s": pct(ok), "rejected_latency_s": pct(rej)}


async def run(url: str, args) -> dict:
    """Both phases with the RSS sampler running; returns the result dict."""
    sampler = RssSampler()
    stop = asyncio.Event()
    phase = ["idle"]
    sampling = asyncio.create_task(sampler.run(stop, phase))
    await asyncio.sleep(3)
    phase[0] = "capacity"
    t = time.monotonic()
    closed = await local_serve.camera_load(
        url, cameras=args.cameras, duration_s=args.capacity_s, fields=request_fields(args.max_tokens), timeout_s=300
    )
    elapsed = time.monotonic() - t
    ok = [o for o in closed if o.status == 200]
    capacity = len(ok) / elapsed
    logger.info("capacity: %d ok in %.1f s = %.2f req/s", len(ok), elapsed, capacity)
    phase[0] = "overload"
    offered = args.factor * capacity
    t = time.monotonic()
    results = await open_loop(url, offered, args.overload_s, request_fields(args.max_tokens), timeout_s=300)
    overload_elapsed = time.monotonic() - t
    phase[0] = "after"
    per_process_overload_end = await asyncio.to_thread(local_serve.serve_memory)
    await asyncio.sleep(5)
    stop.set()
    await sampling
    rss = sampler.samples

    def mb(b):
        return round(b / 2**20, 1)

    def phase_rss(name):
        v = [s[1] for s in rss if s[3] == name]
        p = [s[5] for s in rss if s[3] == name]
        return {"first_mb": mb(v[0]), "max_mb": mb(max(v)), "last_mb": mb(v[-1]),
                "private_max_mb": mb(max(p)), "private_last_mb": mb(p[-1])} if v else None

    summary = summarize(results)
    # Until the last answer (requests admitted near the end finish after the arrivals stop).
    summary["goodput_rps"] = round(summary["by_status"].get("200", 0) / overload_elapsed, 3)
    ov = [s for s in rss if s[3] == "overload"]
    half = len(ov) // 2
    return {
        "capacity": {
            "cameras": args.cameras, "duration_s": round(elapsed, 1), "ok": len(ok), "requests": len(closed),
            "rps": round(capacity, 3),
            "latency_p50_s": local_serve.percentile([o.latency_s for o in ok], 50),
        },
        "overload": {"factor": args.factor, "offered_rps": round(offered, 3), "duration_s": args.overload_s, **summary},
        "memory": {
            "serve_processes": rss[-1][2] if rss else None,
            "by_phase": {p: phase_rss(p) for p in ("idle", "capacity", "overload", "after")},
            "overload_growth_over_capacity_peak_pct": None if not rss else round(
                100 * (max(s[1] for s in rss if s[3] == "overload") / max(s[1] for s in rss if s[3] == "capacity") - 1), 2),
            # A trend check: a leak grows from the first to the second half of the overload phase.
            "overload_first_half_max_mb": mb(max(s[1] for s in ov[:half])) if half else None,
            "overload_second_half_max_mb": mb(max(s[1] for s in ov[half:])) if half else None,
            "overload_private_first_half_max_mb": mb(max(s[5] for s in ov[:half])) if half else None,
            "overload_private_second_half_max_mb": mb(max(s[5] for s in ov[half:])) if half else None,
            "per_process_at_overload_end": per_process_overload_end,
            "samples": [{"t_s": s[0], "rss_mb": mb(s[1]), "private_mb": mb(s[5]), "processes": s[2], "phase": s[3],
                         "loadavg_1m": s[4]}
                        for s in rss],
        },
    }


def main(argv: list[str] | None = None) -> None:
    """Command line: starts Serve with configs/cpu.yaml's app args, runs both phases, writes JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/cpu.yaml")
    ap.add_argument("--out", default="results/overload-cpu.json")
    ap.add_argument("--port", type=int, default=8433)
    ap.add_argument("--cameras", type=int, default=4)
    ap.add_argument("--capacity-s", type=float, default=60)
    ap.add_argument("--overload-s", type=float, default=90)
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--object-store-mb", type=int, default=2048,
                    help="Ray object store size (MiB); 0: Ray's default (30%% of RAM)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    app = load_serve_config(args.config)["applications"][0]
    url = local_serve.start(args.port, object_store_mb=args.object_store_mb or None)
    try:
        local_serve.deploy("overload", "/", app["args"])
        result = asyncio.run(run(url, args))
    finally:
        local_serve.stop()
    ov = result["overload"]
    result = {
        "bench": "overload",
        "command": "python -m serve_app.bench.overload " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": local_serve.machine(),
        "config": args.config,
        "object_store_mb": args.object_store_mb or "ray default (30% of RAM)",
        "limits": {k: app["args"][k] for k in ("decoder", "model_replica", "ingress")},
        "request": request_fields(args.max_tokens) | {"upload_bytes": local_serve.CLIP.stat().st_size},
        "goal": {"rejected_p99_s_below": 1.0, "memory": "bounded (no growth trend under overload)"},
        "verdict": {
            "rejected_p99_s": ov["rejected_latency_s"]["p99"],
            "rejected_p99_below_1s": ov["rejected_latency_s"]["p99"] is not None and ov["rejected_latency_s"]["p99"] < 1.0,
            "client_timeouts_or_errors": ov["by_status"].get("0", 0),
        },
        **result,
    }
    print(local_serve.write_result(args.out, result))


if __name__ == "__main__":
    main()
