"""Sums up the twenty-fourth lease into ``fleet_lease24_h100.json``: the prefill hold's threshold (issue 26).

Run from the repository root: ``python results/gpu/fleet-lease24/summarize.py``. One H100, one lease, two bf16
graph servers started one after the other (``benchmarks/fleet_gpu.sh``), each folder holding what its phases
brought back:

- ``h32/``: ``model.prefill_hold_min_requests=32`` (a window's later questions held only while vLLM tracks at least
  32 unfinished requests): 3-question camera levels 9 then 8, then the 3-question closed loop (``loop/``);
- ``hold/``: the default (always held): the same loop, then camera levels 9 and 8 on new clip copies.

Each server's log (``fleet_graph_serve.log.gz``) gives vLLM's running and waiting counts per phase
(:func:`benchmarks.fleet_results.engine_busy_spans`): what the threshold saw.
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
    camera_level,
    camera_limits,
    engine_busy_spans,
    loop_step,
)

SERVERS = {"h32": f"configs/h200.yaml {GRAPH} model.prefill_hold_min_requests=32", "hold": f"configs/h200.yaml {GRAPH}"}
# The camera levels as run: (server folder, cameras, first clip copy; a sweep's FIRST, then + the level before).
LEVELS = (("h32", 9, 0), ("h32", 8, 9), ("hold", 9, 17), ("hold", 8, 26))
LEVEL = "DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 3"
# Each server's busy spans in the order its phases ran (the first is the replica's warm-up before ready).
PHASES = {"h32": ("warm-up", "cameras 9", "cameras 8", "loop"), "hold": ("warm-up", "loop", "cameras 9", "cameras 8")}


def _phases(server: str) -> dict[str, dict[str, Any]]:
    """``server``'s busy spans named by :data:`PHASES`; raises ``ValueError`` when their count differs."""
    spans = engine_busy_spans(HERE / server / "fleet_graph_serve.log.gz")
    if len(spans) != len(PHASES[server]):
        raise ValueError(f"{server}: {len(spans)} busy spans in the log, expected {len(PHASES[server])}")
    return dict(zip(PHASES[server], spans, strict=True))


def main() -> None:
    levels = {f"{s}_{n}": camera_level(HERE / s / f"fleet_graph_q3_{n}.json") | {"server": s, "first": first}
              for s, n, first in LEVELS}
    kept, failed = camera_limits(levels, SERVERS)
    steps = {s: loop_step(HERE / s / "loop", "sustain3") for s in SERVERS}
    h32, hold = steps["h32"], steps["hold"]
    out: dict[str, Any] = {
        "issue": 26,
        "lease": "twenty-fourth, 2026-12-07, session 37",
        "device": "NVIDIA H100 80GB HBM3 (nvidia-smi on the first call: 0 MiB in use)",
        "asked": "18:43 UTC no kind: no machine (181 device seconds); nvidia-h100-x1: none (90 s); 18:53 no kind: "
                 "none (180 s); 19:00 nvidia-h100-x1: not asked (15 s); 19:06 nvidia-h100-x1: an H100. 1,662 device "
                 "seconds spent, those 466 included; 138 given back",
        "weights": "dummy (random): only the timings count",
        "vllm": "0.24.0",
        "code": "020782e",
        "what": "whether model.prefill_hold_min_requests=32 keeps the camera limit of sending a window's questions "
                "at once and the closed-loop rate of holding them (bf16, 3 questions per window), against the "
                "default hold on the same machine",
        "commands": ["bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['h32']}", f"FIRST=0 {LEVEL} 9,8",
                     f"{LOOP} h32 sustain3", "bash benchmarks/fleet_gpu.sh stop",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['hold']}", f"{LOOP} hold sustain3",
                     f"FIRST=17 {LEVEL} 9,8", "bash benchmarks/fleet_gpu.sh stop",
                     "python results/gpu/fleet-lease24/summarize.py"],
        "cameras": {
            "workload": "real-time 10-s cameras at 4 fps, each looping its own copy of the clip (new copies per "
                        "level), 256 tokens per question, ignore_eos, 3 questions asked of every window, 60-s "
                        "levels, descending (9 then 8); a window's freshness is its last answer's; keeps up at p95 "
                        "freshness <= 3 s, no lag growth, no errors",
            "levels": levels,
            "kept_up_most": kept, "failed_least": failed,
        },
        "loop": {
            "workload": "64 distinct 10-s windows kept in flight to POST /v1/video/query, 3 questions each, 256 "
                        "tokens per question, ignore_eos; the first 64 sends spread over 30 s, the rate read from "
                        "45 s to 110 s; windows/s by latency = 64 / mean latency, counted = windows ended in the "
                        "65 s read",
            "steps": steps,
            "h32_vs_hold": {k: round(h32[k] / hold[k], 3) for k in ("windows_per_s_by_latency", "windows_per_s")},
            "note": "one run each; the counted rate depends on where the 65-s read falls in the waves of "
                    "equal-length answers (ended_per_10s), the rate by latency does not",
        },
        "engine": {
            "what": "vLLM's stats lines (every 10 s) per phase: the most running and waiting requests seen, and the "
                    "mean prompt (cache hits left out) and generation tokens/s",
            **{s: _phases(s) for s in SERVERS},
        },
    }
    (HERE / "fleet_lease24_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(kept), json.dumps(failed), json.dumps(out["loop"]["h32_vs_hold"]))


if __name__ == "__main__":
    main()
