"""Sums up the eleventh lease into ``fleet_encoder_cache_h200.json``.

Run from the repository root: ``python results/gpu/fleet-lease11/summarize.py``. Reads the engine-alone runs
(``engine/engine_profile.NAME.json``, :mod:`benchmarks.engine_profile`) and the graph's staggered closed loop
(``stag_e/``: ``lifecycle.json``, the engine timings, the serve log with vLLM's stats lines). The per-request
stages and the stats-line fit are the tenth lease's (``../fleet-lease10/summarize.py``), loaded from there.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("lease10", HERE.parent / "fleet-lease10" / "summarize.py")
assert _spec is not None and _spec.loader is not None
lease10 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lease10)

#: engine-alone runs: name -> what differs from ``q1`` (configs/h200.yaml's engine arguments, dummy weights)
ENGINE_RUNS = {
    "q1": "1 question",
    "q1e": "1 question, encoder cache 131,072 tokens",
    "q3": "3 questions",
    "q3e": "3 questions, encoder cache 131,072 tokens",
    "q3s": "3 questions, encoder cache 131,072 tokens, max_num_seqs 256",
    "q3k": "3 questions, encoder cache 131,072 tokens, max_num_seqs 256, kv_cache_dtype fp8",
}


def _engine(name: str) -> dict[str, Any]:
    d = json.loads((HERE / "engine" / f"engine_profile.{name}.json").read_text())
    prof = d.get("profile", {})
    kernels = prof.get("kernels", [])
    return {
        "what": ENGINE_RUNS[name],
        "command": d["command"],
        "engine_start_s": d["engine_start_s"],
        "clips_per_s": {k: v["clips_per_s"] for k, v in d["bursts"].items()},
        "later_prefill_s_p50": {k: v.get("later_prefill_s", {}).get("p50") for k, v in d["bursts"].items()},
        "profile_after_steps": prof.get("after_iterations"),
        "profile_ms_per_step": round(prof["window_ms"] / prof["iterations"], 1) if prof else None,
        "profile_kinds_ms": prof.get("kinds_ms"),
        # the vision tower's rotary kernel (the language model's M-RoPE is fused into Inductor's kernels):
        # calls / 32 layers = vision-tower runs inside the profiled steps
        "vision_tower_runs_in_profile": sum(k["calls"] for k in kernels if k["name"] == "rotary_kernel") // 32,
    }


def _graph() -> dict[str, Any]:
    steps, life = lease10.run_steps(HERE / "stag_e")
    r1, r3 = (steps[f"sustain{q}"]["windows_per_s_by_latency"] for q in "13")
    c1, c3 = (steps[f"sustain{q}"]["windows_per_s"] for q in "13")
    log = HERE / "stag_e" / "fleet_graph_serve.log.gz"
    return {"command": life["command"], "overrides": life.get("overrides"),
            "ratio_3_vs_1_by_latency": round(r3 / r1, 3), "ratio_3_vs_1_counted": round(c3 / c1, 3),
            "stats_fit": lease10.stats_fit(log, "14:39:40", "14:43:20"), **steps}


def main() -> None:
    engine = {name: _engine(name) for name in ENGINE_RUNS}
    graph = _graph()
    ten = json.loads((HERE.parent / "fleet-lease10" / "fleet_sustained_staggered_h200.json").read_text())
    doc = {
        "bench": "fleet, eleventh lease (issue 26): the engine alone with 1 and 3 questions per window, vLLM's "
                 "encoder cache at its default (max_num_batched_tokens, 16,384 tokens) and at 131,072 tokens "
                 "(model.encoder_cache_tokens); the graph's staggered closed loop with the larger cache",
        "date": "2026-12-04",
        "code": "19f15e8",
        "weights": "dummy (random): only the timings count",
        "command_note": "on the GPU machine after staging: `bash benchmarks/gpu_machine.sh prep 700 "
                        ".gpu-clips/intel_one-by-one-person-detection.mp4`; engine: `bash benchmarks/gpu_machine.sh "
                        "engine NAME --input patches --windows-dir /tmp/xwin --clip "
                        ".gpu-clips/intel_one-by-one-person-detection.mp4 --bursts warm profiled --questions N "
                        "--profile-delay 80|150 --profile-iters 20 [--encoder-cache-tokens 131072] [--engine-args "
                        "...]` (each run's own command is in its JSON); graph: "
                        "`COSMOS_SERVE_ENGINE_TIMINGS=/tmp/et_e.jsonl bash benchmarks/fleet_gpu.sh graph-start "
                        "streams.workers=3 model.engine_args.max_num_seqs=256 model.warmup_decode_sweep=256 "
                        "model_replica.max_ongoing_requests=256 model.encoder_cache_tokens=131072`, then "
                        "`SUSTAIN_STAGGER_S=30 SUSTAIN_S=110 SUSTAIN_WARMUP_S=45 bash benchmarks/fleet_gpu.sh burst "
                        "stag_e sustain1,sustain3`",
        "target_ratio_3_vs_1": 0.769,
        "engine_ratio_3_vs_1_warm": {
            "default_cache": round(engine["q3"]["clips_per_s"]["warm"] / engine["q1"]["clips_per_s"]["warm"], 3),
            "cache_131072": round(engine["q3e"]["clips_per_s"]["warm"] / engine["q1e"]["clips_per_s"]["warm"], 3),
        },
        "engine_cache_gain_3_questions": {
            b: round(engine["q3e"]["clips_per_s"][b] / engine["q3"]["clips_per_s"][b], 3)
            for b in ("warm", "profiled")
        },
        "graph_ratio_3_vs_1_by_latency": graph["ratio_3_vs_1_by_latency"],
        "graph_ratio_3_vs_1_tenth_lease": ten["ratio_3_vs_1_bf16_staggered"],
        "engine": engine,
        "graph_staggered_encoder_cache": graph,
    }
    (HERE / "fleet_encoder_cache_h200.json").write_text(json.dumps(doc, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
