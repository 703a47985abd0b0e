"""Sums up the twenty-first lease into ``fleet_lease21_h100.json``: bf16's ``max_num_seqs``, 3-question cameras.

Issue 26. Run from the repository root: ``python results/gpu/fleet-lease21/summarize.py``. Reads, from one H100
in one lease, four graph servers started one after the other by ``benchmarks/fleet_gpu.sh graph-start``:

- ``b16`` (``configs/h200.yaml``, bf16, ``GRAPH`` below: ``max_num_seqs`` 256, as the config ships since session
  33): the closed loop of ``benchmarks.lifecycle`` with 3 questions per window (``b16n256/``), then one 3-question
  camera level (``cameras/b16_q3_8.json``);
- ``b16n128``: the same with ``max_num_seqs`` 128 (the value shipped until session 33) and the same loop
  (``b16n128/``);
- ``s8`` (``configs/h200-fp8.yaml`` with static activation scales, the kernels a calibrated fp8 checkpoint runs;
  see ``../fleet-lease18/summarize.py``): 3-question camera levels 18 and 16;
- ``b16b``: ``b16`` started again, for the 3-question camera level 9.

Each server folder holds its derived config (``fleet_graph_config.yaml``) and its log (``serve.log.gz``); each loop
folder its ``lifecycle.json`` and ``burst.log``; ``gpu-tests/`` the two ``tests/gpu`` runs that ended the lease.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from benchmarks.fleet_results import (  # noqa: E402
    GRAPH,
    LOOP,
    SERVERS,
    camera_level,
    camera_limits,
    gpu_tests,
    loop_step,
    max_num_seqs,
)

N128 = GRAPH.replace("max_num_seqs=256", "max_num_seqs=128").replace("sweep=256", "sweep=128")
CONFIG = "fleet_graph_config.yaml"
# The 3-question camera levels as run: (config, cameras, FIRST copy index, server folder). b16's two levels ran on
# two starts of the same config (b16, then b16b), each sweep with new copies of the clip.
LEVELS = (("b16", 8, 0, "b16"), ("s8", 18, 8, "s8"), ("s8", 16, 26, "s8"), ("b16", 9, 60, "b16b"))
GPU_TESTS = (("gpu-junit.xml", "tests/gpu/test_preflight_gpu.py tests/gpu/test_vllm_graph.py"),
             ("gpu-junit.2.xml", "tests/gpu/test_vision_patches_gpu.py tests/gpu/test_window_attention_gpu.py"))


def main() -> None:
    levels = {f"{s}_{n}": camera_level(HERE / "cameras" / f"{s}_q3_{n}.json") | {"server": folder, "first": first}
              for s, n, first, folder in LEVELS}
    kept, failed = camera_limits(levels, SERVERS)
    steps = {name: loop_step(HERE / name, "sustain3") | {"max_num_seqs": max_num_seqs(HERE / server / CONFIG)}
             for name, server in (("b16n256", "b16"), ("b16n128", "b16n128"))}

    def seqs_ratio(key: str) -> float:
        return round(steps["b16n256"][key] / steps["b16n128"][key], 3)

    out: dict[str, Any] = {
        "issue": 26,
        "lease": "twenty-first, 2026-12-07, session 34",
        "device": "NVIDIA H100 80GB HBM3 (nvidia-smi's name on the first call; 0 MiB used before the start)",
        "asked": "no kind (10:23 UTC): an H100 came on the first call; 1,672 s held, 125 s given back",
        "weights": "dummy (random): only the timings count; static fp8's weight and input scales are random too",
        "vllm": "0.24.0",
        "code": "048b9f4",
        "what": "max_num_seqs 256 against 128 with bf16 in the 3-question closed loop through the graph, and the "
                "3-question camera limits of bf16 and static fp8 (60-s levels)",
        "commands": ["bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['b16']} {GRAPH}",
                     f"{LOOP} b16n256 sustain3",
                     "FIRST=0 DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 3 8,7,6",
                     "bash benchmarks/fleet_gpu.sh stop",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['b16']} {N128}",
                     f"{LOOP} b16n128 sustain3",
                     "bash benchmarks/fleet_gpu.sh stop",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['s8']} {GRAPH}",
                     "FIRST=8 DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 3 18",
                     "FIRST=26 DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 3 16,14",
                     "bash benchmarks/fleet_gpu.sh stop",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['b16']} {GRAPH}",
                     "FIRST=60 DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 3 9,10",
                     "bash benchmarks/fleet_gpu.sh stop",
                     *(f"bash benchmarks/gpu_machine.sh tests {paths}" for _, paths in GPU_TESTS),
                     "python results/gpu/fleet-lease21/summarize.py"],
        "cameras": {
            "workload": "real-time 10-s cameras at 4 fps, each looping its own copy of the clip (new copies per "
                        "level), 256 tokens per question, ignore_eos, 3 questions asked of every window, 60-s "
                        "levels; a window's freshness is its last answer's; keeps up at p95 freshness <= 3 s, no "
                        "lag growth, no errors; descending levels stop at the first that keeps up, ascending ones "
                        "at the first that fails",
            "levels": levels,
            "kept_up_most": kept, "failed_least": failed,
            "fp8_static_vs_bf16_cameras_q3": {"low": round(kept["s8"] / kept["b16"], 3),
                                              "high": round((failed["s8"] - 1) / kept["b16"], 3),
                                              "why": f"bf16 keeps up with {kept['b16']} and fails at "
                                                     f"{failed['b16']}; static fp8 keeps up with {kept['s8']} and "
                                                     f"fails at {failed['s8']} ({failed['s8'] - 1} not run)"},
        },
        "loop": "64 distinct 10-s windows of the 139-s person-detection clip kept in flight to POST /v1/video/query, "
                "3 questions each, the first 64 sends spread over 30 s, 110 s of sending, the rate read after 45 s; "
                "256 tokens per question, ignore_eos",
        "steps": steps,
        "bf16_max_num_seqs_256_vs_128_q3": {"by_latency": seqs_ratio("windows_per_s_by_latency"),
                                            "counted": seqs_ratio("windows_per_s")},
        "gpu_tests": [gpu_tests(HERE / "gpu-tests" / name, f"bash benchmarks/gpu_machine.sh tests {paths}")
                      for name, paths in GPU_TESTS],
    }
    (HERE / "fleet_lease21_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["cameras"]["fp8_static_vs_bf16_cameras_q3"]),
          json.dumps(out["bf16_max_num_seqs_256_vs_128_q3"]))


if __name__ == "__main__":
    main()
