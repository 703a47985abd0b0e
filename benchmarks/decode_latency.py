"""Lone-clip decode latency: the decode tier's share of a single clip's TTFT, by FFmpeg thread count.

A lone clip waits for its whole decode before the model sees it, so its wall-clock decode
time adds to TTFT one for one (the GPU bench's single-clip breakdown: ``decode_s``). This
bench cuts the GPU bench's reference window (a 10-s H.264 window of
``tests/data/intel_car-detection.mp4``, :func:`benchmarks.workload.cut_window_files`)
and decodes it as the decode tier does (4 fps, the default pixel budget, from the file) with
``decode.threads`` = each of ``--threads``, interleaved, ``--repeats`` times after one warm-up
each; it reports the p50 and p95 wall-clock milliseconds and the CPU seconds per decode.
Usage::

    python -m benchmarks.decode_latency --threads 1 2 4 --out results/decode_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.result import finite

ROOT = Path(__file__).resolve().parents[1]


def lone_clip_latency(path: Path, threads: list[int], repeats: int) -> list[dict[str, Any]]:
    """Wall-clock ms (p50, p95) and CPU s (median) of decoding ``path`` once per thread count.

    Raises:
        serve_app.errors.DecodeError: the clip does not decode (as in the decode tier).
    """
    from loadtest import statistics as stats
    from serve_app.config import DecodeConfig, LimitsConfig
    from serve_app.decode.clip import decode_clip
    from serve_app.protocol import FrameSampling

    def once(n: int) -> tuple[float, float, int]:
        t0, c0 = time.perf_counter(), time.process_time()
        clip = decode_clip(path, FrameSampling(fps=4.0, max_frames=128), DecodeConfig(threads=n), LimitsConfig())
        return (time.perf_counter() - t0) * 1000, time.process_time() - c0, clip.num_frames

    walls: dict[int, list[float]] = {n: [] for n in threads}
    cpus: dict[int, list[float]] = {n: [] for n in threads}
    frames: dict[int, int] = {}
    for n in threads:  # one warm-up each (a replica decodes many clips)
        frames[n] = once(n)[2]
    for _ in range(repeats):
        for n in threads:
            wall, cpu, _ = once(n)
            walls[n].append(wall)
            cpus[n].append(cpu)
    out = []
    for n in threads:
        out.append({
            "threads": n,
            "frames": frames[n],
            "wall_ms": stats.percentiles(walls[n], (50, 95), digits=1),
            "cpu_s": round(statistics.median(cpus[n]), 4),
        })
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    import av

    from benchmarks.workload import Window, cut_window_files

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clip", default=str(ROOT / "tests" / "data" / "intel_car-detection.mp4"))
    p.add_argument("--start-s", type=float, default=10.0, help="window start in the clip (s); the window is 10 s")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4], help="decode.threads values (0: FFmpeg's)")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--out", default="results/decode_latency.json")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        [path] = cut_window_files([Window(Path(args.clip), args.start_s)], Path(tmp), workers=1)
        with av.open(str(path)) as c:
            stream = c.streams.video[0]
            source = {"width": stream.width, "height": stream.height, "frames": stream.frames, "codec": stream.name}
        rows = lone_clip_latency(path, args.threads, args.repeats)
    doc = {
        "bench": "decode_latency",
        "command": "python -m benchmarks.decode_latency " + " ".join(argv if argv is not None else sys.argv[1:]),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "window": {"clip": Path(args.clip).name, "start_s": args.start_s, "duration_s": 10.0, **source},
        "results": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(finite(doc), indent=2, allow_nan=False) + "\n")
    for r in rows:
        print(f"threads {r['threads']}: {r['wall_ms']['p50']:.1f} ms median, p95 {r['wall_ms']['p95']:.1f} ms, "
              f"{r['cpu_s']:.3f} CPU-s, {r['frames']} frames")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
