"""Writes fleet_engine_fp8_vs_bf16_h100.json from the fifteenth lease's engine-alone runs (issue 26).

Run from anywhere: ``python results/gpu/fleet-lease15/summarize.py``. Reads ``engine/engine_profile.{b16,f8}.json``
(``benchmarks.engine_profile``) and the weight memory that vLLM logged at load in ``engine/*.log.gz``.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
A = ("--input patches --windows-dir /tmp/xwin --clip .gpu-clips/intel_one-by-one-person-detection.mp4 "
     "--encoder-cache-tokens 131072 --bursts sustained --profile-iters 0 --sustain-stagger-s 20 "
     "--sustain-points 1x64 --sustain-s 150 --sustain-warmup-s 60")


def _weights_gib(name: str) -> float:
    """The GiB that vLLM's 'Model loading took N GiB memory' line reports for run ``name``."""
    with gzip.open(HERE / "engine" / f"engine_profile.{name}.log.gz", "rt") as f:
        text = f.read()
    m = re.search(r"Model loading took ([0-9.]+) GiB", text)
    if m is None:
        raise SystemExit(f"no 'Model loading took' line in engine_profile.{name}.log.gz")
    return float(m.group(1))


def main() -> None:
    runs = {}
    for name in ("b16", "f8"):
        d = json.loads((HERE / "engine" / f"engine_profile.{name}.json").read_text())
        s = d["bursts"]["sustained_q1x64"]
        runs[name] = {"engine_start_s": d["engine_start_s"], "weights_gib": _weights_gib(name),
                      "quantization": d["engine_args"].get("quantization"),
                      **{k: s[k] for k in ("sent", "statuses", "warmup_s", "measured_s", "counted", "windows_per_s",
                                           "windows_per_s_by_latency", "latency_mean_s", "latency_p95_s",
                                           "ttft_s", "ended_per_10s")}}
    b, f = runs["b16"], runs["f8"]
    out = {
        "issue": 26,
        "what": "fp8 against bf16 on vLLM's engine alone (no Ray Serve, no decode tier): 64 distinct 10-s windows "
                "of the 139-s person-detection clip kept in flight as patches, 1 question, 256 tokens (ignore_eos), "
                "150 s of sending, the rate read after 60 s",
        "device": "one NVIDIA H100 80GB HBM3 (asked without a kind; nvidia-h200 had none to give)",
        "weights": "dummy (random): only the timings count",
        "vllm": "0.24.0",
        "commands": [
            "bash benchmarks/gpu_machine.sh prep 80 .gpu-clips/intel_one-by-one-person-detection.mp4",
            f"bash benchmarks/gpu_machine.sh engine b16 {A} --engine-args '{{\"max_num_seqs\":256}}'",
            f"bash benchmarks/gpu_machine.sh engine f8 {A} --engine-args "
            "'{\"max_num_seqs\":256,\"quantization\":\"fp8\"}'",
        ],
        "runs": runs,
        "ratios": {
            "fp8_vs_bf16_counted": round(f["windows_per_s"] / b["windows_per_s"], 3),
            "fp8_vs_bf16_by_latency": round(f["windows_per_s_by_latency"] / b["windows_per_s_by_latency"], 3),
            "weights_saved_gib": round(b["weights_gib"] - f["weights_gib"], 2),
        },
        # Qwen2.5-VL-7B's shapes (checkpoint config): language model 28 layers x (q,k,v,o 29.36 M + MLP 203.69 M)
        # = 6.525 G linear weights; vision tower 32 blocks x 19.67 M + merger 44.6 M = 0.674 G. One byte saved per
        # weight quantized to fp8.
        "weights_saved_if_gib": {"language_model_linears_only": round(6.525e9 / 2**30, 2),
                                 "language_model_and_vision_tower_linears": round((6.525e9 + 0.674e9) / 2**30, 2)},
    }
    (HERE / "fleet_engine_fp8_vs_bf16_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["ratios"]), json.dumps(out["weights_saved_if_gib"]))


if __name__ == "__main__":
    main()
