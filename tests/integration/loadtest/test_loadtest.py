"""The load tester end to end: real cameras against the CPU app, and a sweep against a server of known capacity."""

import csv
import json

import pytest

from loadtest.__main__ import main
from loadtest.report import read_csv
from loadtest.statistics import Criteria, summarize


def test_four_cameras_against_the_cpu_app_and_results_agree_with_the_csv(cpu_app, data_dir, tmp_path):
    out = tmp_path / "run"
    car, bottle = data_dir / "intel_car-detection.mp4", data_dir / "intel_bottle-detection.mp4"
    rc = main([
        "--target", cpu_app, "--cameras", "4", "--source", str(car), "--source", str(bottle),
        "--window-s", "2", "--fps", "2", "--max-tokens", "4", "--ignore-eos", "--duration-s", "6",
        "--request-timeout-s", "60", "--drain-s", "60", "--out", str(out), "--no-live",
    ])
    assert rc in (0, 1)  # keeps up or not: a timing fact, recorded, not asserted
    doc = json.loads((out / "results.json").read_text())
    records = read_csv(out / "requests.csv")
    # 4 cameras, phases 0 / 0.5 / 1 / 1.5 s, one request per 2-s window for 6 s → 3 windows each
    assert len(records) == 12 and sorted({r.camera_id for r in records}) == ["cam-0", "cam-1", "cam-2", "cam-3"]
    assert doc["summary"]["errors"] == 0, [r.error_message for r in records if not r.ok]
    assert all(r.ok and r.status == 200 for r in records)
    # every window was trimmed to exactly 2 s at 2 fps by the real server, remuxed or re-encoded
    assert {r.num_frames for r in records} == {4}
    assert {r.completion_tokens for r in records} == {4}  # ignore_eos fixed the length
    assert all(r.decode_ms is not None and r.model_ms is not None for r in records)
    assert all(r.ttft_ms is not None and 0 < r.ttft_ms <= r.latency_ms for r in records)
    assert all(r.freshness_s > 0 for r in records)
    methods = {m for info in doc["windows"].values() for m in info["methods"]}
    assert methods == {"remux", "reencode"}  # sparse keyframes (every 4.8 s) force some re-encodes
    # results.json is exactly what the CSV recomputes to
    again = summarize(records, Criteria(**doc["summary"]["criteria"]))
    assert again["summary"] == doc["summary"] and again["cameras"] == doc["cameras"]
    assert doc["summary"]["qps"] == pytest.approx(12 / doc["summary"]["measured_span_s"])
    for name in ("report.png", "latency_cdf.png", "timeline.png", "freshness.png"):
        assert (out / name).stat().st_size > 10_000
    # --report re-renders from the saved run
    assert main(["--report", str(out / "results.json"), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "report.png").exists()


def test_server_config_limits_stop_a_run_before_it_sends(tmp_path, capsys):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("applications:\n  - name: a\n    import_path: serve_app.app:build_app\n"
                   "    args: {limits: {max_tokens: 16}}\n")
    rc = main(["--target", "http://127.0.0.1:9", "--config", str(cfg), "--max-tokens", "64", "--ignore-eos",
               "--out", str(tmp_path / "run"), "--no-live"])
    assert rc == 2 and not (tmp_path / "run").exists()
    err = capsys.readouterr().err
    assert "max_tokens 64 exceeds the server limit 16" in err and "allow_ignore_eos" in err


def test_sweep_finds_the_camera_count_a_server_of_known_capacity_keeps_up_with(tmp_path):
    # The test double serves one request at a time in 200 ms: 5 requests/s. With 1-s windows,
    # 4 cameras (4 req/s) keep up; 8 cameras (8 req/s) build a queue that grows 0.6 s per second.
    out = tmp_path / "sweep"
    rc = main([
        "--target", "double", "--double-service-ms", "200", "--double-concurrency", "1",
        "--sweep", "2,4,8", "--window-s", "1", "--max-tokens", "4", "--duration-s", "5",
        "--sweep-pause-s", "0.2", "--out", str(out), "--no-live",
    ])
    assert rc == 0
    doc = json.loads((out / "results.json").read_text())
    levels = {lv["cameras"]: lv["summary"] for lv in doc["levels"]}
    assert sorted(levels) == [2, 4, 8]
    assert levels[4]["keeps_up"] and not levels[8]["keeps_up"]
    assert levels[8]["freshness_s"]["p95"] > doc["criteria"]["slo_s"] == 1.0
    assert doc["best_cameras"] == 4
    assert (out / "sweep.png").stat().st_size > 10_000
    assert (out / "cameras-008" / "results.json").exists()


def test_the_openai_mode_drives_the_chat_route_with_every_question_per_window(cpu_app, data_dir, tmp_path):
    out = tmp_path / "openai"
    rc = main([
        "--target", cpu_app, "--api", "openai", "--cameras", "1", "--source", str(data_dir / "intel_car-detection.mp4"),
        "--window-s", "2", "--max-tokens", "4", "--ignore-eos", "--duration-s", "4", "--all-questions",
        "--question", "Is anyone in danger?", "--question", "How many cars?",
        "--request-timeout-s", "60", "--drain-s", "60", "--out", str(out), "--no-live", "--no-plots",
    ])
    assert rc in (0, 1)  # keeps up or not: a timing fact, recorded, not asserted
    records = read_csv(out / "requests.csv")
    # the model name came from GET /v1/models; 2 windows (0 and 2 s) × 2 questions, all through /v1/chat/completions
    assert len(records) == 4 and all(r.ok and r.status == 200 for r in records), [r.error_message for r in records]
    assert sorted(r.question_index for r in records) == [0, 0, 1, 1]
    assert {r.completion_tokens for r in records} == {4}  # ignore_eos reached the engine through the chat route
    assert all(r.prompt_tokens and r.ttft_ms is not None and r.bytes_sent > 0 for r in records)
    doc = json.loads((out / "results.json").read_text())
    assert doc["settings"]["api"] == "openai" and doc["settings"]["model"] == "tiny-random-qwen2_5_vl"


def test_the_streams_mode_sweeps_cameras_with_several_questions_and_ignore_eos(cpu_app, tmp_path):
    out = tmp_path / "streams"
    rc = main([
        "--streams", "--target", cpu_app, "--file", "intel_car-detection.mp4", "--window-s", "2", "--fps", "2",
        "--max-tokens", "4", "--ignore-eos", "--question", "Anyone?", "--question", "How many cars?",
        "--duration-s", "12", "--warmup-s", "2", "--slo-s", "30", "--sweep", "1", "--sweep-pause-s", "0",
        "--out", str(out),
    ])
    assert rc in (0, 1)  # keeps up or not: a timing fact, recorded, not asserted
    doc = json.loads((out / "results.json").read_text())
    (level,) = doc["levels"]
    assert level["cameras"] == 1 and set(level["summary"]) >= {"keeps_up", "reasons", "drop_rate"}
    run = json.loads((out / level["results"]).read_text())
    with open(out / "cameras-001" / "answers.csv", newline="") as f:
        answers = list(csv.DictReader(f))  # random-weight answers may hold newlines and commas: read it as CSV
    questions = {row["question_index"] for row in answers}
    assert questions == {"0", "1"}, answers[:4]  # both questions answered about the windows
    assert run["total"]["answers_all_questions"] == len(answers) and run["total"]["answers"] >= 1
    assert all(float(row["ttft_ms"]) > 0 and float(row["decode_ms"]) >= 0 for row in answers)  # the server's timings
    assert run["total"]["server_ms"]["ttft_ms"]["p50"] > 0
    assert doc["best_cameras"] == (1 if level["summary"]["keeps_up"] else None)
