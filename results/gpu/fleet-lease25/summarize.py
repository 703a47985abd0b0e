"""Sums up the twenty-fifth lease into ``fleet_lease25_h100.json``: static fp8 with the shipped threshold (issue 26).

Run from the repository root: ``python results/gpu/fleet-lease25/summarize.py``. One H100, one graph server
(``benchmarks/fleet_gpu.sh``): ``s8h32/`` holds static fp8 with ``configs/h200-fp8.yaml`` as shipped since session 37
(``model.prefill_hold_min_requests: 32``), 3-question camera levels 19 then 18. The machine was given back while
the server still ran (a lost API turn left it idle): no ``stop``, so no server log came back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from benchmarks.fleet_results import GRAPH, SERVERS, camera_level, camera_limits  # noqa: E402

SERVER = {"s8h32": f"{SERVERS['s8']} {GRAPH}"}
# The camera levels as run: (server folder, cameras, first clip copy; a sweep's FIRST, then + the level before).
LEVELS = (("s8h32", 19, 0), ("s8h32", 18, 19))
LEVEL = "DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 3"
# The same server and workload before the threshold was shipped (the hold always on), on other H100s:
# results/gpu/fleet-lease23/fleet_lease23_h100.json and results/gpu/fleet-lease21/fleet_lease21_h100.json.
EARLIER = {"twenty-third lease": {"kept_up_most": 17, "p95_s": 2.960, "failed_least": 18, "failed_p95_s": 3.149},
           "twenty-first lease": {"kept_up_most": 16, "p95_s": 2.851, "failed_least": 18, "failed_p95_s": 3.145}}


def main() -> None:
    levels = {f"{s}_{n}": camera_level(HERE / s / f"fleet_graph_q3_{n}.json") | {"server": s, "first": first}
              for s, n, first in LEVELS}
    kept, failed = camera_limits(levels, SERVER)
    out: dict[str, Any] = {
        "issue": 26,
        "lease": "twenty-fifth, 2026-12-07, session 38",
        "device": "NVIDIA H100 80GB HBM3 (nvidia-smi on the first call: 0 MiB in use)",
        "asked": "about 22:08 UTC no kind: an H100 (staging, then one call of 460 s); the machine was given back "
                 "idle after a lost API turn, with the server up (no stop, no server log); 22:39-23:23 UTC nine "
                 "calls (eight no kind, one nvidia-h100-x1): no machine, 825 device seconds; 23:29 no kind: a second "
                 "H100 (staging, then tests/gpu/test_preflight_gpu.py 6 passed, test_vllm_graph.py cut off by the "
                 "device time: gpu-tests/)",
        "weights": "dummy (random): only the timings count",
        "vllm": "0.24.0",
        "code": "1825253",
        "what": "the 3-question camera limit of static fp8 with the Hopper config as shipped (the prefill hold's "
                "threshold of 32 unfinished requests), against the same server with the hold always on on earlier "
                "leases (other H100s)",
        "commands": ["bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVER['s8h32']}", f"FIRST=0 {LEVEL} 19,18",
                     "python results/gpu/fleet-lease25/summarize.py"],
        "cameras": {
            "workload": "real-time 10-s cameras at 4 fps, each looping its own copy of the clip (new copies per "
                        "level), 256 tokens per question, ignore_eos, 3 questions asked of every window, 60-s "
                        "levels, descending (19 then 18); a window's freshness is its last answer's; keeps up at "
                        "p95 freshness <= 3 s, no lag growth, no errors",
            "levels": levels,
            "kept_up_most": kept, "failed_least": failed,
            "earlier_with_the_hold_always_on": EARLIER,
            "note": "one run per level; 18 kept up by 2 ms (p95 2.998 s), so the limit of 18 is at the edge",
        },
    }
    (HERE / "fleet_lease25_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(kept), json.dumps(failed))


if __name__ == "__main__":
    main()
