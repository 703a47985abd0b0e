"""GPU benchmark: plain vLLM vs the project's Serve graph on the reference workload.

One command measures, on the same GPU and the same clip windows
(:mod:`benchmarks.workload`):

0. ``vllm_serve*`` (``--vllm-serve NAME=JSON``): plain ``vllm serve`` (vLLM's OpenAI
   server, :mod:`benchmarks.vllm_serve`), each window file as a ``file://``
   ``video_url``, with and without the per-request GPU processor;
1. ``plain_default``: plain vLLM (``AsyncLLM``, the engine of vLLM's offline
   ``LLM`` class as well) with default engine settings, fed the decoded frames
   in ``multi_modal_data`` with ``mm_processor_kwargs={"fps": 4}`` (:mod:`benchmarks.gpu_plain`);
2. ``plain_gpu_processor``: the same engine with
   ``mm_processor_kwargs={"fps": 4, "device": "cuda"}`` (the HF video
   processor on the GPU) — the best plain-vLLM configuration known;
3. ``serve`` (and named variants): the project's whole Serve graph, each window
   file named as ``video_path`` (JSON), decoded by the decode tier, answered by a
   GPU replica, streamed (SSE) so TTFT is seen by the client (:mod:`benchmarks.gpu_serve`).

Every side reads the same window files, cut once before the run
(:func:`benchmarks.workload.window_files`), and must report the same
prompt token count: the bench exits 1 when they differ.

Each side runs in its own process (the GPU is freed between sides). For each:
clips/s and output tokens/s with ``--inflight`` clips submitted at once,
TTFT and end-to-end p50/p95, single-clip TTFT (≈ preprocessing + prefill),
GPU memory, engine/replica start time, engine arguments. Usage (GPU machine)::

    python -m benchmarks.gpu --out results/gpu_bench.json \\
        --checkpoint checkpoints/cosmos-reason1-7b-dummy --clip tests/data/intel_car-detection.mp4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_plain import plain_side
from benchmarks.gpu_probe import gpu_memory_used_mib, versions
from benchmarks.gpu_serve import serve_side
from benchmarks.result import finite
from benchmarks.workload import OUTPUT_TOKENS, QUESTION, SYSTEM_PROMPT, run_figures, window_files

logger = logging.getLogger(__name__)


def _side_main(args: argparse.Namespace) -> None:
    files = window_files(args)
    if args.side == "plain":
        result = asyncio.run(plain_side(args, files))
    elif args.side.startswith("vllm_serve"):
        from benchmarks.vllm_serve import vllm_serve_side

        spec = json.loads(args.overrides or "{}")
        variants = spec.get("variants") or {args.side: {}}
        result = vllm_serve_side(
            checkpoint=args.checkpoint, files=files, single=args.single, inflight=args.inflight, port=args.port,
            warm_burst=args.warm_burst,
            flags=spec.get("flags", []), variants=variants,
            log_path=Path(args.out).with_suffix(f".{args.side}.server.log"), result=run_figures,
            gpu_memory=gpu_memory_used_mib,
        )
    else:
        overrides = json.loads(args.overrides or "{}")
        result = asyncio.run(serve_side(args, files, args.side, overrides))
    Path(args.part).write_text(json.dumps(finite(result), indent=2, allow_nan=False))


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description="plain vLLM vs the Serve graph on the reference workload")
    p.add_argument("--checkpoint", default="checkpoints/cosmos-reason1-7b-dummy")
    p.add_argument("--clip", default="tests/data/intel_car-detection.mp4")
    p.add_argument("--serve-config", default="configs/h200.yaml")
    p.add_argument("--out", default="results/gpu_bench.json")
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--single", type=int, default=3)
    p.add_argument("--warm-burst", type=int, default=0,
                   help="untimed clips sent at once to every side after its one-clip warm-up (distinct windows)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--plain-engine-args", default="{}", help="JSON overrides for the plain sides")
    p.add_argument("--variant", action="append", default=[],
                   help='Serve variant NAME=JSON, JSON = {"model": {...}, "engine_args": {...}, '
                        '"processor_kwargs": {...}, "model_replica": {...}, "decoder": {...}, "decode": {...}, '
                        '"inflight": N}; '
                        'default: one side named "serve" with the config as is')
    p.add_argument("--vllm-serve", action="append", default=[],
                   help='plain `vllm serve` side NAME=JSON, JSON = {"flags": [...], "variants": {VARIANT: '
                        '{extra request fields}}}; one server per NAME, the variants run one after another')
    p.add_argument("--windows-dir", default="/tmp/bench-windows", help="where the window files are cut (once)")
    p.add_argument("--profile-s", type=int, default=0,
                   help="py-spy record the model replica (with its engine core) for this many s during the "
                        "in-flight phase of each Serve side (flame graph next to --out)")
    p.add_argument("--profile", nargs="*", help="Serve sides to profile (default: all)")
    p.add_argument("--no-plain", action="store_true", help="skip the plain AsyncLLM sides")
    p.add_argument("--only", nargs="*", help="plain variants to run (default: both)")
    p.add_argument("--verbose", action="store_true")
    # internal: one side per process
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--part", help=argparse.SUPPRESS)
    p.add_argument("--window-count", type=int, help=argparse.SUPPRESS)
    p.add_argument("--overrides", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.checkpoint = str(Path(args.checkpoint).resolve())
    if args.side:
        _side_main(args)
        return 0

    from serve_app.model.checkpoint import ensure_checkpoint

    ensure_checkpoint("full-dummy", args.checkpoint)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.gpu", *(argv if argv is not None else sys.argv[1:])]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": versions(),
        "workload": {
            "clip": Path(args.clip).name,
            "window_s": 10,
            "fps": 4,
            "frames": 40,
            "frame_size": [420, 756],
            "video_tokens": 8100,
            "system_prompt": SYSTEM_PROMPT,
            "question": QUESTION,
            "output_tokens": OUTPUT_TOKENS,
            "ignore_eos": True,
            "dtype": "bfloat16",
            "weights": "vLLM dummy (random), full Cosmos-Reason1-7B architecture",
            "caches": "every request uses a distinct 10-s window (start offsets spread over the clip), so neither "
            "the multimodal processor cache nor the prefix cache can reuse another request's clip; only "
            "the ~14-token system prompt prefix is shared",
            "inflight": args.inflight,
            "single_clip_runs": args.single,
            "warm_burst": args.warm_burst,
        },
        "sides": {},
    }
    variants = args.variant or ["serve={}"]
    inflights = [int(json.loads(v.partition("=")[2] or "{}").get("inflight", args.inflight)) for v in variants]
    args.window_count = 1 + args.single + max([args.inflight, *inflights]) + args.warm_burst
    files = window_files(args)
    report["workload"]["window_files"] = {"dir": str(Path(args.windows_dir).resolve()), "count": len(files),
                                          "cut": "re-encoded H.264 (libx264 CRF 18), exactly the window's frames"}
    sides: list[tuple[str, str | None]] = []
    for v in args.vllm_serve:
        name, _, js = v.partition("=")
        sides.append((name if name.startswith("vllm_serve") else f"vllm_serve_{name}", js or "{}"))
    if not args.no_plain:
        sides.append(("plain", None))
    for v in variants:
        name, _, js = v.partition("=")
        sides.append((name, js or "{}"))
    for side, overrides in sides:
        part = out_path.with_suffix(f".{side}.part.json")
        cmd = [sys.executable, "-m", "benchmarks.gpu", "--side", side, "--part", str(part),
               "--checkpoint", args.checkpoint, "--clip", args.clip, "--serve-config", args.serve_config,
               "--inflight", str(args.inflight), "--single", str(args.single), "--port", str(args.port),
               "--warm-burst", str(args.warm_burst),
               "--plain-engine-args", args.plain_engine_args, "--windows-dir", args.windows_dir,
               "--out", str(out_path), "--profile-s", str(args.profile_s), "--window-count", str(args.window_count)]
        if args.profile:
            cmd += ["--profile", *args.profile]
        if overrides:
            cmd += ["--overrides", overrides]
        if args.only:
            cmd += ["--only", *args.only]
        t0 = time.perf_counter()
        logger.info("side %s: %s", side, " ".join(cmd))
        rc = subprocess.run(cmd).returncode
        if rc != 0 or not part.exists():
            report["sides"][side] = {"error": f"side process exited with {rc}"}
        else:
            report["sides"].update(json.loads(part.read_text()))
            part.unlink()
        report.setdefault("side_wall_s", {})[side] = round(time.perf_counter() - t0, 1)
        out_path.write_text(json.dumps(finite(report), indent=2, allow_nan=False))  # keep partial results
    report["table"] = table(report)
    tokens = {name: side[k]["server"]["prompt_tokens"] for name, side in report["sides"].items() if "error" not in side
              for k in side if k.startswith("inflight_") and "server" in side[k]}
    report["prompt_tokens_by_side"] = tokens
    same = len({tuple(v) for v in tokens.values()}) <= 1 and all(len(v) == 1 for v in tokens.values())
    report["prompt_tokens_identical"] = same
    out_path.write_text(json.dumps(finite(report), indent=2, allow_nan=False))
    print("\n".join(report["table"]))
    if not same:
        print(f"prompt token counts differ between sides: {tokens}")
        return 1
    return 0


def table(report: dict[str, Any]) -> list[str]:
    """A Markdown table of the headline figures (for the README)."""
    rows = ["| side | clips/s | output tok/s | TTFT p50 / p95 (s) | e2e p50 / p95 (s) | single-clip TTFT p50 (s) |",
            "|---|---|---|---|---|---|"]
    for name, side in report["sides"].items():
        if "error" in side:
            rows.append(f"| {name} | error: {side['error']} | | | | |")
            continue
        key = next(k for k in side if k.startswith("inflight_"))
        r = side[key]
        rows.append(
            f"| {name} | {r['clips_per_s']:.2f} | {r['output_tokens_per_s']:.0f} | "
            f"{r['ttft_s']['p50']:.2f} / {r['ttft_s']['p95']:.2f} | "
            f"{r['e2e_s']['p50']:.2f} / {r['e2e_s']['p95']:.2f} | "
            f"{side['single']['ttft_s']['p50']:.2f} |"
        )
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
