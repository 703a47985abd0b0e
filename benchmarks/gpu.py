"""GPU benchmark: plain vLLM vs the project's Serve graph on the reference workload.

One command measures, on the same GPU and the same clip windows
(:mod:`benchmarks.workload`):

0. ``vllm_serve*`` (``--vllm-serve NAME=JSON``): plain ``vllm serve`` (vLLM's OpenAI
   server, :mod:`benchmarks.vllm_serve`), each window file as a ``file://``
   ``video_url``, with and without the per-request GPU processor;
1. ``plain_default``: plain vLLM (``AsyncLLM``, the engine of vLLM's offline
   ``LLM`` class as well) with default engine settings, fed the decoded frames
   in ``multi_modal_data`` with ``mm_processor_kwargs={"fps": 4}``;
2. ``plain_gpu_processor``: the same engine with
   ``mm_processor_kwargs={"fps": 4, "device": "cuda"}`` (the HF video
   processor on the GPU) — the best plain-vLLM configuration known;
3. ``serve`` (and named variants): the project's whole Serve graph, each window
   file named as ``video_path`` (JSON), decoded by the decode tier, answered by a
   GPU replica, streamed (SSE) so TTFT is seen by the client.

Every side reads the same window files, cut once before the run
(:func:`benchmarks.workload.cut_window_files`), and must report the same
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
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.workload import (
    OUTPUT_TOKENS,
    QUESTION,
    SYSTEM_PROMPT,
    batch_figures,
    cut_window_files,
    send_batch,
    split_run,
    summary,
    windows,
)

logger = logging.getLogger(__name__)

#: Engine arguments every side shares: the dummy checkpoint in bf16. Anything
#: else is vLLM's default on the plain sides and the Serve config's on ours.
BASE_ENGINE_ARGS = {"load_format": "dummy", "dtype": "bfloat16"}


def gpu_memory_used_mib() -> int | None:
    """GPU memory in use on device 0 (MiB), from nvidia-smi."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        )
        return int(out.stdout.split()[0])
    except Exception:  # noqa: BLE001 - informational only
        return None


