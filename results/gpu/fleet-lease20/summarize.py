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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GRAPH = ("streams.workers=3 model.engine_args.max_num_seqs=256 model.warmup_decode_sweep=256 "
         "model_replica.max_ongoing_requests=256 decoder.autoscaling_config.min_replicas=6")
N128 = GRAPH.replace("max_num_seqs=256", "max_num_seqs=128").replace("sweep=256", "sweep=128")
STATIC = ("'model.engine_args.hf_overrides={\"quantization_config\":{\"quant_method\":\"fp8\","
          "\"activation_scheme\":\"static\"}}'")
SERVERS = {"b16": "configs/h200.yaml", "s8": f"configs/h200-fp8.yaml {STATIC}"}
LOOP = "SUSTAIN_STAGGER_S=30 SUSTAIN_S=110 SUSTAIN_WARMUP_S=45 bash benchmarks/fleet_gpu.sh burst"
# Each server's sweep as run: (server, LEVELS, FIRST); the levels that ran, with the copy index each one used.
SWEEPS = (("b16", "11,10,8", 0), ("s8", "22,20,16", 21))
LEVELS = (("b16", 11, 0), ("b16", 10, 11), ("s8", 22, 21), ("s8", 20, 43))
STEP_KEYS = ("questions_per_window", "sent", "statuses", "counted", "windows_per_s", "windows_per_s_by_latency",
             "answers_per_s", "latency_mean_s", "latency_p95_s", "ended_per_10s", "ran_out_of_windows",
             "server_split_mean_ms")


def _level(server: str, cameras: int) -> dict[str, Any]:
    """One camera level's verdict, freshness and the server's split (ms) from ``loadtest --streams``'s results."""
    (level,) = json.loads((HERE / "cameras" / f"{server}_q1_{cameras}.json").read_text())["levels"]
    total, ms = level["total"], level["total"]["server_ms"]
    return {"cameras": cameras, "keeps_up": level["summary"]["keeps_up"], "reasons": level["summary"]["reasons"],
            "freshness_growth_s_per_s": level["summary"]["freshness_growth_s_per_s"],
            "freshness_s_p50": total["freshness_s_p50"], "freshness_s_p95": total["freshness_s_p95"],
            "answers_per_s": total["answers_per_s"], "windows_cut": total["windows_cut"],
            "dropped_total": total["dropped_total"], "ttft_ms_p50": ms["ttft_ms"]["p50"],
            "model_ms_p50": ms["model_ms"]["p50"], "model_ms_p95": ms["model_ms"]["p95"]}


def _step(folder: str) -> dict[str, Any]:
    """The one loop step in ``folder/lifecycle.json``, checked against its ``== sustain3:`` line in ``burst.log``."""
    (saved,) = json.loads((HERE / folder / "lifecycle.json").read_text())["steps"]
    line = next(x for x in (HERE / folder / "burst.log").read_text().splitlines() if x.startswith("== sustain3: "))
    logged = json.loads(line.removeprefix("== sustain3: "))
    if any(saved[k] != logged[k] for k in ("sent", "counted", "windows_per_s", "latency_mean_s")):
        raise SystemExit(f"{folder}: burst.log and lifecycle.json disagree")
    return {k: saved[k] for k in STEP_KEYS}


def _max_num_seqs(folder: str) -> int:
    """``max_num_seqs`` as the server's derived config (``fleet_graph_config.yaml``) set it."""
    lines = (HERE / folder / "fleet_graph_config.yaml").read_text().splitlines()
    (value,) = {int(x.split(":")[1]) for x in lines if x.strip().startswith("max_num_seqs:")}
    return value


def main() -> None:
    levels = {f"{s}_{n}": _level(s, n) for s, n, _ in LEVELS}
    kept = {s: max(v["cameras"] for k, v in levels.items() if k.startswith(s + "_") and v["keeps_up"]) for s in SERVERS}
    failed = {s: min(v["cameras"] for k, v in levels.items() if k.startswith(s + "_") and not v["keeps_up"])
              for s in SERVERS}
    steps = {"s8n256": _step("s8n256") | {"max_num_seqs": _max_num_seqs("s8")},
             "s8n128": _step("s8n128") | {"max_num_seqs": _max_num_seqs("s8n128")}}

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
