"""Sums up the seventeenth lease into ``fleet_lease17_h100.json``.

Run from the repository root: ``python results/gpu/fleet-lease17/summarize.py``. Reads:

- the graph's three servers (``a``, ``b``, ``c``: ``NAME/lifecycle.json``, ``NAME/engine_timings.jsonl.gz``,
  ``NAME/loop_lag.jsonl.gz``, ``NAME/stacks.tgz``), summed up by :func:`benchmarks.replica_gap.summarize`;
- the fourteenth lease's servers again, whose ``replica_not_engine_core_ms`` (2,427 ms) is recomputed over the
  counted windows' own rows (:func:`benchmarks.replica_gap.counted_split`), and the thirteenth and tenth leases'
  "time outside vLLM's request" the same way;
- vLLM's engine alone, bf16 (``engine/engine_profile.b16p.json``), beside the sixteenth lease's fp8 profile of the
  same 4 prefill steps (``../fleet-lease16/engine/engine_profile.f8p.json``), its kernels sorted by
  ``../fleet-lease16/summarize.py``'s ``kind``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import replica_gap  # noqa: E402
from benchmarks.fleet_results import GRAPH  # noqa: E402

STEP_TOKENS = re.compile(r"execute_context_\d+\((\d+)\)_generation")


def _lease16_kind() -> Any:
    spec = importlib.util.spec_from_file_location("lease16_summarize", HERE.parent / "fleet-lease16" / "summarize.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kind


def _profile(json_path: Path) -> dict[str, Any]:
    """One profiled run's GPU busy time split by kernel kind (ms, and ms per 1,000 scheduled prefill tokens). The
    JSON lists the 25 longest kernels; the rest of the busy time is ``unlisted``."""
    kind = _lease16_kind()
    prof = json.loads(json_path.read_text())["profile"]
    table = json_path.with_name(json_path.name.replace(".json", ".kernels.txt")).read_text()
    tokens = sum(int(n) for n in STEP_TOKENS.findall(table))
    shares: dict[str, float] = {}
    for k in prof["kernels"]:
        shares[kind(k["name"])] = shares.get(kind(k["name"]), 0.0) + k["ms"]
    shares["unlisted"] = prof["busy_ms"] - sum(shares.values())
    gemm = shares.get("fp8_gemm", 0.0) + shares.get("other_gemm", 0.0)
    elementwise = sum(v for k, v in shares.items() if k in ("activation_quant_fused", "rest", "unlisted"))
    return {"scheduled_tokens": tokens, "busy_ms": prof["busy_ms"],
            "kernel_ms": {k: round(v, 1) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
            "gemm_ms": round(gemm, 1), "attention_ms": round(shares.get("attention", 0.0), 1),
            "not_gemm_not_attention_ms": round(elementwise, 1),
            "busy_ms_per_1000_tokens": round(1000 * prof["busy_ms"] / tokens, 2),
            "gemm_ms_per_1000_tokens": round(1000 * gemm / tokens, 2),
            "not_gemm_not_attention_ms_per_1000_tokens": round(1000 * elementwise / tokens, 2)}


def _window_rows(path: Path) -> list[dict[str, Any]]:
    """A server's engine rows of the steps' questions: 256 tokens after a window's prompt (the start's warm-up rows
    have 16 tokens after a window, or a 53-token prompt)."""
    with gzip.open(path, "rt") as f:
        return [r for r in map(json.loads, f) if r["completion_tokens"] == 256 and r["prompt_tokens"] > 1000]


def _engine_side_ms(rows: list[dict[str, Any]]) -> float:
    """The mean of ``frontend_ms + engine_queue_ms + prefill_ms + decode_ms`` over ``rows`` (ms)."""
    return sum(r["frontend_ms"] + r["engine_queue_ms"] + r["prefill_ms"] + r["decode_ms"] for r in rows) / len(rows)


def _lease14_recomputed() -> dict[str, Any]:
    """The fourteenth lease's 1-question steps: the replica's time less the engine core's, over all the step's
    rows (as it was published) and over the counted windows' own rows."""
    l14 = HERE.parent / "fleet-lease14"
    published = json.loads((l14 / "fleet_window_attention_control_h100.json").read_text())["steps"]
    out: dict[str, Any] = {}
    for server, runs in {"off": ["off", "off16"], "wa": ["wa"]}.items():
        rows = _window_rows(l14 / server / "engine_timings.jsonl.gz")
        at = 0
        for run in runs:
            for step in json.loads((l14 / run / "lifecycle.json").read_text())["steps"]:
                n = step["sent"] * step["questions_per_window"]
                split = replica_gap.counted_split(rows[at:at + n], step)
                at += n
                if split is not None:
                    out[f"{run}:{step['step']}"] = {
                        "published_over_all_rows_ms": published[f"{run}:{step['step']}"]["engine"]
                        ["replica_not_engine_core_ms"],
                        "over_counted_rows_ms": split["replica_not_engine_core_ms"],
                        "decode_ms_all_rows": published[f"{run}:{step['step']}"]["engine"]["decode_ms"],
                        "decode_ms_counted_rows": split["decode_ms"]}
    return out


