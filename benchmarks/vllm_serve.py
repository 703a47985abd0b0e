"""Plain ``vllm serve`` as a side of the GPU benchmark (:mod:`benchmarks.gpu`).

Every side reads the same window files (:func:`benchmarks.workload.cut_window_files`). Plain
vLLM receives a window as a ``file://`` ``video_url`` under ``--allowed-local-media-path``; the
project's graph receives it as ``video_path``.

:func:`vllm_serve_side` starts vLLM's OpenAI server (``vllm serve``) on the GPU with
the given flags, runs one or more request variants against it (e.g. with and
without the per-request GPU processor ``mm_processor_kwargs={"device": "cuda"}``),
resetting vLLM's prefix and multimodal caches between variants (the dev-mode
endpoints of ``VLLM_SERVER_DEV_MODE=1``) so no variant reuses another's work, and
stops it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import stop_process_group
from benchmarks.workload import (
    OUTPUT_TOKENS,
    QUESTION,
    SYSTEM_PROMPT,
    batch_figures,
    send_batch,
    split_run,
    summary,
)
from serve_app.model_facts import COSMOS_REPETITION_PENALTY, COSMOS_TEMPERATURE, COSMOS_TOP_P

logger = logging.getLogger(__name__)

#: Sampling of every plain request: the Cosmos-Reason1 recipe (as the graph's), fixed output length.
SAMPLING_BODY = {"max_tokens": OUTPUT_TOKENS, "ignore_eos": True, "temperature": COSMOS_TEMPERATURE,
                 "top_p": COSMOS_TOP_P, "repetition_penalty": COSMOS_REPETITION_PENALTY}


def chat_body(model: str, path: Path, extra: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI chat request of one window file: system prompt, the clip, the question, streaming."""
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": [{"type": "video_url", "video_url": {"url": f"file://{path}"}},
                                         {"type": "text", "text": QUESTION}]},
        ],
        **SAMPLING_BODY,
        "stream": True, "stream_options": {"include_usage": True},
        **extra,
    }


async def openai_run(
    url: str, model: str, files: list[Path], extra: dict[str, Any]
) -> tuple[float, int, list[float], list[float], list[int]]:
    """One streamed chat request per file, all at once (loadtest's client).

    Returns:
        (wall_s, completion tokens, TTFT s, e2e s, prompt token counts), times from the first send.
    """
    recs = await send_batch(url, [chat_body(model, f, extra) for f in files], "/v1/chat/completions")
    wall, tokens, ttft, e2e = batch_figures(recs)
    return wall, tokens, ttft, e2e, [r.prompt_tokens for r in recs if r.prompt_tokens is not None]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {proc.returncode} before it was healthy")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"vllm serve not healthy after {timeout_s:.0f} s")


async def _reset_caches(url: str) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=60) as c:
        for ep in ("reset_prefix_cache", "reset_mm_cache", "reset_encoder_cache"):
            r = await c.post(f"{url}/{ep}")
            if r.status_code not in (200, 404):
                raise RuntimeError(f"POST /{ep}: HTTP {r.status_code}")


def vllm_serve_side(
    *, checkpoint: str, files: list[Path], single: int, inflight: int, port: int,
    flags: list[str], variants: dict[str, dict[str, Any]], log_path: Path, result: Any, gpu_memory: Any,
    warm_burst: int = 0,
) -> dict[str, Any]:
    """Runs plain ``vllm serve`` with ``flags`` and measures each request variant.

    Args:
        files: window files (:func:`benchmarks.workload.split_run`): ``files[0]`` warms up, the
            last ``warm_burst`` go at once untimed, then ``single`` one at a time and ``inflight`` at once.
        variants: name → extra request fields (e.g. ``{"mm_processor_kwargs": {"device": "cuda"}}``).
        result: the bench's :func:`benchmarks.workload.run_figures`; gpu_memory: its GPU-memory probe.

    Returns:
        ``{variant name: side record}`` with the exact command line and one request body.
    """
    model = "cosmos-reason1-7b-dummy"
    media_dir = str(files[0].parent)
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", checkpoint, "--served-model-name", model,
           "--port", str(port), "--host", "127.0.0.1", "--load-format", "dummy", "--dtype", "bfloat16",
           "--allowed-local-media-path", media_dir, *flags]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    sides: dict[str, Any] = {}
    try:
        _wait_healthy(url, proc, 600)
        start_s = time.perf_counter() - t0
        mem = gpu_memory()
        run = split_run(files, single, inflight, warm_burst)
        single_files, batch = run.single, run.batch
        for name, extra in variants.items():
            asyncio.run(_reset_caches(url))
            asyncio.run(openai_run(url, model, run.warmup, extra))  # warm-up (not timed)
            if run.warm_burst:
                asyncio.run(openai_run(url, model, run.warm_burst, extra))  # untimed burst
                asyncio.run(_reset_caches(url))  # no cache may carry the warm burst's work
            s_ttft, s_e2e, s_prompt = [], [], []
            for f in single_files:
                _, _, tt, ee, pt = asyncio.run(openai_run(url, model, [f], extra))
                s_ttft += tt
                s_e2e += ee
                s_prompt += pt
            wall, ntok, ttft, e2e, prompt = asyncio.run(openai_run(url, model, batch, extra))
            sides[name] = {
                "engine": "plain `vllm serve` (vLLM's OpenAI server, no project code)",
                "command": " ".join(cmd),
                "request_body_example": chat_body(model, batch[0], extra),
                "warm_burst": len(run.warm_burst),
                "server_start_s": round(start_s, 2),
                "gpu_memory_used_mib": mem,
                "single": {"ttft_s": summary(s_ttft), "e2e_s": summary(s_e2e)},
                f"inflight_{len(batch)}": {**result(name, wall, len(batch), ntok, ttft, e2e),
                                           "server": {"prompt_tokens": sorted(set(prompt + s_prompt))}},
            }
            logger.info("side %s: %.2f clips/s", name, len(batch) / wall)
    finally:
        stop_process_group(proc, signal.SIGTERM)
    return sides
