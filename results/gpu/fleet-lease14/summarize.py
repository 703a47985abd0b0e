"""Sums up the fourteenth lease into ``fleet_window_attention_control_h100.json``.

Run from the repository root: ``python results/gpu/fleet-lease14/summarize.py``. Reads the graph's closed loops
(``NAME/lifecycle.json``: the ``sustainN`` / ``sustainNxC`` steps of :mod:`benchmarks.lifecycle` run by
``benchmarks/fleet_gpu.sh burst``), vLLM's per-request timings beside them (``NAME/engine_timings.jsonl.gz``, one
JSON row per request in the order the requests ended), the window path's lines of the servers' logs and the engine
alone's result (``engine/engine_profile.b16.json``).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
#: server -> its lifecycle runs, in the order they ran; each server: configs/h200.yaml (bf16) with
#: streams.workers=3 model.engine_args.max_num_seqs=256 model.warmup_decode_sweep=256
#: model_replica.max_ongoing_requests=256 decoder.autoscaling_config.min_replicas=6, and on ``wa``
#: model.window_cascade_attention=true
SERVERS = {"off": ["off", "off16"], "wa": ["wa"]}
KEYS = ("concurrency", "sent", "statuses", "counted", "windows_per_s", "windows_per_s_by_latency", "latency_mean_s",
        "latency_p95_s", "drain_s", "ended_per_10s", "server_split_mean_ms", "ran_out_of_windows")
ENGINE_KEYS = ("frontend_ms", "engine_queue_ms", "prefill_ms", "decode_ms", "first_token_latency_ms",
               "preprocess_wait_ms", "prefill_gate_ms")
WINDOW_LINE = re.compile(r"window attention: (\d+) of (\d+) engine steps, ([\d.]+) windows per step")


def _engine_rows(server: str) -> list[dict[str, Any]]:
    """The server's rows of the steps' questions: 256 tokens after a window's prompt (~8,150 tokens; the start's
    warm-up rows have 16 tokens after a window, or up to 256 after a 53-token prompt)."""
    with gzip.open(HERE / server / "engine_timings.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r["completion_tokens"] == 256 and r["prompt_tokens"] > 1000]


def _engine_means(rows: list[dict[str, Any]], step: dict[str, Any]) -> dict[str, Any]:
    """Means over one step's engine rows and, for a 1-question step, the time the replica saw that vLLM's engine
    core did not: ``replica - frontend_ms - (engine_queue_ms + prefill_ms + decode_ms)`` (the request's way into
    the engine core, and its outputs' way back to the replica), and the same up to the first token
    (``ttft - frontend_ms - (engine_queue_ms + prefill_ms)``). The replica's ``ttft`` and ``replica`` are means over
    the counted windows, the engine's over all the step's requests."""
    out: dict[str, Any] = {"rows": len(rows)}
    out.update({k: round(statistics.mean(r.get(k, 0.0) for r in rows)) for k in ENGINE_KEYS})
    out["cached_fraction"] = round(sum(r["cached_tokens"] > 0 for r in rows) / len(rows), 3)
    split = step["server_split_mean_ms"]
    if step["questions_per_window"] == 1 and split:
        core = out["engine_queue_ms"] + out["prefill_ms"]
        out["replica_not_engine_core_to_first_token_ms"] = round(split["ttft"] - out["frontend_ms"] - core)
        out["replica_not_engine_core_ms"] = round(split["replica"] - out["frontend_ms"] - core - out["decode_ms"])
    return out


def _window_lines(log: Path) -> list[dict[str, float]]:
    with gzip.open(log, "rt", errors="replace") as f:
        return [{"planned_steps": int(m.group(1)), "engine_steps": int(m.group(2)),
                 "windows_per_planned_step": float(m.group(3))} for m in WINDOW_LINE.finditer(f.read())]


def main() -> None:
    steps: dict[str, Any] = {}
    for server, runs in SERVERS.items():
        rows = _engine_rows(server)
        at = 0
        for run in runs:
            for s in json.loads((HERE / run / "lifecycle.json").read_text())["steps"]:
                n = s["sent"] * s["questions_per_window"]
                steps[f"{run}:{s['step']}"] = {**{k: s[k] for k in KEYS}, "engine": _engine_means(rows[at:at + n], s)}
                at += n
        assert at == len(rows), f"{server}: {len(rows)} engine rows, the steps sent {at} questions"
    rate = {k: v["windows_per_s_by_latency"] for k, v in steps.items()}
    counted = {k: v["windows_per_s"] for k, v in steps.items()}
    alone = json.loads((HERE / "engine" / "engine_profile.b16.json").read_text())
    lease13 = json.loads((HERE.parent / "fleet-lease13" / "fleet_window_attention_h100.json").read_text())["steps"]
    out = {
        "lease": "fourteenth, 2026-12-05, session 25",
        "device": alone["versions"]["gpu"],
        "note": "Dummy weights (random: only the timings count), vLLM 0.24.0, one H100 for every row (the device "
                "tool gave an H100 for nvidia-h200). The graph: configs/h200.yaml with streams.workers=3 "
                "model.engine_args.max_num_seqs=256 model.warmup_decode_sweep=256 "
                "model_replica.max_ongoing_requests=256 decoder.autoscaling_config.min_replicas=6, and "
                "model.window_cascade_attention=true on 'wa'; 256 tokens per question (ignore_eos), the model "
                "card's sampling; 64 distinct 10-s windows in flight (16 in off16), the first sends spread over "
                "30 s (10 s), 110 s (100 s) of sending, the rate read after 45 s (40 s). Rates by Little's law "
                "(in flight / mean latency); 'counted' beside them.",
        "commands": [
            "bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4",
            "COSMOS_SERVE_ENGINE_TIMINGS=/tmp/et_off.jsonl bash benchmarks/fleet_gpu.sh graph-start "
            "streams.workers=3 model.engine_args.max_num_seqs=256 model.warmup_decode_sweep=256 "
            "model_replica.max_ongoing_requests=256 decoder.autoscaling_config.min_replicas=6",
            "SUSTAIN_STAGGER_S=30 SUSTAIN_S=110 SUSTAIN_WARMUP_S=45 bash benchmarks/fleet_gpu.sh burst off "
            "sustain1,sustain3",
            "SUSTAIN_STAGGER_S=10 SUSTAIN_S=100 SUSTAIN_WARMUP_S=40 bash benchmarks/fleet_gpu.sh burst off16 "
            "sustain1x16; bash benchmarks/fleet_gpu.sh stop",
            "the same two with model.window_cascade_attention=true (server 'wa', /tmp/et_wa.jsonl), then stop",
            "bash benchmarks/gpu_machine.sh engine b16 --input patches --windows-dir /tmp/xwin --clip "
            ".gpu-clips/intel_one-by-one-person-detection.mp4 --encoder-cache-tokens 131072 --bursts sustained "
            "--profile-iters 0 --sustain-s 60 --sustain-warmup-s 25 --sustain-stagger-s 15 --sustain-points 1x64 "
            "--engine-args '{\"max_num_seqs\":256}'",
        ],
        "steps": steps,
        "ratios": {
            "off_3_vs_1": round(rate["off:sustain3"] / rate["off:sustain1"], 3),
            "off_3_vs_1_counted": round(counted["off:sustain3"] / counted["off:sustain1"], 3),
            "wa_3_vs_1": round(rate["wa:sustain3"] / rate["wa:sustain1"], 3),
            "wa_3_vs_1_counted": round(counted["wa:sustain3"] / counted["wa:sustain1"], 3),
            "wa_vs_off_3_questions": round(rate["wa:sustain3"] / rate["off:sustain3"], 3),
            "wa_vs_off_3_questions_counted": round(counted["wa:sustain3"] / counted["off:sustain3"], 3),
            "wa_vs_off_1_question": round(rate["wa:sustain1"] / rate["off:sustain1"], 3),
            # the same config on two H100 machines (thirteenth lease against this one): the machines' spread
            "wa_vs_lease13_wa_1_question": round(rate["wa:sustain1"] / lease13["wa:sustain1"]
                                                 ["windows_per_s_by_latency"], 3),
            "wa_vs_lease13_wa_3_questions": round(rate["wa:sustain3"] / lease13["wa:sustain3"]
                                                  ["windows_per_s_by_latency"], 3),
        },
        "window_path_log_lines": {"off": _window_lines(HERE / "off" / "fleet_graph_serve.log.gz"),
                                  "wa": _window_lines(HERE / "wa" / "fleet_graph_serve.log.gz")},
        "engine_alone_bf16_1x64": {"engine_start_s": alone["engine_start_s"],
                                   **alone["bursts"]["sustained_q1x64"]},
        "not_run": "the engine alone with fp8 (its call ran out of device time while warming up: "
                   "engine/engine_profile.f8.log); the profiled prefill steps",
    }
    (HERE / "fleet_window_attention_control_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["ratios"], indent=1))
    for k, v in steps.items():
        print(k, v["engine"])


if __name__ == "__main__":
    main()
