"""benchmarks/fleet_results.py: a lease's camera levels, loop steps, server configs and GPU tests, read one way.

The files are written here in the shapes ``loadtest --streams``, ``benchmarks.lifecycle``, ``fleet_gpu.sh
graph-start`` and pytest's ``--junitxml`` give them; one test also reads a committed lease's files.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fleet_results import (
    STEP_KEYS,
    camera_level,
    camera_limits,
    engine_busy_spans,
    gpu_tests,
    loop_step,
    max_num_seqs,
)

ROOT = Path(__file__).resolve().parents[3]


def _level(cameras: int, p95_s: float) -> dict[str, Any]:
    keeps_up = p95_s <= 3.0
    return {"cameras": cameras, "results": [],
            "summary": {"keeps_up": keeps_up, "reasons": [] if keeps_up else [f"p95 freshness {p95_s} s > SLO 3 s"],
                        "freshness_growth_s_per_s": -0.001, "drop_rate": 0.0},
            "total": {"answers_per_s": cameras / 10, "freshness_s_p50": p95_s - 0.3, "freshness_s_p95": p95_s,
                      "windows_cut": cameras * 6, "dropped_total": 0,
                      "server_ms": {"ttft_ms": {"p50": 450.0}, "model_ms": {"p50": 2500.0, "p95": 2800.0}}}}


def _step(sent: int, windows_per_s: float) -> dict[str, Any]:
    return {"questions_per_window": 3, "sent": sent, "statuses": {"200": sent}, "counted": sent // 2,
            "windows_per_s": windows_per_s, "windows_per_s_by_latency": round(windows_per_s + 0.081, 3),
            "answers_per_s": 3 * windows_per_s, "latency_mean_s": 26.1, "latency_p95_s": 27.0,
            "ended_per_10s": [4, 25], "ran_out_of_windows": False, "server_split_mean_ms": {"ttft": 1329.7},
            "drain_s": 4.8}


def _loop(folder: Path, saved: dict[str, Any], logged: dict[str, Any], step: str = "sustain3") -> Path:
    folder.mkdir()
    (folder / "lifecycle.json").write_text(json.dumps({"steps": [saved]}))
    (folder / "burst.log").write_text(f"serve: app ready\n== burst x rc=0\n== {step}: {json.dumps(logged)}\n")
    return folder


def test_a_level_gives_its_verdict_freshness_and_the_servers_split(tmp_path: Path) -> None:
    path = tmp_path / "b16_q3_9.json"
    path.write_text(json.dumps({"kind": "streams", "levels": [_level(9, 3.605)]}))
    level = camera_level(path)
    assert (level["cameras"], level["keeps_up"], level["freshness_s_p95"]) == (9, False, 3.605)
    assert level["reasons"] == ["p95 freshness 3.605 s > SLO 3 s"]
    assert (level["ttft_ms_p50"], level["model_ms_p50"], level["model_ms_p95"]) == (450.0, 2500.0, 2800.0)


def test_a_file_with_two_levels_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"levels": [_level(8, 2.9), _level(9, 3.6)]}))
    with pytest.raises(ValueError, match="2 levels, expected one"):
        camera_level(path)


def test_camera_limits_bound_each_server_between_its_levels() -> None:
    levels = {"b16_8": {"cameras": 8, "keeps_up": True}, "b16_9": {"cameras": 9, "keeps_up": False},
              "b16_7": {"cameras": 7, "keeps_up": True}, "s8_18": {"cameras": 18, "keeps_up": False},
              "s8_24": {"cameras": 24, "keeps_up": False}, "s8b_16": {"cameras": 16, "keeps_up": True}}
    kept, failed = camera_limits(levels, ["b16", "s8"])
    assert kept == {"b16": 8, "s8": None}  # "s8b_16" is another server's level, not s8's
    assert failed == {"b16": 9, "s8": 18}


def test_a_loop_step_keeps_its_summary_when_the_log_agrees(tmp_path: Path) -> None:
    step = _step(271, 2.369)
    summary = loop_step(_loop(tmp_path / "b16n256", step, step), "sustain3")
    assert tuple(summary) == STEP_KEYS
    assert (summary["sent"], summary["windows_per_s"], summary["windows_per_s_by_latency"]) == (271, 2.369, 2.45)
    assert "drain_s" not in summary


def test_a_loop_step_whose_log_disagrees_is_refused(tmp_path: Path) -> None:
    folder = _loop(tmp_path / "b16n128", _step(238, 1.831), _step(238, 1.9))
    with pytest.raises(ValueError, match="disagree on sustain3"):
        loop_step(folder, "sustain3")


def test_a_step_the_log_does_not_name_is_refused(tmp_path: Path) -> None:
    folder = _loop(tmp_path / "s8", _step(238, 1.831), _step(238, 1.831), step="sustain1")
    with pytest.raises(ValueError, match="0 '== sustain3:' lines"):
        loop_step(folder, "sustain3")


def test_max_num_seqs_is_read_from_the_derived_config(tmp_path: Path) -> None:
    config = tmp_path / "fleet_graph_config.yaml"
    config.write_text("applications:\n  - args:\n      model:\n        engine_args:\n          max_num_seqs: 128\n")
    assert max_num_seqs(config) == 128
    config.write_text("applications:\n  - args:\n      model:\n        engine_args:\n          dtype: bfloat16\n")
    with pytest.raises(ValueError, match=r"max_num_seqs set to \[\], expected one value"):
        max_num_seqs(config)


def test_gpu_tests_counts_cases_from_the_junit_file(tmp_path: Path) -> None:
    junit = tmp_path / "gpu-junit.xml"
    junit.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" errors="0" failures="1" '
                     'skipped="0" tests="2" time="101.3"><testcase classname="tests.gpu.a" name="test_one" '
                     'time="1.0"/><testcase classname="tests.gpu.a" name="test_two" time="2.0"><failure/>'
                     "</testcase></testsuite></testsuites>")
    result = gpu_tests(junit, "bash benchmarks/gpu_machine.sh tests")
    assert (result["tests"], result["failures"], result["time_s"]) == (2, 1, 101.3)
    assert result["cases"] == ["test_one", "test_two"]


def _stats(at: str, prompt: float, gen: float, running: int, waiting: int) -> str:
    return (f"\x1b[36m(ServeReplica:cosmos-video:VideoModel pid=1)\x1b[0m INFO 12-07 {at} [loggers.py:273] Engine 000: "
            f"Avg prompt throughput: {prompt} tokens/s, Avg generation throughput: {gen} tokens/s, Running: "
            f"{running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 50.0%\n")


@pytest.mark.parametrize("packed", [False, True])
def test_busy_spans_split_where_a_stats_line_counts_no_request(tmp_path: Path, packed: bool) -> None:
    text = ("serve: app ready\n" + _stats("19:13:06", 6000.0, 500.0, 4, 0) + _stats("19:13:16", 7000.0, 700.0, 6, 0)
            + _stats("19:13:26", 3000.0, 300.0, 0, 0) + _stats("19:13:36", 0.0, 0.0, 0, 0)
            + _stats("19:13:46", 20000.0, 1000.0, 180, 20) + _stats("19:13:56", 10000.0, 2000.0, 120, 0))
    log = tmp_path / "fleet_graph_serve.log.gz"
    log.write_bytes(gzip.compress(text.encode()) if packed else text.encode())
    assert engine_busy_spans(log) == [
        {"from": "12-07 19:13:06", "to": "12-07 19:13:16", "lines": 2, "running_max": 6, "waiting_max": 0,
         "prompt_tokens_per_s_mean": 6500.0, "generation_tokens_per_s_mean": 600.0},
        {"from": "12-07 19:13:46", "to": "12-07 19:13:56", "lines": 2, "running_max": 180, "waiting_max": 20,
         "prompt_tokens_per_s_mean": 15000.0, "generation_tokens_per_s_mean": 1500.0}]
    log.write_text("serve: app ready\n")
    assert engine_busy_spans(log) == []


def test_the_twenty_first_leases_files_read_as_committed() -> None:
    lease = ROOT / "results" / "gpu" / "fleet-lease21"
    summary = json.loads((lease / "fleet_lease21_h100.json").read_text())
    assert camera_level(lease / "cameras" / "b16_q3_9.json") == {
        k: v for k, v in summary["cameras"]["levels"]["b16_9"].items() if k not in ("server", "first")}
    assert loop_step(lease / "b16n128", "sustain3") | {"max_num_seqs": 128} == summary["steps"]["b16n128"]
    assert max_num_seqs(lease / "b16" / "fleet_graph_config.yaml") == 256
