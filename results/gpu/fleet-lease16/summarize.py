"""Sums up the sixteenth lease's profiled fp8 prefill into ``fleet_fp8_prefill_profile_h100.json``.

Run from the repository root: ``python results/gpu/fleet-lease16/summarize.py``. Reads vLLM's engine alone
(``engine/engine_profile.f8p.json``, :mod:`benchmarks.engine_profile` with ``--bursts profiled --profile-delay 0
--profile-iters 4``: torch's profiler over the engine's first 4 steps of a burst of 64 distinct windows, which are
prefill steps) and sorts its kernels into the fp8 GEMMs (CUTLASS ``cutlass_3x_gemm_sm90_fp8``), the kernels that
compute the dynamic per-tensor activation scales and cast to fp8 (torch.compile's fusions named ``…abs_clamp…``
or ``…clamp…reciprocal…``: each also carries the RMSNorm, SiLU-and-mul or residual add before the cast, which bf16
runs too), attention (FlashAttention 3) and the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
STEPS = {"execute_context_1(8133)_generation_0(0)": 8133, "execute_context_1(8133)_generation_1(1)": 8133,
         "execute_context_6(16326)_generation_2(2)": 16326, "execute_context_12(16380)_generation_4(4)": 16380}


def kind(name: str) -> str:
    """The kernel's share: ``fp8_gemm``, ``activation_quant_fused``, ``attention``, ``other_gemm`` or ``rest``."""
    if "gemm_sm90_fp8" in name:
        return "fp8_gemm"
    if ("abs" in name and "clamp" in name) or ("clamp" in name and "reciprocal" in name):
        return "activation_quant_fused"
    if "flash" in name.lower() or "attn" in name.lower():
        return "attention"
    if "nvjet" in name or "gemm" in name.lower():
        return "other_gemm"
    return "rest"


def main() -> None:
    d = json.loads((HERE / "engine" / "engine_profile.f8p.json").read_text())
    prof = d["profile"]
    shares: dict[str, float] = {}
    for k in prof["kernels"]:
        shares[kind(k["name"])] = shares.get(kind(k["name"]), 0.0) + k["ms"]
    busy = prof["busy_ms"]
    tokens = sum(STEPS.values())
    out: dict[str, Any] = {
        "lease": "sixteenth, 2026-12-06, session 28 (318 device seconds were left when the machine came)",
        "device": d["versions"]["gpu"],
        "note": "Dummy weights (random: only the timings count), vLLM 0.24.0, quantization fp8 (vLLM's online "
                "dynamic fp8: per-tensor weight scales, dynamic per-tensor activation scales; the vision tower's "
                "linear layers too). The engine's first 4 steps of a burst of 64 distinct 10-s windows sent as "
                "patches (8,133 prompt tokens each), all 4 prefill steps: 1, 1, 6 and 12 requests, "
                f"{tokens} scheduled tokens (the step names in engine/engine_profile.f8p.kernels.txt). The bf16 "
                "profile of the same steps did not fit the lease: there is no measured bf16 split beside this one.",
        "commands": [
            "bash benchmarks/gpu_machine.sh prep 80 .gpu-clips/intel_one-by-one-person-detection.mp4",
            "bash benchmarks/gpu_machine.sh engine f8p --input patches --windows-dir /tmp/xwin --clip "
            ".gpu-clips/intel_one-by-one-person-detection.mp4 --encoder-cache-tokens 131072 --bursts profiled "
            "--profile-delay 0 --profile-iters 4 --engine-args '{\"max_num_seqs\":256,\"quantization\":\"fp8\"}'",
        ],
        "engine_start_s": d["engine_start_s"],
        "profiled_steps": STEPS,
        "scheduled_tokens": tokens,
        "gpu_busy_ms": busy,
        "kernel_ms": {k: round(v, 1) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
        "kernel_share_of_busy": {k: round(v / busy, 3) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
        "ms_per_1000_tokens": {k: round(1000 * v / tokens, 2) for k, v in shares.items()},
    }
    (HERE / "fleet_fp8_prefill_profile_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("gpu_busy_ms", "kernel_ms", "kernel_share_of_busy", "ms_per_1000_tokens")},
                     indent=1))


if __name__ == "__main__":
    main()
