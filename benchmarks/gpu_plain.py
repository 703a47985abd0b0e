"""The GPU bench's plain vLLM sides (:mod:`benchmarks.gpu`): ``plain_default`` and ``plain_gpu_processor``.

Plain vLLM (``AsyncLLM``, the engine of vLLM's offline ``LLM`` class as well) with default engine
settings, fed the decoded frames of the window files in ``multi_modal_data``, with
``mm_processor_kwargs={"fps": 4}`` and with the HF video processor on the GPU
(``{"fps": 4, "device": "cuda"}``). Runs in its own process (``--side plain``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_probe import gpu_memory_used_mib
from benchmarks.workload import (
    BASE_ENGINE_ARGS,
    OUTPUT_TOKENS,
    QUESTION,
    SYSTEM_PROMPT,
    decode_frames,
    run_figures,
    split_run,
    summary,
)


async def _plain_run(
    llm: Any, prompts: list[dict[str, Any]], sampling: Any, tag: str, prompt_tokens: list[int] | None = None
) -> tuple[float, int, list[float], list[float]]:
    t0 = time.perf_counter()
    ttft: list[float] = []
    e2e: list[float] = []
    n_tokens = 0

    async def one(i: int, prompt: dict[str, Any]) -> None:
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


async def plain_side(args: argparse.Namespace, files: list[Path]) -> dict[str, Any]:
    """Runs the plain sides on ``files`` (``args``: the bench's options); their results by side name."""
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
    frames = [decode_frames(f) for f in files]
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
            f"inflight_{len(batch)}": {**run_figures(name, wall, len(batch), ntok, ttft, e2e),
                                       "server": {"prompt_tokens": sorted(set(ptoks))}},
        }
    llm.shutdown()
    return sides
