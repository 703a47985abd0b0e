"""Sums up the twentieth lease into ``fleet_lease20_h100.json``: cameras per GPU, bf16 against static fp8 (issue 26).

Run from the repository root: ``python results/gpu/fleet-lease20/summarize.py``. Reads, from one H100 in one lease:

- camera levels of ``python -m loadtest --streams`` (``cameras/SERVER_q1_N.json``), levels descending so that a
  sweep stops at the first level that keeps up (``benchmarks/levels.sh``), on two graph servers started one after
  the other by ``benchmarks/fleet_gpu.sh graph-start`` with ``GRAPH`` below: ``b16`` (``configs/h200.yaml``, bf16)
  and ``s8`` (``configs/h200-fp8.yaml`` with static activation scales, the kernels a calibrated fp8 checkpoint
  runs; see ``../fleet-lease18/summarize.py``);
- on ``s8`` after its levels, the closed loop of ``benchmarks.lifecycle`` with 3 questions per window
  (``s8n256/``: ``max_num_seqs`` 256 as in ``GRAPH``); then a third server, ``s8`` with ``max_num_seqs`` 128, the
  value ``configs/h200*.yaml`` shipped until this lease, and the same loop (``s8n128/``). Each folder holds the
  step's ``lifecycle.json``, its log (``burst.log``) and the server's derived config.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from benchmarks.fleet_results import GRAPH, LOOP, SERVERS, camera_level, camera_limits, loop_step, max_num_seqs  # noqa: E402

N128 = GRAPH.replace("max_num_seqs=256", "max_num_seqs=128").replace("sweep=256", "sweep=128")
CONFIG = "fleet_graph_config.yaml"
# Each server's sweep as run: (server, LEVELS, FIRST); the levels that ran, with the copy index each one used.
SWEEPS = (("b16", "11,10,8", 0), ("s8", "22,20,16", 21))
LEVELS = (("b16", 11, 0), ("b16", 10, 11), ("s8", 22, 21), ("s8", 20, 43))


def main() -> None:
    levels = {f"{s}_{n}": camera_level(HERE / "cameras" / f"{s}_q1_{n}.json") for s, n, _ in LEVELS}
    kept, failed = camera_limits(levels, SERVERS)
    steps = {name: loop_step(HERE / name, "sustain3") | {"max_num_seqs": max_num_seqs(HERE / server / CONFIG)}
             for name, server in (("s8n256", "s8"), ("s8n128", "s8n128"))}

    def seqs_ratio(key: str) -> float:
        return round(steps["s8n256"][key] / steps["s8n128"][key], 3)

    out = {
        "issue": 26,
        "lease": "twentieth, 2026-12-07, session 33",
        "device": "NVIDIA H100 80GB HBM3 (nvidia-smi's name on the first call; 0 MiB used before the start)",
        "asked": "no kind, then nvidia-h100-x1 (06:20 UTC): neither started (181 device seconds), a third call "
                 "was refused at once (15 s); nvidia-h100-x1 at 06:35 UTC came; 1,499 s held, 280 s given back",
        "weights": "dummy (random): only the timings count; static fp8's weight and input scales are random too",
        "vllm": "0.24.0",
        "code": "82ab250",
        "what": "the camera limit of bf16 and of static fp8 through the graph on one H100 (descending 60-s levels), "
                "and max_num_seqs 256 against 128 in the 3-question closed loop with static fp8",
        "commands": ["bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['b16']} {GRAPH}",
                     f"FIRST={SWEEPS[0][2]} DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 1 {SWEEPS[0][1]}",
                     "bash benchmarks/fleet_gpu.sh stop",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['s8']} {GRAPH}",
                     f"FIRST={SWEEPS[1][2]} DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 1 {SWEEPS[1][1]}",
                     f"{LOOP} s8n256 sustain3",
                     "bash benchmarks/fleet_gpu.sh stop",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['s8']} {N128}",
                     f"{LOOP} s8n128 sustain3",
                     "bash benchmarks/fleet_gpu.sh stop",
                     "python results/gpu/fleet-lease20/summarize.py"],
        "cameras": {
            "workload": "real-time 10-s cameras at 4 fps, each looping its own copy of the clip (new copies per "
                        "level), 256 tokens, ignore_eos, 1 question, 60-s levels; keeps up at p95 freshness <= 3 s, "
                        "no lag growth, no errors; descending levels stop at the first that keeps up",
            "sweeps": [{"server": s, "levels": lv, "first": f} for s, lv, f in SWEEPS],
            "levels": levels,
            "kept_up_most": kept, "failed_least": failed,
            "fp8_static_vs_bf16_cameras": {"low": round(kept["s8"] / kept["b16"], 3),
                                           "high": round((failed["s8"] - 1) / kept["b16"], 3),
                                           "why": "bf16 keeps up with 10 and fails at 11; static fp8 keeps up with "
                                                  "20 and fails at 22 (21 not run)"},
        },
        "loop": "64 distinct 10-s windows of the 139-s person-detection clip kept in flight to POST /v1/video/query, "
                "3 questions each, the first 64 sends spread over 30 s, 110 s of sending, the rate read after 45 s; "
                "256 tokens per question, ignore_eos",
        "steps": steps,
        "max_num_seqs_256_vs_128_q3": {"by_latency": seqs_ratio("windows_per_s_by_latency"),
                                       "counted": seqs_ratio("windows_per_s")},
    }
    (HERE / "fleet_lease20_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["cameras"]["fp8_static_vs_bf16_cameras"]), json.dumps(out["max_num_seqs_256_vs_128_q3"]))


if __name__ == "__main__":
    main()