def versions() -> dict[str, str | None]:
    """Versions of the packages and GPU behind the figures."""
    import importlib.metadata as md

    out: dict[str, str | None] = {}
    for pkg in ("vllm", "torch", "transformers", "ray", "av", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        name = None
    out["gpu"] = name
    return out


def _result(name: str, wall_s: float, n: int, out_tokens: int, ttft: list[float], e2e: list[float]) -> dict:
    return {
        "clips": n,
        "wall_s": round(wall_s, 3),
        "clips_per_s": round(n / wall_s, 4),
        "output_tokens_per_s": round(out_tokens / wall_s, 1),
        "ttft_s": summary(ttft),
        "e2e_s": summary(e2e),
    }


# --------------------------------------------------------------------- plain vLLM
async def _plain_run(llm, prompts: list[dict], sampling, tag: str, prompt_tokens: list | None = None):
    t0 = time.perf_counter()
    ttft: list[float] = []
    e2e: list[float] = []
    n_tokens = 0

    async def one(i: int, prompt: dict):
        nonlocal n_tokens
        first = None
        async for out in llm.generate(prompt, sampling, f"{tag}-{i}"):
            if prompt_tokens is not None and first is None and out.prompt_token_ids is not None:
                prompt_tokens.append(len(out.prompt_token_ids))
            if first is None and out.outputs and out.outputs[0].token_ids:
                first = time.perf_counter() - t0
            n_tokens += len(out.outputs[0].token_ids)
        ttft.append(first if first is not None else float("nan"))
        e2e.append(time.perf_counter() - t0)

    await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return time.perf_counter() - t0, n_tokens, ttft, e2e


def decode_file(path: Path):
    """Decodes one whole window file with the project's decoder (4 fps, Cosmos pixel budget)."""
    from serve_app.config import DecodeConfig, LimitsConfig
    from serve_app.decode.clip import decode_clip
    from serve_app.decode.sampling import FrameSampling

    return decode_clip(path, FrameSampling(fps=4.0, max_frames=128), DecodeConfig(), LimitsConfig())


async def _plain_side(args, files: list[Path]) -> dict:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    from serve_app.model.prompt import render_prompt
    from serve_app.model_facts import COSMOS_REPETITION_PENALTY, COSMOS_TEMPERATURE, COSMOS_TOP_P

    engine_args = {**BASE_ENGINE_ARGS, **json.loads(args.plain_engine_args or "{}")}
    t0 = time.perf_counter()
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=args.checkpoint, **engine_args))
    start_s = time.perf_counter() - t0
    mem = gpu_memory_used_mib()
    sampling = SamplingParams(max_tokens=OUTPUT_TOKENS, ignore_eos=True, temperature=COSMOS_TEMPERATURE,
                              top_p=COSMOS_TOP_P, repetition_penalty=COSMOS_REPETITION_PENALTY,
                              output_kind=RequestOutputKind.DELTA)
    text = render_prompt(QUESTION, SYSTEM_PROMPT)
    clips = [decode_file(f) for f in files]
    frames = [c.frames for c in clips]
    assert all(f.shape == (40, 420, 756, 3) for f in frames), [f.shape for f in frames]
    sides: dict[str, Any] = {}
    variants: dict[str, dict[str, Any]] = {
        "plain_default": {"fps": 4},
        "plain_gpu_processor": {"fps": 4, "device": "cuda"},
    }
    for name, mmk in variants.items():
        if args.only and name not in args.only:
            continue
        def prompts(fr: list[Any], mmk: dict[str, Any] = mmk) -> list[dict[str, Any]]:
            return [{"prompt": text, "multi_modal_data": {"video": f}, "mm_processor_kwargs": mmk} for f in fr]
        # the same windows as every other side; no cache may carry one variant's work to the next
        await llm.reset_prefix_cache()
        await llm.reset_mm_cache()
        run = split_run(frames, args.single, args.inflight, args.warm_burst)
        single, batch = run.single, run.batch
        # warm-up (not timed): one clip through the processor path of this variant, then the warm burst
        await _plain_run(llm, prompts(run.warmup), sampling, f"{name}-warm")
        if run.warm_burst:
            await _plain_run(llm, prompts(run.warm_burst), sampling, f"{name}-warmburst")
        single_ttft, single_e2e = [], []
        for i, p in enumerate(prompts(single)):
            _, _, tt, ee = await _plain_run(llm, [p], sampling, f"{name}-single{i}")
            single_ttft += tt
            single_e2e += ee
        ptoks: list[int] = []
        wall, ntok, ttft, e2e = await _plain_run(llm, prompts(batch), sampling, name, ptoks)
        sides[name] = {
            "engine": "vLLM AsyncLLM (plain, no project code)",
            "engine_args": engine_args,
            "mm_processor_kwargs": mmk,
            "warm_burst": len(run.warm_burst),
            "engine_start_s": round(start_s, 2),
            "gpu_memory_used_mib": mem,
            "single": {"ttft_s": summary(single_ttft), "e2e_s": summary(single_e2e)},
            f"inflight_{len(batch)}": {**_result(name, wall, len(batch), ntok, ttft, e2e),
                                       "server": {"prompt_tokens": sorted(set(ptoks))}},
        }
    llm.shutdown()
    return sides


# --------------------------------------------------------------------- Serve graph
def _serve_args(args, overrides: dict) -> dict:
    from serve_app.config import app_config_from_file

    cfg = app_config_from_file(args.serve_config).model_dump(mode="json")
    model = cfg["model"]
    model.update(
        model_id=args.checkpoint,
        checkpoint=None,
        served_model_name="cosmos-reason1-7b-dummy",
        system_prompt=SYSTEM_PROMPT,
        allow_ignore_eos=True,
    )
    model.update(overrides.get("model", {}))
    model["engine_args"] = {**model["engine_args"], **BASE_ENGINE_ARGS, **overrides.get("engine_args", {})}
    model["processor_kwargs"] = {**model.get("processor_kwargs", {}), **overrides.get("processor_kwargs", {})}
    cfg["sources"]["allowed_roots"] = [str(Path(args.windows_dir).resolve())]
    for key in ("ingress", "decoder", "model_replica", "decode"):
        cfg[key].update(overrides.get(key, {}))
    return cfg