def _outside_vllm_recomputed(lease: str, runs: tuple[str, ...]) -> dict[str, Any]:
    """An earlier lease's "time outside vLLM's request" (the thirteenth lease's README: 2.45 s bf16, 2.32 s fp8;
    the tenth's, on an H200: 2.3 s fp8, 0.6 s bf16): the loop's mean latency less the mean of ``frontend_ms +
    engine_queue_ms + prefill_ms + decode_ms``, over all the step's rows (as published) and over the counted
    windows' own rows (ms; 1-question steps)."""
    out: dict[str, Any] = {}
    for run in runs:
        folder = HERE.parent / lease / run
        steps = json.loads((folder / "lifecycle.json").read_text())["steps"]
        rows = _window_rows(folder / "engine_timings.jsonl.gz")
        sent = [step["sent"] * step["questions_per_window"] for step in steps]
        at = len(rows) - sum(sent)
        for step, n in zip(steps, sent, strict=True):
            mine, everyone = replica_gap.counted_rows(rows[at:at + n], step), rows[at:at + n]
            at += n
            if mine is None:
                continue
            out[f"{run}:{step['step']}"] = {
                "over_all_rows_ms": round(1000 * step["latency_mean_s"] - _engine_side_ms(everyone)),
                "over_counted_rows_ms": round(1000 * step["latency_mean_s"] - _engine_side_ms(mine))}
    return out


def _idle_loop_stacks(folder: Path) -> dict[str, int]:
    """The replica's SIGUSR1 stack dumps: how many showed its user-code event-loop thread, and in how many that
    thread ran no Python frame above Ray Serve's ``_run_user_code_event_loop`` (the loop's C code: waiting for I/O
    or between callbacks, not inside a Python callback such as vLLM's output handler or a generator)."""
    with tarfile.open(folder / "stacks.tgz") as tar:
        text = "".join(tar.extractfile(m).read().decode(errors="replace")  # type: ignore[union-attr]
                       for m in tar.getmembers() if m.isfile())
    blocks = re.findall(r"Thread 0x[0-9a-f]+ \(most recent call first\):\n((?:  File .*\n)+)", text)
    loop = [b for b in blocks if "_run_user_code_event_loop" in b]
    return {"loop_thread_stacks": len(loop),
            "no_python_frame_above_the_loop": sum("_run_user_code_event_loop" in b.split("\n")[0] for b in loop)}


