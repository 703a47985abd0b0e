"""GPU time from a torch profiler trace: the busy fraction and the kernels by kind.

Used by :mod:`benchmarks.engine_profile` on the trace vLLM's torch profiler writes
(``profiler_config``), and readable on any Chrome-format trace torch writes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

#: Kinds of GPU kernels by name (lower case; the first kind whose words one holds): FlashAttention's
#: kernels, matrix products (cuBLAS's nvjet/xmma, CUTLASS: the linear layers, fp8's scaled_mm included),
#: vLLM's top-k/top-p sampling kernel (``vllm/v1/sample/ops/topk_topp_triton.py``), other Triton kernels
#: (Inductor's fused element-wise ops), and everything else (``copy``: memcpy/memset events).
KERNEL_KINDS = (
    ("attention", ("flash", "attn", "fmha")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "matmul")),
    ("sampler", ("topk_topp",)),
    ("triton", ("triton",)),
)


def kernel_kind(name: str, category: str = "kernel") -> str:
    """The kind of a GPU event (see :data:`KERNEL_KINDS`): ``copy`` for memcpy/memset, else ``other``."""
    if category in ("gpu_memcpy", "gpu_memset"):
        return "copy"
    low = name.lower()
    return next((kind for kind, words in KERNEL_KINDS if any(w in low for w in words)), "other")


def kernel_summary(trace_path: Path, top: int = 25) -> dict[str, Any]:
    """GPU busy fraction and top kernels of one torch profiler trace (Chrome JSON, maybe gzipped).

    GPU events are those of category ``kernel``, ``gpu_memcpy`` or ``gpu_memset`` with a
    duration (the trace's ``ts``/``dur`` are microseconds); host events are ignored. All GPU
    streams are merged, so overlapping kernels count once in ``busy_ms``.

    Returns:
        ``window_ms`` (first kernel start → last kernel end), ``busy_ms`` (union of kernel
        intervals), ``busy_fraction`` (busy / window), ``kinds_ms`` (kernel ms summed by
        :func:`kernel_kind`, overlaps counted in each), ``kernels`` (the ``top`` names, cut to
        120 characters, by total ms, with calls); only ``kernels: []`` when the trace has no GPU events.

    Raises:
        OSError, json.JSONDecodeError: the file cannot be read or is not JSON.
        KeyError: the JSON has no ``traceEvents`` (not a Chrome trace).
    """
    opener = gzip.open if trace_path.suffix == ".gz" else open
    with opener(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    if not kernels:
        return {"kernels": []}
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels)
    busy, cur_s, cur_e = 0.0, spans[0][0], spans[0][1]
    for s, e in spans[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    window = spans[-1][1] - spans[0][0]
    by_name: dict[str, list[float]] = {}
    for e in kernels:
        acc = by_name.setdefault(e["name"][:120], [0.0, 0])
        acc[0] += float(e["dur"])
        acc[1] += 1
    kinds: dict[str, float] = {}
    for e in kernels:
        k = kernel_kind(e["name"], e["cat"])
        kinds[k] = kinds.get(k, 0.0) + float(e["dur"])
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "window_ms": round(window / 1000, 1),
        "busy_ms": round(busy / 1000, 1),
        "busy_fraction": round(busy / window, 3) if window else None,
        "kinds_ms": {k: round(v / 1000, 3) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
        "kernels": [{"name": n, "ms": round(v[0] / 1000, 1), "calls": int(v[1])} for n, v in ranked],
    }
