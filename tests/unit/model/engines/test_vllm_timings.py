"""The vLLM engine's per-request timings row (serve_app.model.engines.vllm_timings)."""

from __future__ import annotations

import pytest

from serve_app.model.engines.vllm_timings import timings_row


def test_the_engine_timings_row_carries_the_prefix_cache_hits():
    row = timings_row("r1", 0.0, 0.002, {}, None, 16, 8133, cached_tokens=8112)
    assert row["cached_tokens"] == 8112 and row["prompt_tokens"] == 8133 and row["frontend_ms"] == 2.0
    assert "cached_tokens" not in timings_row("r2", 0.0, 0.0, {}, None, 16, 8133)  # unknown: left out


def test_the_preprocessing_is_split_into_the_prompt_and_vllms_input_processing():
    stage = {"thread_start": 1.0, "prompt_built": 1.05, "processed": 1.3, "thread_end": 1.301, "pixel_bytes": 76.0}
    row = timings_row("q2", 0.5, 1.4, stage, None, 256, 8129)
    assert row["preprocess_wait_ms"] == pytest.approx(500.0)
    assert row["processor_ms"] == pytest.approx(300.0)  # the whole thread's work, as in earlier result files
    assert row["prompt_build_ms"] == pytest.approx(50.0) and row["vllm_inputs_ms"] == pytest.approx(250.0)
    assert row["handoff_prep_ms"] == pytest.approx(1.0) and row["pixel_bytes"] == 76.0



def test_the_row_says_when_the_patchify_came_from_another_question_of_the_clip():
    stage = {"thread_start": 1.0, "prompt_built": 1.001, "processed": 1.03, "thread_end": 1.031}
    assert timings_row("q2", 0.5, 1.4, {**stage, "patchify_reused": 1.0}, None, 256, 8129)["patchify_reused"] is True
    assert timings_row("q1", 0.5, 1.4, {**stage, "patchify_reused": 0.0}, None, 256, 8129)["patchify_reused"] is False
    assert "patchify_reused" not in timings_row("hf", 0.5, 1.4, stage, None, 256, 8129)  # no table patchify
