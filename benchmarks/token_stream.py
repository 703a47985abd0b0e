"""Bench: what streaming one token at a time through the Serve graph costs, on CPU.

The GPU bench showed the Serve graph below plain vLLM at 64 clips in flight
while the server's decode time was ~0.2 s and the queue empty: the model
replica's single event loop also carries every streamed token (one Ray
object per ``yield``). This bench isolates that cost with a weightless
engine (``serve_app.testing.engines:scripted_engine``, 100 tokens/s per
request) so only the Serve path is measured: ``--inflight`` streams of
``--tokens`` tokens, once per ``stream_interval_ms`` value, recording wall
time, delivered tokens/s and the CPU seconds of each Serve process kind
(model replica, ingress, proxy) per 1,000 tokens. The streams are a
:func:`loadtest.traffic.batch` (the load tester's client and records).

    python -m benchmarks.token_stream --out results/stream_cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Iterable
from typing import Any

from ray import serve

from benchmarks import replicas
from benchmarks.result import command, machine, write_result
from loadtest import traffic
from serve_app.testing import local_serve


def _cpu_by_kind(procs: Iterable[Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in procs:
        try:
            title = " ".join(p.cmdline())
            t = p.cpu_times()
        except Exception:  # noqa: BLE001 - a process that went away
            continue
        kinds = ("VideoModel", "Ingress", "VideoDecoder", "ProxyActor", "ServeController")
        kind = next((k for k in kinds if k in title), "other")
        out[kind] = out.get(kind, 0.0) + t.user + t.system
    return out


async def _streams(url: str, n: int, tokens: int) -> tuple[float, int, list[int]]:
    """``n`` streams of ``tokens`` tokens at once; (wall s, completion tokens, delta events per stream).

    Raises:
        RuntimeError: a stream failed.
    """
    query = traffic.ClipQuery(local_serve.CLIP, "q", end_s=0.5, upload=False)
    t0 = time.perf_counter()
    records = await traffic.batch(url, [query] * n, max_tokens=tokens, ignore_eos=True, stream=True,
                                  request_timeout_s=300)
    wall = time.perf_counter() - t0
    failed = [r for r in records if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {n} streams failed, e.g. {failed[0].status} {failed[0].error_message}")
    return wall, sum(r.completion_tokens or 0 for r in records), [r.delta_events for r in records]


def run(
    intervals_ms: list[float], inflight: int, tokens: int, port: int, argv: list[str] | None = None
) -> dict[str, Any]:
    """Runs the bench for each interval; returns the result document."""
    results = []
    with local_serve.running(port) as url:
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
            procs = replicas.serve_processes()
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
            serve.delete(name)
    return {
        "command": command("benchmarks.token_stream", argv),
        "machine": machine(),
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
    doc = run([float(x) for x in a.intervals_ms.split(",")], a.inflight, a.tokens, a.port, argv)
    write_result(a.out, doc)
    for r in doc["runs"]:
        print(f"interval {r['stream_interval_ms']:>4} ms: {r['wall_s']:.2f} s (ideal {r['ideal_wall_s']}), "
              f"{r['tokens_per_s']:.0f} tok/s, CPU ms/1000 tok {r['cpu_ms_per_1000_tokens']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
