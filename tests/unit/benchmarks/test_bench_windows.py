"""The GPU bench's shared window files and plain-vLLM request body (no GPU needed)."""

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.gpu_serve import _engine_breakdown, query_body
from benchmarks.vllm_serve import chat_body
from benchmarks.workload import QUESTION, SYSTEM_PROMPT, cut_window_files, decode_frames, windows

CLIP = Path(__file__).resolve().parents[2] / "data" / "intel_car-detection.mp4"


def test_window_files_hold_exactly_one_window_each(tmp_path):
    wins = windows(CLIP, 2, 30.16)
    files = cut_window_files(wins, tmp_path, workers=2)
    assert [f.name for f in files] == ["win-000.mp4", "win-001.mp4"]
    for f in files:
        frames = decode_frames(f)
        # 10 s at 4 fps, sized by the Cosmos pixel budget: the reference workload's 40 frames of 420×756
        assert frames.shape == (40, 420, 756, 3) and frames.dtype == np.uint8
    # distinct windows, not the same bytes twice
    assert files[0].read_bytes() != files[1].read_bytes()


def test_both_sides_name_the_same_file_and_question(tmp_path):
    f = tmp_path / "win-000.mp4"
    body = chat_body("m", f, {"mm_processor_kwargs": {"device": "cuda"}})
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    parts = body["messages"][1]["content"]
    assert parts[0]["video_url"]["url"] == f"file://{f}" and parts[1]["text"] == QUESTION
    assert body["ignore_eos"] and body["max_tokens"] == 256 and body["mm_processor_kwargs"] == {"device": "cuda"}
    q = query_body(f)
    assert q["video_path"] == str(f) and q["question"] == QUESTION and q["max_tokens"] == 256


def test_engine_breakdown_keeps_only_the_asked_requests(tmp_path):
    rows = [{"request_id": "a", "completion_tokens": 256, "processor_ms": 10.0, "prefill_ms": 100.0},
            {"request_id": "b", "completion_tokens": 256, "processor_ms": 30.0, "prefill_ms": 300.0},
            {"request_id": "warm", "completion_tokens": 0, "processor_ms": 9999.0}]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    out = _engine_breakdown(path, {"b"})
    assert out["requests"] == 1 and out["processor_ms"]["p50"] == 30.0 and out["prefill_ms"]["mean"] == 300.0
    assert _engine_breakdown(path)["requests"] == 2  # a row with no completion tokens never counts


def test_engine_breakdown_splits_the_preprocessing_and_shows_the_gate_wait(tmp_path):
    rows = [{"request_id": "q1", "completion_tokens": 256, "processor_ms": 300.0, "prompt_build_ms": 40.0,
             "vllm_inputs_ms": 260.0, "prefill_gate_ms": 0.0},
            {"request_id": "q2", "completion_tokens": 256, "processor_ms": 310.0, "prompt_build_ms": 60.0,
             "vllm_inputs_ms": 250.0, "prefill_gate_ms": 2400.0}]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    out = _engine_breakdown(path)
    assert out["prompt_build_ms"]["mean"] == 50.0 and out["vllm_inputs_ms"]["mean"] == 255.0
    assert out["prefill_gate_ms"]["p95"] == 2280.0  # of 0 and 2,400 ms, interpolated


def test_a_serve_variant_overrides_the_config_it_names(tmp_path):
    """``--variant`` JSON reaches the model, engine, decode and deployment settings, and the result is valid."""
    import argparse

    from benchmarks.gpu_serve import _serve_args
    from serve_app.config import AppConfig

    root = Path(__file__).resolve().parents[3]  # not the working directory: pytest may run from anywhere
    args = argparse.Namespace(serve_config=str(root / "configs" / "h200.yaml"), checkpoint="ckpt",
                              windows_dir=str(tmp_path))
    cfg = _serve_args(args, {"decode": {"threads": 4}, "engine_args": {"max_num_batched_tokens": 32768},
                             "model": {"vision_input": "patches"}, "decoder": {"max_ongoing_requests": 3}})
    assert cfg["decode"]["threads"] == 4 and cfg["decode"]["fps"] == 4  # the rest of decode kept
    assert cfg["model"]["engine_args"]["max_num_batched_tokens"] == 32768
    assert cfg["model"]["engine_args"]["load_format"] == "dummy"
    assert cfg["model"]["engine_args"]["compilation_config"]["compile_mm_encoder"] is True  # the file's kept
    assert cfg["model"]["vision_input"] == "patches" and cfg["decoder"]["max_ongoing_requests"] == 3
    assert cfg["sources"]["allowed_roots"] == [str(tmp_path.resolve())]
    AppConfig.model_validate(cfg)


def test_each_phase_of_a_side_gets_its_own_windows():
    from benchmarks.workload import split_run

    files = list(range(1 + 2 + 5 + 3))
    run = split_run(files, single=2, inflight=5, warm_burst=3)
    assert run.warmup == [0] and run.single == [1, 2] and run.batch == [3, 4, 5, 6, 7]
    assert run.warm_burst == [8, 9, 10]
    phases = [run.warmup, run.warm_burst, run.single, run.batch]
    assert sorted(x for ph in phases for x in ph) == files  # every window once, none shared
    # without a warm burst the layout is the bench's old one, extra files unused
    plain = split_run(list(range(12)), single=2, inflight=5)
    assert plain.warm_burst == [] and plain.batch == [3, 4, 5, 6, 7]
    with pytest.raises(ValueError, match="needs 11"):
        split_run(list(range(10)), single=2, inflight=5, warm_burst=3)


def test_batch_figures_time_from_the_first_send_and_refuse_an_unfinished_request():
    from benchmarks.workload import batch_figures
    from loadtest.records import RequestRecord

    def rec(sent_s, first_s, done_s, tokens=4):
        r = RequestRecord(seq=0, camera_id="c", window_index=0, warmup=False, scheduled_s=sent_s, sent_s=sent_s,
                          window_end_s=sent_s, deadline_s=sent_s + 60, first_token_s=first_s, done_s=done_s)
        r.completion_tokens = tokens
        return r

    wall, tokens, ttft, e2e = batch_figures([rec(10.0, 10.5, 12.0), rec(10.2, None, 13.0)])
    assert (wall, tokens, e2e) == (3.0, 8, [2.0, 3.0]) and ttft[0] == 0.5 and ttft[1] != ttft[1]  # nan: no token
    with pytest.raises(ValueError, match="1 of 2 requests never finished"):
        batch_figures([rec(10.0, 10.5, 12.0), rec(10.2, None, None)])
