"""Sums up the eighteenth lease into ``fleet_lease18_h100.json``: fp8 with static activation scales (issue 26).

Run from the repository root: ``python results/gpu/fleet-lease18/summarize.py``. Reads vLLM's engine alone,
four runs of :mod:`benchmarks.engine_profile` on one H100 in one lease (``engine/engine_profile.NAME.json``,
``.kernels.txt`` and ``.log``), each a sustained loop (64 distinct 10-s windows kept in flight as patches, 1
question, 256 tokens, 150 s of sending, the rate read after 60 s) and then, on the same engine with its caches
reset, a profiled burst of 64 windows:

- ``b16``: bf16; the profiler over 8 decode steps (after the burst's first 60 steps: 64 sequences of ~8.2k tokens);
- ``f8``: vLLM's online fp8 (dynamic per-tensor activation scales); the same decode steps;
- ``f8s``: fp8 with static activation scales, the kernels a calibrated checkpoint runs: ``hf_overrides`` gives the
  dummy checkpoint ``quantization_config = {"quant_method": "fp8", "activation_scheme": "static"}`` and vLLM 0.24's
  ``Fp8LinearMethod`` then loads an fp8 weight, a weight scale and an ``input_scale`` per layer, which the dummy
  loader fills with random values (the answers are noise; every question still runs its 256 tokens). The profiler
  over the burst's first 4 steps (prefill);
- ``f8sd``: ``f8s`` again, profiled over the decode steps as ``b16`` and ``f8``.

The prefill profile is set beside the seventeenth lease's bf16 (``b16p``) and the sixteenth's dynamic fp8
(``f8p``) of the same kind of steps, with ``../fleet-lease17/summarize.py``'s ``_profile`` (other leases and
machines, the same kind of card: indicative only).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
A = ("--input patches --windows-dir /tmp/xwin --clip .gpu-clips/intel_one-by-one-person-detection.mp4 "
     "--encoder-cache-tokens 131072 --bursts sustained profiled --sustain-stagger-s 20 --sustain-points 1x64 "
     "--sustain-s 150 --sustain-warmup-s 60")
PREFILL = "--profile-delay 0 --profile-iters 4"
DECODE = "--profile-delay 60 --profile-iters 8"
STATIC = ('"quantization":"fp8","hf_overrides":{"quantization_config":{"quant_method":"fp8",'
          '"activation_scheme":"static"}}')
RUNS = {"b16": (DECODE, '{"max_num_seqs":256}'), "f8": (DECODE, '{"max_num_seqs":256,"quantization":"fp8"}'),
        "f8s": (PREFILL, '{"max_num_seqs":256,' + STATIC + "}"),
        "f8sd": (DECODE, '{"max_num_seqs":256,' + STATIC + "}")}
DECODE_STEP = re.compile(r"execute_context_0\(0\)_generation_(\d+)\(\d+\)")


def _module(lease: str) -> ModuleType:
    """An earlier lease's ``summarize.py``, loaded as a module (its helpers, not its ``main``)."""
    spec = importlib.util.spec_from_file_location(f"{lease}_summarize", HERE.parent / lease / "summarize.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _weights_gib(name: str) -> float:
    """The GiB that vLLM's 'Model loading took N GiB memory' line reports for run ``name``."""
    m = re.search(r"Model loading took ([0-9.]+) GiB", (HERE / "engine" / f"engine_profile.{name}.log").read_text())
    if m is None:
        raise SystemExit(f"no 'Model loading took' line in engine_profile.{name}.log")
    return float(m.group(1))


def _sustained(name: str) -> dict[str, Any]:
    d = json.loads((HERE / "engine" / f"engine_profile.{name}.json").read_text())
    s = d["bursts"]["sustained_q1x64"]
    return {"engine_start_s": d["engine_start_s"], "weights_gib": _weights_gib(name),
            "engine_args": {k: v for k, v in d["engine_args"].items() if k != "profiler_config"},
            **{k: s[k] for k in ("sent", "statuses", "warmup_s", "measured_s", "counted", "windows_per_s",
                                 "windows_per_s_by_latency", "latency_mean_s", "latency_p95_s", "ttft_s",
                                 "completion_tokens_counted")},
            "profiled_burst_clips_per_s": d["bursts"]["profiled"]["clips_per_s"]}


def _decode(name: str, kind: Any) -> dict[str, Any]:
    """GPU time per decode step (ms) of the 8 profiled steps, split by ``kind`` (the sixteenth lease's sorting);
    the JSON lists the 25 longest kernels, the rest of the busy time is ``unlisted``."""
    path = HERE / "engine" / f"engine_profile.{name}.json"
    prof = json.loads(path.read_text())["profile"]
    table = path.with_name(f"engine_profile.{name}.kernels.txt").read_text()
    seqs = sorted({int(n) for n in DECODE_STEP.findall(table)})
    if "execute_context_" in DECODE_STEP.sub("", table):
        raise SystemExit(f"{name}: a profiled step is not a pure decode step")
    steps = prof["iterations"]
    shares: dict[str, float] = {}
    for k in prof["kernels"]:
        shares[kind(k["name"])] = shares.get(kind(k["name"]), 0.0) + k["ms"]
    shares["unlisted"] = prof["busy_ms"] - sum(shares.values())
    per_step = {k: round(v / steps, 2) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}
    return {"steps": steps, "sequences_per_step": seqs, "busy_ms_per_step": round(prof["busy_ms"] / steps, 2),
            "gemm_ms_per_step": round((shares.get("fp8_gemm", 0.0) + shares.get("other_gemm", 0.0)) / steps, 2),
            "attention_ms_per_step": round(shares.get("attention", 0.0) / steps, 2), "kernel_ms_per_step": per_step}


def main() -> None:
    lease17 = _module("fleet-lease17")
    kind = _module("fleet-lease16").kind
    runs = {name: _sustained(name) for name in RUNS}
    decode = {name: _decode(name, kind) for name in ("b16", "f8", "f8sd")}
    prefill = {"fp8_static_this_lease": lease17._profile(HERE / "engine" / "engine_profile.f8s.json"),
               "bf16_lease17": lease17._profile(HERE.parent / "fleet-lease17" / "engine" / "engine_profile.b16p.json"),
               "fp8_dynamic_lease16": lease17._profile(HERE.parent / "fleet-lease16" / "engine"
                                                       / "engine_profile.f8p.json")}
    b = runs["b16"]

    def ratio(name: str, key: str) -> float:
        return round(runs[name][key] / b[key], 3)

    per_token = {k: v["busy_ms_per_1000_tokens"] for k, v in prefill.items()}
    out = {
        "issue": 26,
        "lease": "eighteenth, 2026-12-06, session 30",
        "device": json.loads((HERE / "engine" / "engine_profile.b16.json").read_text())["versions"]["gpu"],
        "asked": "no kind (nvidia-h200) and nvidia-h100-x1 were refused at first; a later call without a kind got "
                 "an H100",
        "weights": "dummy (random): only the timings count; static fp8's input scales are random too",
        "vllm": "0.24.0",
        "what": "fp8 with static activation scales (a calibrated checkpoint's kernels) against vLLM's online "
                "dynamic fp8 and bf16, on vLLM's engine alone (no Ray Serve, no decode tier), one H100, one lease",
        "commands": ["bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4"]
        + [f"bash benchmarks/gpu_machine.sh engine {name} {A} {prof} --engine-args '{args}'"
           for name, (prof, args) in RUNS.items()]
        + ["python results/gpu/fleet-lease18/summarize.py"],
        "runs": runs,
        "ratios_same_lease": {
            "fp8_static_vs_bf16_by_latency": ratio("f8s", "windows_per_s_by_latency"),
            "fp8_static_vs_bf16_counted": ratio("f8s", "windows_per_s"),
            "fp8_static_repeat_vs_bf16_by_latency": ratio("f8sd", "windows_per_s_by_latency"),
            "fp8_static_repeat_vs_bf16_counted": ratio("f8sd", "windows_per_s"),
            "fp8_dynamic_vs_bf16_by_latency": ratio("f8", "windows_per_s_by_latency"),
            "fp8_dynamic_vs_bf16_counted": ratio("f8", "windows_per_s"),
            "fp8_static_vs_dynamic_by_latency": round(runs["f8s"]["windows_per_s_by_latency"]
                                                      / runs["f8"]["windows_per_s_by_latency"], 3),
            "decode_step_bf16_vs_fp8_dynamic": round(decode["b16"]["busy_ms_per_step"]
                                                     / decode["f8"]["busy_ms_per_step"], 3),
            "decode_step_bf16_vs_fp8_static": round(decode["b16"]["busy_ms_per_step"]
                                                    / decode["f8sd"]["busy_ms_per_step"], 3),
            "decode_attention_share_bf16": round(decode["b16"]["attention_ms_per_step"]
                                                 / decode["b16"]["busy_ms_per_step"], 3),
            "decode_attention_share_fp8_static": round(decode["f8sd"]["attention_ms_per_step"]
                                                       / decode["f8sd"]["busy_ms_per_step"], 3),
        },
        "decode_profile": decode,
        "prefill_profile": prefill,
        "prefill_busy_per_token_across_leases": {
            "bf16_lease17_vs_fp8_static": round(per_token["bf16_lease17"] / per_token["fp8_static_this_lease"], 3),
            "fp8_dynamic_lease16_vs_fp8_static": round(per_token["fp8_dynamic_lease16"]
                                                       / per_token["fp8_static_this_lease"], 3),
            "note": "three leases, three H100 machines, and step mixes that differ (this lease's 4 steps: 8,133 "
                    "prompt tokens, a 1-sequence decode, then 16,381 and 16,383 tokens of 3 requests each): "
                    "indicative only, unlike the sustained ratios above",
        },
    }
    (HERE / "fleet_lease18_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["ratios_same_lease"], indent=1), json.dumps(out["prefill_busy_per_token_across_leases"]))


if __name__ == "__main__":
    main()
