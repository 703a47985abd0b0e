"""Bench: what streaming one token at a time through the Serve graph costs, on CPU.

The GPU bench showed the Serve graph below plain vLLM at 64 clips in flight
while the server's decode time was ~0.2 s and the queue empty: the model
replica's single event loop also carries every streamed token (one Ray
object per ``yield``). This bench isolates that cost with a weightless
engine (``serve_app.testing.engines:scripted_engine``, 100 tokens/s per
request) so only the Serve path is measured: ``--inflight`` streams of
``--tokens`` tokens, once per ``stream_interval_ms`` value, recording wall
time, delivered tokens/s and the CPU seconds of each Serve process kind
(model replica, ingress, proxy) per 1,000 tokens.

    python -m serve_app.bench.stream --out results/stream_cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

import httpx

from serve_app.bench import local_serve


def _cpu_by_kind(procs) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in procs:
        try:
            title = " ".join(p.cmdline())
            t = p.cpu_times()
        except Exception:  # noqa: BLE001 - a process that went away
            continue
        kind = next((k for k in ("VideoModel", "Ingress", "VideoDecoder", "ProxyActor", "ServeController") if k in title), "other")
        out[kind] = out.get(kind, 0.0) + t.user + t.system
    return out


async def _streams(url: str, n: int, tokens: int) -> tuple[float, int, list[int]]:
    limits = httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8)
    body = {"question": "q", "video_path": local_serve.CLIP.name, "end_s": 0.5, "max_tokens": tokens,
            "ignore_eos": True, "stream": True}
    events: list[int] = []
    got = 0
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:

        async def one():
            nonlocal got
            count = 0
            async with client.stream("POST", f"{url}/v1/video/query", json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if line.startswith("data: ") and '"delta"' in line:
                        count += 1
                    if line.startswith("data: ") and '"done"' in line:
                        got += json.loads(line[6:])["usage"]["completion_tokens"]
            events.append(count)

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
    return time.perf_counter() - t0, got, events


def run(intervals_ms: list[float], inflight: int, tokens: int, port: int) -> dict:
    """Runs the bench for each interval; returns the result document."""
    url = local_serve.start(port)
    results = []
    try:
        for interval in intervals_ms:
            name = f"stream{int(interval)}"
            args = local_serve.cpu_args(
                model={"backend": "serve_app.testing.engines:scripted_engine", "model_id": "scripted",
                       "checkpoint": None, "served_model_name": "scripted", "allow_ignore_eos": True,
                       "max_concurrent_requests": inflight, "stream_interval_ms": interval, "warmup": False},
                model_replica={"num_cpus": 0, "max_ongoing_requests": inflight, "max_queued_requests": -1},
                decoder={"num_cpus": 0, "num_replicas": 1, "max_ongoing_requests": 8, "max_queued_requests": -1},
            )
            local_serve.deploy(name, f"/{name}", args)
            asyncio.run(_streams(f"{url}/{name}", 4, 8))  # warm-up
            procs = local_serve.serve_processes()
            before = _cpu_by_kind(procs)
            wall, got, events = asyncio.run(_streams(f"{url}/{name}", inflight, tokens))
            after = _cpu_by_kind(procs)
            cpu = {k: round(after.get(k, 0) - before.get(k, 0), 3) for k in after}
            results.append({
                "stream_interval_ms": interval,
                "wall_s": round(wall, 3),
                "tokens": got,
                "tokens_per_s": round(got / wall, 1),
                "ideal_wall_s": round(tokens * 0.01, 2),
                "sse_delta_events_per_stream": round(sum(events) / len(events), 1),
                "cpu_s": cpu,
                "cpu_ms_per_1000_tokens": {k: round(v / got * 1e6, 1) for k, v in cpu.items() if got},
            })
            from ray import serve

            serve.delete(name)
    finally:
        local_serve.stop()
    return {
        "command": "python -m serve_app.bench.stream " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]},
        "engine": "serve_app.testing.engines:scripted_engine (no model; 10 ms per token per request)",
        "inflight": inflight, "tokens_per_request": tokens, "runs": results,
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--intervals-ms", default="0,50", help="comma-separated stream_interval_ms values")
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--port", type=int, default=8473)
    p.add_argument("--out", default="results/stream_cpu.json")
    a = p.parse_args(argv)
    doc = run([float(x) for x in a.intervals_ms.split(",")], a.inflight, a.tokens, a.port)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=2))
    for r in doc["runs"]:
        print(f"interval {r['stream_interval_ms']:>4} ms: {r['wall_s']:.2f} s (ideal {r['ideal_wall_s']}), "
              f"{r['tokens_per_s']:.0f} tok/s, CPU ms/1000 tok {r['cpu_ms_per_1000_tokens']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
