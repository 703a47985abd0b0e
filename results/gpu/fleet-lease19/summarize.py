"""Sums up the nineteenth lease into ``fleet_lease19_h100.json``: static fp8 through the graph (issue 26).

Run from the repository root: ``python results/gpu/fleet-lease19/summarize.py``. Reads, from one H100 in one lease:

- two graph servers, one after the other, each ``benchmarks/fleet_gpu.sh graph-start`` with ``GRAPH`` below:
  ``b16`` (``configs/h200.yaml``, bf16) and ``s8`` (``configs/h200-fp8.yaml`` with static activation scales, the
  kernels a calibrated fp8 checkpoint runs; see ``../fleet-lease18/summarize.py``). On each, the closed loop of
  ``benchmarks.lifecycle`` with 1 and then 3 questions per window (``NAME/burst.log``: one ``== STEP: {json}``
  line per step; ``NAME/sustainQ/lifecycle.json`` where it came back: s8's 1-question file did not, a call
  returns at most 8 files, and its log line holds the same step summary);
- camera levels of ``python -m loadtest --streams`` (``cameras/SERVER_q1_N.json``), run on the ``s8`` server after
  its bursts and on a second ``b16`` server, then 12 cameras on a second ``s8`` server;
- the fp8 preflight's GPU tests (``gpu-tests/gpu-junit.xml``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from benchmarks.fleet_results import GRAPH, LOOP, SERVERS, camera_level, camera_limits, gpu_tests  # noqa: E402

STEP_LINE = re.compile(r"^== (\w+): (\{.*\})$", re.M)
STEP_KEYS = ("questions_per_window", "sent", "statuses", "counted", "windows_per_s", "windows_per_s_by_latency",
             "answers_per_s", "latency_mean_s", "latency_p95_s", "ended_per_10s", "ran_out_of_windows")
# (server, cameras, the FIRST copy index the level's command used)
LEVELS = (("s8", 32, 0), ("s8", 24, 40), ("b16", 20, 100), ("b16", 12, 150), ("s8", 12, 200))


def _steps(server: str) -> dict[str, dict[str, Any]]:
    """A server's loop steps from its ``burst.log``, checked against each ``lifecycle.json`` that came back."""
    found = {m.group(1): json.loads(m.group(2)) for m in STEP_LINE.finditer((HERE / server / "burst.log").read_text())}
    for step, summary in found.items():
        path = HERE / server / step / "lifecycle.json"
        if path.exists():
            (saved,) = json.loads(path.read_text())["steps"]
            if any(saved[k] != summary[k] for k in ("sent", "counted", "windows_per_s", "latency_mean_s")):
                raise SystemExit(f"{server} {step}: burst.log and lifecycle.json disagree")
    return {step: {k: s[k] for k in STEP_KEYS} | {"lifecycle_json": (HERE / server / step / "lifecycle.json").exists()}
            for step, s in found.items()}


def main() -> None:
    steps = {server: _steps(server) for server in SERVERS}
    levels = {f"{s}_{n}": camera_level(HERE / "cameras" / f"{s}_q1_{n}.json") for s, n, _ in LEVELS}

    def ratio(step: str, key: str) -> float:
        return round(steps["s8"][step][key] / steps["b16"][step][key], 3)

    def three_vs_one(server: str, key: str) -> float:
        return round(steps[server]["sustain3"][key] / steps[server]["sustain1"][key], 3)

    kept, failed = camera_limits(levels, SERVERS)
    out = {
        "issue": 26,
        "lease": "nineteenth, 2026-12-07, session 32",
        "device": (HERE / "gpu-tests" / "gpu-info.txt").read_text().strip(),
        "asked": "nvidia-h100-x1 (the kind status named); it came on the first call",
        "weights": "dummy (random): only the timings count; static fp8's weight and input scales are random too",
        "vllm": "0.24.0",
        "code": "12cfed3",
        "what": "bf16 against fp8 with static activation scales through the graph (ingress, decode tier, model "
                "replica): the closed loop of 64 distinct windows in flight, and camera levels of loadtest "
                "--streams, one H100, one lease",
        "commands": ["bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4"]
        + [c for name, config in SERVERS.items() for c in (
            f"bash benchmarks/fleet_gpu.sh graph-start {config} {GRAPH}",
            f"{LOOP} {name} sustain1", f"{LOOP} {name} sustain3")]
        + [f"FIRST={first} DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 1 {n}  # on server {s}"
           for s, n, first in LEVELS]
        + ["bash benchmarks/fleet_gpu.sh stop", "python results/gpu/fleet-lease19/summarize.py"],
        "loop": "64 distinct 10-s windows of the 139-s person-detection clip kept in flight to POST /v1/video/query, "
                "the first 64 sends spread over 30 s, 110 s of sending, the rate read after 45 s; 256 tokens per "
                "question, ignore_eos",
        "steps": steps,
        "cameras": {
            "workload": "real-time 10-s cameras at 4 fps, each looping its own copy of the clip (new copies per "
                        "level), 256 tokens, ignore_eos, 1 question, 60-s levels; keeps up at p95 freshness <= 3 s, "
                        "no lag growth, no errors",
            "levels": levels,
            "kept_up_most": kept, "failed_least": failed,
            "s8_q1_20": "cut short by the call's time limit (cameras/s8_q1_20.cut-short.log): no result",
        },
        "ratios_same_lease": {
            "fp8_static_vs_bf16_q1_by_latency": ratio("sustain1", "windows_per_s_by_latency"),
            "fp8_static_vs_bf16_q1_counted": ratio("sustain1", "windows_per_s"),
            "fp8_static_vs_bf16_q3_by_latency": ratio("sustain3", "windows_per_s_by_latency"),
            "fp8_static_vs_bf16_q3_counted": ratio("sustain3", "windows_per_s"),
            "q3_vs_q1_bf16_by_latency": three_vs_one("b16", "windows_per_s_by_latency"),
            "q3_vs_q1_bf16_counted": three_vs_one("b16", "windows_per_s"),
            "q3_vs_q1_fp8_static_by_latency": three_vs_one("s8", "windows_per_s_by_latency"),
            "q3_vs_q1_fp8_static_counted": three_vs_one("s8", "windows_per_s"),
            "answer_time_bf16_vs_fp8_static_at_12_cameras": round(levels["b16_12"]["model_ms_p50"]
                                                                  / levels["s8_12"]["model_ms_p50"], 3),
        },
        "gpu_tests": gpu_tests(HERE / "gpu-tests" / "gpu-junit.xml",
                               "bash benchmarks/gpu_machine.sh tests tests/gpu/test_preflight_gpu.py"),
    }
    (HERE / "fleet_lease19_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["ratios_same_lease"], indent=1), json.dumps(out["cameras"]["kept_up_most"]),
          json.dumps(out["cameras"]["failed_least"]))


if __name__ == "__main__":
    main()
