"""Sums up the thirteenth lease into ``fleet_window_attention_h100.json``.

Run from the repository root: ``python results/gpu/fleet-lease13/summarize.py``. Reads the graph's closed loops
(``NAME/lifecycle.json``, the ``sustainN`` / ``sustainNxC`` steps of :mod:`benchmarks.lifecycle` run by
``benchmarks/fleet_gpu.sh burst``), vLLM's per-request timings beside them (``NAME/engine_timings.jsonl.gz``), the
window path's window-count lines of the servers' logs, the ``tests/gpu`` JUnit file and the kernel timing.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
#: run folder -> (dtype, what ran); every server: ``model.window_cascade_attention=true`` and
#: ``decoder.autoscaling_config.min_replicas=6`` over configs/h200.yaml or configs/h200-fp8.yaml
RUNS = {"wa": "bf16", "wa96": "bf16", "wa_f8": "fp8", "wa96_f8": "fp8"}
KEYS = ("concurrency", "sent", "statuses", "counted", "windows_per_s", "windows_per_s_by_latency", "latency_mean_s",
        "latency_p95_s", "drain_s", "ended_per_10s", "server_split_mean_ms", "ran_out_of_windows")
WINDOW_LINE = re.compile(r"window attention: (\d+) of (\d+) engine steps, ([\d.]+) windows per step")


def _outside_engine_ms(run: str, step: dict[str, Any], skip: int) -> dict[str, Any]:
    """Mean loop latency minus the mean engine-side time (the replica's hand-off to vLLM through the last token:
    ``frontend_ms + engine_queue_ms + prefill_ms + decode_ms``) of the step's first questions, read from the
    timings file's 256-token rows with no cached token, in order, after the ``skip`` rows of earlier steps."""
    path = HERE / run / "engine_timings.jsonl.gz"
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    first = [r for r in rows if r["completion_tokens"] == 256 and r["cached_tokens"] == 0][skip: skip + step["sent"]]
    engine = statistics.mean(r["frontend_ms"] + r["engine_queue_ms"] + r["prefill_ms"] + r["decode_ms"]
                             for r in first)
    to_first = statistics.mean(r["frontend_ms"] + r["engine_queue_ms"] + r["prefill_ms"] for r in first)
    return {"rows": len(first), "engine_side_mean_ms": round(engine), "outside_engine_mean_ms":
            round(step["latency_mean_s"] * 1000 - engine),
            # against the replica's own ttft (server_split_mean_ms.ttft): do the two views agree up to the first token?
            "engine_side_to_first_token_mean_ms": round(to_first)}


def _window_lines(log: Path) -> list[dict[str, float]]:
    with gzip.open(log, "rt", errors="replace") as f:
        return [{"planned_steps": int(m.group(1)), "engine_steps": int(m.group(2)),
                 "windows_per_planned_step": float(m.group(3))} for m in WINDOW_LINE.finditer(f.read())]


