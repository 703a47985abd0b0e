"""Sums up the twenty-second lease into ``fleet_lease22_h100.json``: an fp8 KV cache over static fp8 (issue 26).

Run from the repository root: ``python results/gpu/fleet-lease22/summarize.py``. Reads two runs of
:mod:`benchmarks.engine_profile` on vLLM's engine alone (no Ray Serve, no decode tier), one H100, one lease
(``engine/engine_profile.NAME.json``, ``.kernels.txt``, ``.log.gz``), each the eighteenth lease's ``f8s``
command (64 distinct 10-s windows kept in flight as patches, 1 question, 256 tokens, 150 s of sending, the rate
read after 60 s; then a profiled burst of 64 windows, the profiler over its first 4 steps):

- ``f8s``: fp8 with static activation scales (a calibrated checkpoint's kernels, the scales random), bf16 KV cache;
- ``f8skv``: the same with ``kv_cache_dtype: fp8`` (the checkpoint has no KV scales: vLLM logs that it uses 1.0).

And ``tests/gpu/test_qwen3_vl_gpu.py`` on the same machine (``gpu-tests/``).
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from benchmarks.fleet_results import gpu_tests  # noqa: E402  (the repository root, put on the path above)

A = ("--input patches --windows-dir /tmp/xwin --clip .gpu-clips/intel_one-by-one-person-detection.mp4 "
     "--encoder-cache-tokens 131072 --bursts sustained profiled --sustain-stagger-s 20 --sustain-points 1x64 "
     "--sustain-s 150 --sustain-warmup-s 60 --profile-delay 0 --profile-iters 4")
STATIC = ('"max_num_seqs":256,"quantization":"fp8",{kv}"hf_overrides":{{"quantization_config":{{"quant_method":'
          '"fp8","activation_scheme":"static"}}}}')
RUNS = {"f8s": "{" + STATIC.format(kv="") + "}", "f8skv": "{" + STATIC.format(kv='"kv_cache_dtype":"fp8",') + "}"}
# vLLM's start-up lines read from each run's log: (key, pattern, type).
LOG_LINES = (("weights_gib", r"Model loading took ([0-9.]+) GiB", float),
             ("kv_cache_gib", r"Available KV cache memory: ([0-9.]+) GiB", float),
             ("kv_cache_tokens", r"GPU KV cache size: ([0-9,]+) tokens", lambda s: int(s.replace(",", ""))),
             ("max_concurrency_16k_tokens", r"Maximum concurrency for [0-9,]+ tokens per request: ([0-9.]+)x",
              float))
STEP = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")


def _run(name: str) -> dict[str, Any]:
    """One run's sustained loop, its start-up lines and what its 4 profiled steps held."""
    d = json.loads((HERE / "engine" / f"engine_profile.{name}.json").read_text())
    log = gzip.decompress((HERE / "engine" / f"engine_profile.{name}.log.gz").read_bytes()).decode()
    found = {key: (m := re.search(pat, log)) and conv(m.group(1)) for key, pat, conv in LOG_LINES}
    missing = [key for key, value in found.items() if value is None]
    if missing:
        raise SystemExit(f"{name}: no start-up line for {missing} in its log")
    s = d["bursts"]["sustained_q1x64"]
    table = (HERE / "engine" / f"engine_profile.{name}.kernels.txt").read_text()
    steps = [{"prefills": int(a), "prefill_tokens": int(b), "decodes": int(c)} for a, b, c, _ in STEP.findall(table)]
    return {"engine_start_s": d["engine_start_s"], **found,
            "kv_cache_dtype": d["engine_args"].get("kv_cache_dtype", "auto (bf16)"),
            **{k: s[k] for k in ("sent", "statuses", "warmup_s", "measured_s", "counted", "windows_per_s",
                                 "windows_per_s_by_latency", "latency_mean_s", "latency_p95_s", "ttft_s",
                                 "completion_tokens_counted", "ran_out_of_windows")},
            "profiled_burst": {"clips_per_s": d["bursts"]["profiled"]["clips_per_s"],
                               "steps": steps, "busy_ms": d["profile"]["busy_ms"],
                               "kinds_ms": d["profile"]["kinds_ms"]}}


def main() -> None:
    runs = {name: _run(name) for name in RUNS}
    f8s, kv = runs["f8s"], runs["f8skv"]
    lease18 = json.loads((HERE.parent / "fleet-lease18" / "fleet_lease18_h100.json").read_text())["runs"]["f8s"]
    out = {
        "issue": 26,
        "lease": "twenty-second, 2026-12-07, session 35",
        "device": json.loads((HERE / "engine" / "engine_profile.f8s.json").read_text())["versions"]["gpu"],
        "asked": "four calls without a kind and one for nvidia-h200 found no machine (about 90 device seconds "
                 "each), two for nvidia-h100-x1 were refused without asking (15 s each): 481 s lost; a call for "
                 "nvidia-h100-x1 at 13:33 UTC got an H100 with 0 MiB in use",
        "weights": "dummy (random): only the timings count; the activation scales are random and the KV scales 1.0",
        "vllm": "0.24.0",
        "what": "kv_cache_dtype fp8 against the bf16 KV cache, both over fp8 with static activation scales, on "
                "vLLM's engine alone, one H100, one lease",
        "commands": ["bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4"]
        + [f"bash benchmarks/gpu_machine.sh engine {name} {A} --engine-args '{args}'" for name, args in RUNS.items()]
        + ["bash benchmarks/gpu_machine.sh tests tests/gpu/test_qwen3_vl_gpu.py",
           "python results/gpu/fleet-lease22/summarize.py"],
        "runs": runs,
        "ratios_same_lease": {
            "fp8_kv_vs_bf16_kv_by_latency": round(kv["windows_per_s_by_latency"] / f8s["windows_per_s_by_latency"], 3),
            "fp8_kv_vs_bf16_kv_counted": round(kv["windows_per_s"] / f8s["windows_per_s"], 3),
            "kv_cache_tokens": round(kv["kv_cache_tokens"] / f8s["kv_cache_tokens"], 3),
        },
        "f8s_against_lease18": {
            "by_latency": [f8s["windows_per_s_by_latency"], lease18["windows_per_s_by_latency"]],
            "counted": [f8s["windows_per_s"], lease18["windows_per_s"]],
            "note": "the same command on two leases' H100s: the spread a same-lease ratio has to clear",
        },
        "profiled_bursts_note": "the two profiles covered different steps (the engines admitted the burst "
                                "differently: see each run's steps; f8skv's window also holds vision-tower "
                                "passes), so no per-step comparison is made from them",
        "gpu_tests": gpu_tests(HERE / "gpu-tests" / "gpu-junit.xml",
                               "bash benchmarks/gpu_machine.sh tests tests/gpu/test_qwen3_vl_gpu.py"),
    }
    (HERE / "fleet_lease22_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["ratios_same_lease"], indent=1), json.dumps(out["f8s_against_lease18"]))


if __name__ == "__main__":
    main()
