"""One layer's decode attention: FlashAttention over each row's whole context against per-window cascade attention.

No model and no engine: a decode batch of ``windows`` × ``questions`` rows with Cosmos-Reason1-7B's attention
shapes (28 query heads, 4 KV heads of 128, bf16 KV in 16-token blocks), each window's rows sharing
``prefix_blocks`` blocks (the reference window's 8,128 prompt tokens before the question: 508 blocks) and
holding 20–275 tokens of their own (the question and the answer so far). For each point, the time per call of
vLLM's ``flash_attn_varlen_func`` over the whole batch, and of
:func:`serve_app.model.engines.vllm_window_attention.window_attention` (CUDA events, ``--calls`` calls after 10),
and the largest difference between their outputs. Usage (GPU machine, after staging)::

    python -m benchmarks.window_attention_kernel --out $OUT/window_attention_kernel.json \\
        [--points 64x3,64x1,32x3,96x3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HEADS, KV_HEADS, HEAD_SIZE, BLOCK_SIZE = 28, 4, 128, 16  # Cosmos-Reason1-7B (Qwen2.5-VL-7B's config.json)
PREFIX_BLOCKS = 508  # 8,128 tokens: the reference window's prompt before its question (benchmarks.workload)


def decode_batch(windows: int, questions: int, prefix_blocks: int = PREFIX_BLOCKS, block_size: int = BLOCK_SIZE,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """A decode step's block table: ``windows`` × ``questions`` rows, a window's rows sharing its first
    ``prefix_blocks`` blocks, each row with 20–275 tokens of its own after them.

    Returns:
        ``(rows, max_blocks)`` int32 block table (block 0 unused), ``(rows,)`` tokens already computed per row
        (the query token comes after them), and the number of blocks used.
    """
    rng = np.random.default_rng(seed)
    rows: list[tuple[list[int], int]] = []
    next_block = 1
    for _ in range(windows):
        shared = list(range(next_block, next_block + prefix_blocks))
        next_block += prefix_blocks
        for _ in range(questions):
            computed = prefix_blocks * block_size + int(rng.integers(20, 276))
            own = computed // block_size + 1 - prefix_blocks
            rows.append((shared + list(range(next_block, next_block + own)), computed))
            next_block += own
    table = np.zeros((len(rows), max(len(r[0]) for r in rows)), np.int32)
    for i, (blocks, _) in enumerate(rows):
        table[i, : len(blocks)] = blocks
    return table, np.array([r[1] for r in rows]), next_block


def _time_ms(fn: Any, calls: int) -> float:
    import torch

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / calls


def measure(windows: int, questions: int, calls: int) -> dict[str, Any]:
    """Times plain and window attention on one :func:`decode_batch` (see the module docstring)."""
    import torch
    from vllm.v1.attention.backends.fa_utils import flash_attn_varlen_func
    from vllm.v1.attention.ops.merge_attn_states import merge_attn_states

    from serve_app.model.engines.vllm_window_attention import plan_windows, window_attention, window_tensors

    table, computed, num_blocks = decode_batch(windows, questions)
    n, dev, scale = len(computed), torch.device("cuda"), HEAD_SIZE ** -0.5
    k = torch.randn(num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_SIZE, dtype=torch.bfloat16, device=dev)
    v = torch.randn_like(k)
    q = torch.randn(n, HEADS, HEAD_SIZE, dtype=torch.bfloat16, device=dev)
    cu = torch.arange(n + 1, dtype=torch.int32, device=dev)
    seq_lens = torch.tensor(computed + 1, dtype=torch.int32, device=dev)
    bt = torch.tensor(table, device=dev)
    max_k = int(seq_lens.max())
    plain_out, window_out = torch.empty_like(q), torch.empty_like(q)

    def plain() -> None:
        flash_attn_varlen_func(q=q, k=k, v=v, out=plain_out, cu_seqlens_q=cu, max_seqlen_q=1, seqused_k=seq_lens,
                               max_seqlen_k=max_k, softmax_scale=scale, causal=True, block_table=bt, fa_version=3)

    plan = plan_windows(table, np.ones(n, np.int64), computed, BLOCK_SIZE)
    row: dict[str, Any] = {"windows": windows, "questions": questions, "rows": n,
                           "prefix_tokens": PREFIX_BLOCKS * BLOCK_SIZE, "plain_ms": round(_time_ms(plain, calls), 4)}
    if plan is None:  # one question per window: nothing shared, vLLM's path
        return {**row, "window_ms": None, "speedup": None}
    w = window_tensors(plan, bt, seq_lens)

    def window() -> None:
        window_attention(q, k, v, window_out, cu, 1, w, scale, 0.0, flash_attn_varlen_func,
                         merge_attn_states, fa_version=3)

    row["window_ms"] = round(_time_ms(window, calls), 4)
    row["speedup"] = round(row["plain_ms"] / row["window_ms"], 3)
    row["max_abs_diff"] = float((window_out.float() - plain_out.float()).abs().max())
    return row


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description="decode attention: FlashAttention against per-window cascade")
    p.add_argument("--points", default="64x3,64x1,32x3,96x3", help="WINDOWSxQUESTIONS[,...]")
    p.add_argument("--calls", type=int, default=200, help="timed calls per kernel and point")
    p.add_argument("--out", default="results/gpu/window_attention_kernel.json")
    args = p.parse_args(argv)
    try:
        points = [tuple(int(x) for x in s.split("x")) for s in args.points.split(",")]
        if any(len(pt) != 2 or min(pt) < 1 for pt in points):
            raise ValueError
    except ValueError:
        p.error(f"--points is WINDOWSxQUESTIONS[,...] with both >= 1, got {args.points!r}")
    import torch
    import vllm

    rows = [measure(w, qn, args.calls) for w, qn in points]
    doc = {"command": "python -m benchmarks.window_attention_kernel " + " ".join(argv if argv is not None
                                                                              else sys.argv[1:]),
           "gpu": torch.cuda.get_device_name(), "vllm": vllm.__version__, "torch": torch.__version__,
           "calls": args.calls, "points": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