def main() -> None:
    steps: dict[str, Any] = {}
    for run, dtype in RUNS.items():
        d = json.loads((HERE / run / "lifecycle.json").read_text())
        for s in d["steps"]:
            row = {k: s[k] for k in KEYS}
            if s["step"] == "sustain1":  # the only step of each run whose first questions are the file's first rows
                row["outside_engine"] = _outside_engine_ms(run, s, 0)
            steps[f"{run}:{s['step']}"] = {"dtype": dtype, **row}
    rate = {k: v["windows_per_s_by_latency"] for k, v in steps.items()}
    counted = {k: v["windows_per_s"] for k, v in steps.items()}
    junit = ET.parse(HERE / "tests" / "gpu-junit.xml").getroot()
    suite = junit if junit.tag == "testsuite" else junit[0]
    out = {
        "lease": "thirteenth, 2026-12-05, session 24",
        "device": (HERE / "tests" / "gpu-info.txt").read_text().strip(),
        "note": "Dummy weights (random: only the timings count), vLLM 0.24.0. The graph: configs/h200.yaml or "
                "configs/h200-fp8.yaml with streams.workers=3 model.engine_args.max_num_seqs=256 "
                "model.warmup_decode_sweep=256 model_replica.max_ongoing_requests=256 "
                "model.window_cascade_attention=true decoder.autoscaling_config.min_replicas=6; 256 tokens per "
                "question (ignore_eos), the model card's sampling; 64 (or 96) distinct 10-s windows in flight, the "
                "first sends spread over 30 s, 110 s of sending, the rate read after 45 s. Rates by Little's law "
                "(in flight / mean latency); 'counted' beside them. An H100 (the device tool gave one for "
                "nvidia-h200); no run without window attention on this machine.",
        "commands": [
            "bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4",
            "bash benchmarks/gpu_machine.sh tests tests/gpu/test_window_attention_gpu.py",
            "COSMOS_SERVE_ENGINE_TIMINGS=/tmp/et_b16.jsonl bash benchmarks/fleet_gpu.sh graph-start [configs/"
            "h200-fp8.yaml] streams.workers=3 model.engine_args.max_num_seqs=256 model.warmup_decode_sweep=256 "
            "model_replica.max_ongoing_requests=256 model.window_cascade_attention=true "
            "decoder.autoscaling_config.min_replicas=6",
            "SUSTAIN_STAGGER_S=30 SUSTAIN_S=110 SUSTAIN_WARMUP_S=45 bash benchmarks/fleet_gpu.sh burst wa[_f8] "
            "sustain1,sustain3",
            "SUSTAIN_STAGGER_S=30 SUSTAIN_S=110 SUSTAIN_WARMUP_S=45 bash benchmarks/fleet_gpu.sh burst wa96[_f8] "
            "sustain1x96; bash benchmarks/fleet_gpu.sh stop",
            "PYTHONPATH=/root/site:$PWD python3 -m benchmarks.window_attention_kernel --out "
            "$OUT/window_attention_kernel.json",
        ],
        "steps": steps,
        "ratios": {
            "bf16_3_vs_1": round(rate["wa:sustain3"] / rate["wa:sustain1"], 3),
            "bf16_3_vs_1_counted": round(counted["wa:sustain3"] / counted["wa:sustain1"], 3),
            "fp8_3_vs_1": round(rate["wa_f8:sustain3"] / rate["wa_f8:sustain1"], 3),
            "fp8_3_vs_1_counted": round(counted["wa_f8:sustain3"] / counted["wa_f8:sustain1"], 3),
            "fp8_vs_bf16_1_question_64": round(rate["wa_f8:sustain1"] / rate["wa:sustain1"], 3),
            "fp8_vs_bf16_1_question_96": round(rate["wa96_f8:sustain1x96"] / rate["wa96:sustain1x96"], 3),
            "fp8_vs_bf16_3_questions_64": round(rate["wa_f8:sustain3"] / rate["wa:sustain3"], 3),
            "bf16_96_vs_64": round(rate["wa96:sustain1x96"] / rate["wa:sustain1"], 3),
            "fp8_96_vs_64": round(rate["wa96_f8:sustain1x96"] / rate["wa_f8:sustain1"], 3),
        },
        "window_path_log_lines": {"bf16": _window_lines(HERE / "wa96" / "fleet_graph_serve_bf16.log.gz"),
                                  "fp8": _window_lines(HERE / "wa96_f8" / "fleet_graph_serve_fp8.log.gz")},
        "tests_gpu": {"tests": int(suite.get("tests", 0)), "failures": int(suite.get("failures", 0)),
                      "errors": int(suite.get("errors", 0)), "skipped": int(suite.get("skipped", 0)),
                      "time_s": float(suite.get("time", 0))},
        "kernel": json.loads((HERE / "window_attention_kernel.json").read_text()),
    }
    (HERE / "fleet_window_attention_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["ratios"], indent=1))


if __name__ == "__main__":
    main()
