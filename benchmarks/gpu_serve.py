"""The GPU bench's Serve sides (:mod:`benchmarks.gpu`): the project's whole Serve graph, and named variants.

Each window file is named as ``video_path`` (JSON), decoded by the decode tier, answered by a GPU
replica, streamed (SSE) so TTFT is seen by the client; with the server's own timings and the
engine's per-stage timing rows. Runs in its own process (``--side NAME``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_probe import gpu_memory_used_mib
from benchmarks.workload import (
    BASE_ENGINE_ARGS,
    OUTPUT_TOKENS,
    QUESTION,
    SYSTEM_PROMPT,
    batch_figures,
    run_figures,
    send_batch,
    split_run,
    summary,
)

logger = logging.getLogger(__name__)


def _serve_args(args: argparse.Namespace, overrides: dict[str, Any]) -> dict[str, Any]:
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


async def _http_run(url: str, files: list[Path]) -> tuple[float, int, list[float], list[float], list[dict[str, Any]]]:
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
    """Per-stage summaries (ms) of the engine timing rows (see ``vllm_timings.TIMINGS_ENV``)."""
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("completion_tokens") and (request_ids is None or r["request_id"] in request_ids)]
    keys = ("preprocess_wait_ms", "processor_ms", "prompt_build_ms", "vllm_inputs_ms", "handoff_prep_ms",
            "prefill_gate_ms", "frontend_ms", "engine_queue_ms", "prefill_ms", "first_token_latency_ms", "decode_ms")
    out: dict[str, Any] = {"requests": len(rows)}
    for k in keys:
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            out[k] = summary(vals)
    bytes_ = sorted({r.get("pixel_bytes") for r in rows if r.get("pixel_bytes")})
    out["pixel_bytes"] = bytes_[:3]
    return out


def _profile(pid_pattern: str, seconds: int, out_svg: Path, out_txt: Path) -> subprocess.Popen[bytes] | None:
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


async def serve_side(
    args: argparse.Namespace, files: list[Path], name: str, overrides: dict[str, Any]
) -> dict[str, Any]:
    """Runs the Serve side ``name`` (config ``overrides``) on ``files``; its result by side name."""
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
    serve.shutdown()  # type: ignore[no-untyped-call]  # unannotated in Ray
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
                **run_figures(name, wall, len(batch), ntok, ttft, e2e),
                "server": _server_breakdown(server),
                "engine": _engine_breakdown(timings, batch_ids),
            },
        }
    }
