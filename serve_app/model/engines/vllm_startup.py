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