def main() -> None:
    servers = {name: replica_gap.summarize(HERE / name) for name in ("a", "b", "c")}
    b16 = _profile(HERE / "engine" / "engine_profile.b16p.json")
    f8 = _profile(HERE.parent / "fleet-lease16" / "engine" / "engine_profile.f8p.json")
    rate = {f"{s}:{k}": v["windows_per_s_by_latency"] for s, steps in servers.items() for k, v in steps.items()}
    counted = {f"{s}:{k}": v["windows_per_s"] for s, steps in servers.items() for k, v in steps.items()}
    out = {
        "lease": "seventeenth, 2026-12-06, session 29",
        "device": json.loads((HERE / "engine" / "engine_profile.b16p.json").read_text())["versions"]["gpu"],
        "note": "Dummy weights (random: only the timings count), vLLM 0.24.0, one H100 for every row. The graph: "
                f"configs/h200.yaml with {GRAPH}; 'b' and 'c' add model.engine_args.stream_interval=16. 256 tokens "
                "per question (ignore_eos), the model card's sampling; 64 distinct 10-s windows in flight, the first "
                "sends spread over 30 s, 110 s of sending, the rate read after 45 s. Rates by Little's law (in "
                "flight / mean latency), 'counted' beside them.",
        "commands": [
            "bash benchmarks/gpu_machine.sh prep 900 .gpu-clips/intel_one-by-one-person-detection.mp4",
            "COSMOS_SERVE_STACKS_ON_SIGUSR1=1 COSMOS_SERVE_ENGINE_TIMINGS=/tmp/et_a.jsonl bash "
            f"benchmarks/fleet_gpu.sh graph-start {GRAPH}",
            "STACKS_AT_S=75,78,81,84,87,90 SUSTAIN_STAGGER_S=30 SUSTAIN_S=110 SUSTAIN_WARMUP_S=45 bash "
            "benchmarks/fleet_gpu.sh burst a sustain1; bash benchmarks/fleet_gpu.sh stop",
            "the same with model.engine_args.stream_interval=16 and /tmp/et_b.jsonl: server 'b'; then stop",
            "the same as 'b' without the stacks (/tmp/et_c.jsonl): server 'c', burst c sustain1,sustain3; then stop",
            "bash benchmarks/gpu_machine.sh engine b16p --input patches --windows-dir /tmp/xwin --clip "
            ".gpu-clips/intel_one-by-one-person-detection.mp4 --encoder-cache-tokens 131072 --bursts profiled "
            "--profile-delay 0 --profile-iters 4 --engine-args '{\"max_num_seqs\":256}'",
            "python -m benchmarks.replica_gap results/gpu/fleet-lease17/a results/gpu/fleet-lease17/b "
            "results/gpu/fleet-lease17/c",
        ],
        "servers": servers,
        "stacks": {name: _idle_loop_stacks(HERE / name) for name in ("a", "b")},
        "lease14_replica_not_engine_core_recomputed": _lease14_recomputed(),
        "lease13_outside_vllm_recomputed": _outside_vllm_recomputed("fleet-lease13",
                                                                    ("wa", "wa_f8", "wa96", "wa96_f8")),
        "lease10_outside_vllm_recomputed_h200": _outside_vllm_recomputed("fleet-lease10", ("stag", "stag_fp8")),
        "ratios": {
            "stream_interval_16_vs_1": round(rate["b:sustain1"] / rate["a:sustain1"], 3),
            "stream_interval_16_vs_1_counted": round(counted["b:sustain1"] / counted["a:sustain1"], 3),
            "c_3_vs_1": round(rate["c:sustain3"] / rate["c:sustain1"], 3),
            "c_3_vs_1_counted": round(counted["c:sustain3"] / counted["c:sustain1"], 3),
        },
        "prefill_profile": {
            "bf16": b16, "fp8_lease16": f8,
            "fp8_vs_bf16_busy_per_token": round(b16["busy_ms_per_1000_tokens"] / f8["busy_ms_per_1000_tokens"], 3),
            "fp8_vs_bf16_gemm_per_token": round(b16["gemm_ms_per_1000_tokens"] / f8["gemm_ms_per_1000_tokens"], 3),
            "fp8_extra_not_gemm_not_attention_ms_per_1000_tokens": round(
                f8["not_gemm_not_attention_ms_per_1000_tokens"] - b16["not_gemm_not_attention_ms_per_1000_tokens"], 2),
            "fp8_vs_bf16_busy_without_the_extra": round(
                b16["busy_ms_per_1000_tokens"] / (f8["busy_ms_per_1000_tokens"]
                                                  - f8["not_gemm_not_attention_ms_per_1000_tokens"]
                                                  + b16["not_gemm_not_attention_ms_per_1000_tokens"]), 3),
        },
    }
    (HERE / "fleet_lease17_h100.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("ratios", "stacks", "lease14_replica_not_engine_core_recomputed",
                                        "lease13_outside_vllm_recomputed", "lease10_outside_vllm_recomputed_h200")},
                     indent=1))
    print(json.dumps({k: v for k, v in out["prefill_profile"].items() if not isinstance(v, dict)}, indent=1))
    for name, steps in servers.items():
        for step, v in steps.items():
            print(name, step, v["counted_split"], v["gap"]["gap_mean_ms"], v["loop_lag"])


if __name__ == "__main__":
    main()