def query_body(path: Path) -> dict[str, Any]:
    """The graph's request for one window file (``video_path``, streamed, fixed output length)."""
    return {"video_path": str(path), "question": QUESTION, "max_tokens": OUTPUT_TOKENS, "ignore_eos": True,
            "stream": True}


async def _http_run(url: str, files: list[Path]) -> tuple[float, int, list, list, list]:
    """All ``files`` at once to the graph's query route (loadtest's client); wall, tokens, TTFT, e2e, timings."""
    recs = await send_batch(url, [query_body(f) for f in files], "/v1/video/query")
    server = [{"decode_ms": r.decode_ms, "queue_ms": r.queue_ms, "model_ms": r.model_ms, "ttft_ms": r.server_ttft_ms,
               "total_ms": r.server_total_ms, "prompt_tokens": r.prompt_tokens} for r in recs]
    wall, tokens, ttft, e2e = batch_figures(recs)
    return wall, tokens, ttft, e2e, server


def _server_breakdown(server: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("decode_ms", "queue_ms", "model_ms", "ttft_ms", "total_ms")
    out: dict[str, Any] = {k[:-3] + "_s": summary([s[k] / 1000 for s in server if s.get(k) is not None]) for k in keys}
    out["prompt_tokens"] = sorted({s["prompt_tokens"] for s in server})
    return out


def _engine_breakdown(path: Path, request_ids: set[str] | None = None) -> dict[str, Any]:
    """Per-stage summaries (ms) of the engine timing rows (see ``vllm_engine.TIMINGS_ENV``)."""
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("completion_tokens") and (request_ids is None or r["request_id"] in request_ids)]
    keys = ("preprocess_wait_ms", "processor_ms", "handoff_prep_ms", "frontend_ms", "engine_queue_ms",
            "prefill_ms", "first_token_latency_ms", "decode_ms")
    out: dict[str, Any] = {"requests": len(rows)}
    for k in keys:
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            out[k] = summary(vals)
    bytes_ = sorted({r.get("pixel_bytes") for r in rows if r.get("pixel_bytes")})
    out["pixel_bytes"] = bytes_[:3]
    return out


def _profile(pid_pattern: str, seconds: int, out_svg: Path, out_txt: Path) -> subprocess.Popen | None:
    """Starts ``py-spy record`` (flame graph, subprocesses included) on the first process matching."""
    import shutil

    spy = shutil.which("py-spy")
    pids = subprocess.run(["pgrep", "-f", pid_pattern], capture_output=True, text=True).stdout.split()
    if not spy or not pids:
        logger.warning("profile: py-spy %s, pids %s", spy, pids)
        return None
    cmd = [spy, "record", "-p", pids[0], "--subprocesses", "--duration", str(seconds), "--rate", "50",
           "--nonblocking", "-o", str(out_svg)]
    logger.info("profile: %s", " ".join(cmd))
    return subprocess.Popen(cmd, stdout=open(out_txt, "w"), stderr=subprocess.STDOUT)


