"""Sums up the twenty-third lease into ``fleet_lease23_h100.json``: item 6 of ``../NOTES.md`` (issue 26).

Run from the repository root: ``python results/gpu/fleet-lease23/summarize.py``. One H100, one lease, four servers
started one after the other (``benchmarks/fleet_gpu.sh``), each folder holding what its phases brought back:

- ``plain/``: plain ``vllm serve`` (the baseline's flags), ``vllm bench serve`` at 1.4 requests/s on 96 distinct
  10-s windows (``fleet_crosscheck_plain_r1.4.json``), its log;
- ``b16/``: the graph, bf16 (``configs/h200.yaml``, whose model section equals ``configs/h100.yaml``'s), the same
  ``vllm bench serve`` run, then one 60-s level of 8 cameras with 3 questions, the prefill hold on (the default);
- ``b16nohold/``: the same server with ``model.prefill_hold=false``, 8 cameras with 3 questions (new clip copies);
- ``s8/``: fp8 with static activation scales, 17 then 18 cameras with 3 questions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from benchmarks.fleet_results import GRAPH, STATIC_FP8, camera_level, camera_limits  # noqa: E402

SERVERS = {"b16": f"configs/h200.yaml {GRAPH}", "b16nohold": f"configs/h200.yaml {GRAPH} model.prefill_hold=false",
           "s8": f"configs/h200-fp8.yaml {STATIC_FP8} {GRAPH}"}
# The camera levels as run: (server folder, cameras, FIRST copy index).
LEVELS = (("b16", 8, 0), ("b16nohold", 8, 8), ("s8", 17, 16), ("s8", 18, 33))
# What a vllm bench serve result keeps: counts, rates (per s) and latencies (ms).
BENCH_KEYS = ("num_prompts", "request_rate", "completed", "failed", "duration", "request_throughput",
              "total_input_tokens", "total_output_tokens", "max_concurrent_requests", "max_output_tokens_per_s",
              "mean_ttft_ms", "p50_ttft_ms", "p95_ttft_ms", "p99_ttft_ms",
              "mean_e2el_ms", "p50_e2el_ms", "p95_e2el_ms", "p99_e2el_ms")
LEVEL = "DURATION_S=60 bash benchmarks/fleet_gpu.sh graph 3"


def _bench(path: Path) -> dict[str, Any]:
    """One ``vllm bench serve`` result's :data:`BENCH_KEYS`."""
    d = json.loads(path.read_text())
    return {k: d[k] for k in BENCH_KEYS}


def main() -> None:
    plain = _bench(HERE / "plain" / "fleet_crosscheck_plain_r1.4.json")
    graph = _bench(HERE / "b16" / "fleet_crosscheck_graph_r1.4.json")
    levels = {f"{s}_{n}": camera_level(HERE / s / f"fleet_graph_q3_{n}.json") | {"server": s, "first": first}
              for s, n, first in LEVELS}
    kept, failed = camera_limits(levels, SERVERS)
    hold, nohold = levels["b16_8"], levels["b16nohold_8"]
    out: dict[str, Any] = {
        "issue": 26,
        "lease": "twenty-third, 2026-12-07, session 36",
        "device": (HERE / "plain" / "gpu-info.txt").read_text().splitlines()[-1].split(",")[0]
        + " (nvidia-smi on the first call: 0 MiB in use)",
        "asked": "no kind (16:20 UTC): no machine (91 device seconds); nvidia-h100-x1 next: an H100; 1,631 "
                 "device seconds spent, those 91 included; 169 given back (too few for a server start)",
        "weights": "dummy (random): only the timings count; static fp8's weight and input scales are random too",
        "vllm": "0.24.0",
        "code": "21c2c71",
        "what": "the cross-check with vllm bench serve on both sides on one machine (plain vllm serve and the "
                "graph, bf16, the model card's sampling on both); what the prefill hold costs a fleet at 8 "
                "cameras with 3 questions (bf16); static fp8's 3-question camera limit between 16 and 18",
        "commands": ["bash benchmarks/gpu_machine.sh prep 96 .gpu-clips/intel_one-by-one-person-detection.mp4",
                     "bash benchmarks/fleet_gpu.sh plain-start", "bash benchmarks/fleet_gpu.sh crosscheck 1.4 96",
                     "bash benchmarks/fleet_gpu.sh stop",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['b16']}",
                     "bash benchmarks/fleet_gpu.sh crosscheck 1.4 96", f"FIRST=0 {LEVEL} 8",
                     "bash benchmarks/fleet_gpu.sh stop",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['b16nohold']}", f"FIRST=8 {LEVEL} 8",
                     "bash benchmarks/fleet_gpu.sh stop",
                     f"bash benchmarks/fleet_gpu.sh graph-start {SERVERS['s8']}", f"FIRST=16 {LEVEL} 17",
                     f"FIRST=33 {LEVEL} 18", "bash benchmarks/fleet_gpu.sh stop",
                     "python results/gpu/fleet-lease23/summarize.py"],
        "crosscheck": {
            "workload": "vllm bench serve --backend openai-chat, 96 distinct 10-s windows of the 139-s "
                        "person-detection clip as video files, 1.4 requests/s with burstiness 100 (nearly even "
                        "arrivals), 256 tokens, ignore_eos, temperature 0.6, top_p 0.95, repetition_penalty 1.05",
            "plain": plain, "graph": graph,
            "graph_vs_plain": {k: round(graph[k] / plain[k], 3)
                               for k in ("p50_ttft_ms", "p95_ttft_ms", "p50_e2el_ms", "p95_e2el_ms")},
            "max_output_tokens_per_s_note": "vllm bench serve counts one token per streamed chunk "
                                            "(vllm/benchmarks/serve.py: a request's token times are its first "
                                            "token plus each inter-chunk gap); the graph merges deltas over "
                                            "50 ms (model.stream_interval_ms), so its peak counts chunks, not "
                                            "tokens; total generated tokens are equal (24,576 each)",
        },
        "cameras": {
            "workload": "real-time 10-s cameras at 4 fps, each looping its own copy of the clip (new copies per "
                        "level), 256 tokens per question, ignore_eos, 3 questions asked of every window, 60-s "
                        "levels; a window's freshness is its last answer's; keeps up at p95 freshness <= 3 s, no "
                        "lag growth, no errors",
            "levels": levels,
            "kept_up_most": kept, "failed_least": failed,
            "prefill_hold_at_8_cameras": {
                "hold_on": {k: hold[k] for k in ("keeps_up", "freshness_s_p50", "freshness_s_p95", "ttft_ms_p50",
                                                 "model_ms_p50", "model_ms_p95")},
                "hold_off": {k: nohold[k] for k in ("keeps_up", "freshness_s_p50", "freshness_s_p95",
                                                    "ttft_ms_p50", "model_ms_p50", "model_ms_p95")},
                "freshness_p95_s_saved_without_hold": round(hold["freshness_s_p95"] - nohold["freshness_s_p95"], 3),
                "note": "one 60-s level each, two starts of the same server on one machine; the hold's own "
                        "limit and the limit without it were not bounded in this lease",
            },
        },
    }
    (HERE / "fleet_lease23_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["crosscheck"]["graph_vs_plain"]), json.dumps(kept), json.dumps(failed),
          json.dumps(out["cameras"]["prefill_hold_at_8_cameras"]["freshness_p95_s_saved_without_hold"]))


if __name__ == "__main__":
    main()
