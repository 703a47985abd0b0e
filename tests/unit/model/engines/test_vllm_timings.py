"""The vLLM engine's per-request timings row (serve_app.model.engines.vllm_timings)."""

from __future__ import annotations

import asyncio
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from serve_app.model.engines.base import GenerationRequest
from serve_app.model.engines.vllm_timings import timings_row
from serve_app.model.prompt import render_prompt
from serve_app.protocol import SamplingOptions


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


def test_the_row_says_when_the_replica_received_the_first_and_the_last_output():
    """Against vLLM's own ``decode_ms`` (engine core stamps): the replica's view of the same decode."""
    row = timings_row("q1", 0.5, 1.0, {}, None, 256, 8129, received=[2.25, 21.0])
    assert row["received_first_ms"] == pytest.approx(1250.0) and row["received_last_ms"] == pytest.approx(20000.0)
    for received in (None, []):  # no output came (failed or aborted before the first)
        assert "received_last_ms" not in timings_row("q2", 0.5, 1.0, {}, None, 0, 8129, received=received)


class _TwoOutputsLLM:
    """Stands in for vLLM's AsyncLLM: a first output, then the finished one ``gap_s`` later."""

    errored = False

    def __init__(self, gap_s: float) -> None:
        self.gap_s = gap_s

    async def generate(self, prompt, params, request_id, prompt_text=None):
        for finished in (False, True):
            if finished:
                await asyncio.sleep(self.gap_s)
            comp = SimpleNamespace(text="a", token_ids=[1], finish_reason="length" if finished else None)
            yield SimpleNamespace(prompt_token_ids=[0] * 8, num_cached_tokens=0, outputs=[comp], metrics=None,
                                  finished=finished)


def test_the_engine_writes_when_its_generator_received_the_first_and_last_output(monkeypatch, tmp_path):
    from serve_app.config import ModelConfig
    from serve_app.model.engines import vllm_engine

    dead = type("EngineDeadError", (Exception,), {})  # generate() imports vLLM's own; none without vLLM
    monkeypatch.setitem(sys.modules, "vllm.v1.engine.exceptions", SimpleNamespace(EngineDeadError=dead))
    monkeypatch.setattr(vllm_engine, "sampling_params", lambda s: None)
    engine = vllm_engine.VLLMEngine(ModelConfig(backend="vllm", preprocess_threads=0))
    engine.llm = _TwoOutputsLLM(gap_s=0.05)
    engine._timings_path = str(tmp_path / "timings.jsonl")
    request = GenerationRequest("r1", np.zeros((4, 56, 84, 3), np.uint8), 4.0, render_prompt("q", "s"),
                                SamplingOptions(8, 0.6, 0.95, 1.05))

    async def drain():
        return [c async for c in engine.generate(request)]

    chunks = asyncio.run(drain())
    assert chunks[-1].finished
    [row] = [json.loads(line) for line in (tmp_path / "timings.jsonl").read_text().splitlines()]
    assert 0 <= row["received_first_ms"] < row["received_last_ms"]
    assert row["received_last_ms"] - row["received_first_ms"] >= 45  # the finished output came 50 ms later