async def _serve_side(args, files: list[Path], name: str, overrides: dict) -> dict:
    import ray
    from ray import serve

    from serve_app.app import build_app

    port = args.port
    cfg = _serve_args(args, overrides)
    timings = Path(args.out).with_suffix(f".{name}.engine.jsonl")
    timings.unlink(missing_ok=True)
    os.environ["COSMOS_SERVE_ENGINE_TIMINGS"] = str(timings.resolve())
    ray.init(include_dashboard=False, log_to_driver=bool(args.verbose))
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    t0 = time.perf_counter()
    serve.run(build_app(cfg), name="bench", route_prefix="/")
    ready_s = time.perf_counter() - t0
    model = serve.get_deployment_handle("VideoModel", app_name="bench")
    replica_start_s = await model.replica_start_s.remote()
    mem = gpu_memory_used_mib()
    url = f"http://127.0.0.1:{port}"
    run = split_run(files, args.single, int(overrides.get("inflight", args.inflight)), args.warm_burst)
    single, batch = run.single, run.batch
    await _http_run(url, run.warmup)  # warm-up (not timed)
    if run.warm_burst:
        await _http_run(url, run.warm_burst)  # a burst before the timed ones (not timed)
    s_ttft, s_e2e, s_server = [], [], []
    for f in single:
        _, _, tt, ee, sv = await _http_run(url, [f])
        s_ttft += tt
        s_e2e += ee
        s_server += sv
    n_single_rows = len(timings.read_text().splitlines()) if timings.exists() else 0
    spy = None
    if args.profile_s and name in (args.profile or [name]):
        spy = _profile(
            "ServeReplica:bench:VideoModel",
            args.profile_s,
            Path(args.out).with_suffix(f".{name}.flame.svg"),
            Path(args.out).with_suffix(f".{name}.py-spy.log"),
        )
    wall, ntok, ttft, e2e, server = await _http_run(url, batch)
    if spy is not None:
        spy.wait(timeout=args.profile_s + 60)
    rows = timings.read_text().splitlines() if timings.exists() else []
    batch_ids = {json.loads(r)["request_id"] for r in rows[n_single_rows:] if r.strip()}
    serve.shutdown()
    ray.shutdown()
    return {
        name: {
            "engine": "project Serve graph (HTTP → decode tier → VideoModel/vLLM AsyncLLM)",
            "engine_args": cfg["model"]["engine_args"],
            "processor_kwargs": cfg["model"]["processor_kwargs"],
            "preprocess_threads": cfg["model"]["preprocess_threads"],
            "overrides": overrides,
            "deployments": {k: cfg[k] for k in ("ingress", "decoder", "model_replica")},
            "decode": cfg["decode"],
            "warm_burst": len(run.warm_burst),
            "app_ready_s": round(ready_s, 2),
            "replica_start_s": round(replica_start_s, 2),
            "gpu_memory_used_mib": mem,
            "single": {"ttft_s": summary(s_ttft), "e2e_s": summary(s_e2e), "server": _server_breakdown(s_server)},
            "request_body_example": query_body(batch[0]),
            f"inflight_{len(batch)}": {
                **_result(name, wall, len(batch), ntok, ttft, e2e),
                "server": _server_breakdown(server),
                "engine": _engine_breakdown(timings, batch_ids),
            },
        }
    }


# --------------------------------------------------------------------- driver
def window_files(args) -> list[Path]:
    """The run's window files (cut once; reused when ``--windows-dir`` already holds them)."""
    import av

    n = args.window_count or 1 + args.single + args.inflight
    out = Path(args.windows_dir)
    files = [out / f"win-{i:03d}.mp4" for i in range(n)]
    if all(f.exists() for f in files):
        return files
    with av.open(args.clip) as c:
        duration = c.duration / 1e6
    return cut_window_files(windows(Path(args.clip).resolve(), n, duration), out)


def _side_main(args) -> None:
    files = window_files(args)
    if args.side == "plain":
        result = asyncio.run(_plain_side(args, files))
    elif args.side.startswith("vllm_serve"):
        from benchmarks.vllm_serve import vllm_serve_side

        spec = json.loads(args.overrides or "{}")
        variants = spec.get("variants") or {args.side: {}}
        result = vllm_serve_side(
            checkpoint=args.checkpoint, files=files, single=args.single, inflight=args.inflight, port=args.port,
            warm_burst=args.warm_burst,
            flags=spec.get("flags", []), variants=variants,
            log_path=Path(args.out).with_suffix(f".{args.side}.server.log"), result=_result,
            gpu_memory=gpu_memory_used_mib,
        )
    else:
        overrides = json.loads(args.overrides or "{}")
        result = asyncio.run(_serve_side(args, files, args.side, overrides))
    Path(args.part).write_text(json.dumps(result, indent=2))


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
        out_path.write_text(json.dumps(report, indent=2))  # keep partial results
    report["table"] = table(report)
    tokens = {name: side[k]["server"]["prompt_tokens"] for name, side in report["sides"].items() if "error" not in side
              for k in side if k.startswith("inflight_") and "server" in side[k]}
    report["prompt_tokens_by_side"] = tokens
    same = len({tuple(v) for v in tokens.values()}) <= 1 and all(len(v) == 1 for v in tokens.values())
    report["prompt_tokens_identical"] = same
    out_path.write_text(json.dumps(report, indent=2))
    print("\n".join(report["table"]))
    if not same:
        print(f"prompt token counts differ between sides: {tokens}")
        return 1
    return 0


def table(report: dict) -> list[str]:
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
