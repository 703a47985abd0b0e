"""What the vLLM engine's start sets up or checks before vLLM runs: the compile caches' environment and
whether they are warm, and engine argument names vLLM does not know."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def compile_cache_env(cache_dir: str) -> dict[str, str]:
    """Environment that keeps vLLM's, Inductor's and Triton's compile artifacts under ``cache_dir``.

    ``VLLM_CACHE_ROOT`` holds vLLM's ``torch_compile_cache`` (compiled graphs and AOT artifacts,
    ``vllm/envs.py``); ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` are the cache variables of
    torch Inductor and Triton. Relative paths are made absolute (the engine core may run elsewhere).
    """
    root = os.path.abspath(os.path.expanduser(cache_dir))
    return {
        "VLLM_CACHE_ROOT": os.path.join(root, "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(root, "triton"),
    }


def cache_state(vllm_cache_root: str) -> str:
    """``warm (N files in DIR)`` when vLLM's compile cache under ``vllm_cache_root`` holds artifacts,
    else ``cold (DIR empty)``: said at start, so a slow start can be told from a cold one."""
    compiled = Path(vllm_cache_root) / "torch_compile_cache"
    n = sum(1 for p in compiled.rglob("*") if p.is_file()) if compiled.is_dir() else 0
    return f"warm ({n} files in {compiled})" if n else f"cold ({compiled} empty)"


def unknown_engine_args(engine_args: dict[str, Any], known: set[str]) -> list[str]:
    """Names in ``engine_args`` that are not vLLM engine arguments (sorted)."""
    return sorted(set(engine_args) - known)


def build_async_llm(engine_args: Any, llm_class: Any, encoder_cache_tokens: int | None, usage_context: Any) -> Any:
    """``llm_class`` (vLLM's ``AsyncLLM``) built from ``engine_args`` (an ``AsyncEngineArgs``) for
    ``usage_context`` (a ``vllm.usage.usage_lib.UsageContext``), its encoder cache at least
    ``encoder_cache_tokens`` multimodal tokens when given.

    vLLM 0.24 sizes the encoder cache (vision-tower outputs kept on the GPU, keyed by the item's multimodal
    id) to ``max_num_batched_tokens`` and takes no engine argument for it (``SchedulerConfig.encoder_cache_size``
    in ``vllm/config/scheduler.py``: "not currently configurable"); this sets it on the engine config that
    ``AsyncLLM.from_engine_args`` would build, then builds the engine from that config
    (``AsyncLLM.from_vllm_config``). ``None``: ``from_engine_args``, unchanged. Never below vLLM's own size.

    Returns:
        The started engine.
    """
    if encoder_cache_tokens is None:
        return llm_class.from_engine_args(engine_args, usage_context=usage_context)
    vllm_config = engine_args.create_engine_config(usage_context)
    sched = vllm_config.scheduler_config
    sched.encoder_cache_size = max(int(sched.encoder_cache_size), int(encoder_cache_tokens))
    return llm_class.from_vllm_config(
        vllm_config,
        usage_context=usage_context,
        enable_log_requests=bool(engine_args.enable_log_requests),
        disable_log_stats=bool(engine_args.disable_log_stats),
    )
