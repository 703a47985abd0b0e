"""The CPU engine on the tiny random-weight checkpoint: stream shape, token counts, aborts, failures.

Random weights: the text is meaningless; only the stream's structure and counts are checked.
"""

import asyncio

import numpy as np
import pytest

from serve_app.config import ModelConfig
from serve_app.model.engines.base import GenerationRequest
from serve_app.model.engines.transformers_engine import TransformersEngine
from serve_app.model.prompt import render_prompt
from serve_app.model_facts import DEFAULT_SYSTEM_PROMPT
from serve_app.protocol import SamplingOptions


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    eng = TransformersEngine(ModelConfig(model_id=str(tiny_checkpoint), backend="transformers"))
    asyncio.run(eng.start())
    return eng


def request(rid: str, max_tokens: int) -> GenerationRequest:
    frames = np.random.default_rng(0).integers(0, 255, (2, 56, 56, 3), dtype=np.uint8)
    return GenerationRequest(
        rid, frames, 4.0, render_prompt("What happens?", DEFAULT_SYSTEM_PROMPT),
        SamplingOptions(max_tokens=max_tokens, temperature=0.0, top_p=1.0, repetition_penalty=1.0, ignore_eos=True),
    )


async def collect(engine, req, stop_after_text: int | None = None):
    chunks = []
    stream = engine.generate(req)
    async for c in stream:
        chunks.append(c)
        if stop_after_text is not None and sum(1 for x in chunks if x.text) >= stop_after_text:
            await stream.aclose()
            break
    return chunks


def test_stream_has_queue_time_prompt_tokens_deltas_and_one_final_chunk(engine):
    chunks = asyncio.run(collect(engine, request("t1", 6)))
    assert chunks[0].queue_ms is not None and chunks[0].queue_ms >= 0
    assert chunks[1].prompt_tokens is not None and chunks[1].prompt_tokens > 2  # 2 frames of 56²: 2 video tokens + text
    deltas = [c for c in chunks if c.text]
    assert deltas, "no text streamed"
    counts = [c.completion_tokens for c in deltas]
    assert counts == sorted(counts) and 1 <= counts[-1] <= 6  # running count of generated tokens
    final = chunks[-1]
    assert (final.finished, final.finish_reason, final.completion_tokens) == (True, "length", 6)
    assert final.prompt_tokens == chunks[1].prompt_tokens
    assert sum(c.finished for c in chunks) == 1
    assert engine.num_unfinished() == 0


def test_consumer_that_leaves_stops_generation(engine):
    chunks = asyncio.run(collect(engine, request("t2", 400), stop_after_text=1))
    assert not chunks[-1].finished
    assert engine.num_unfinished() == 0  # the request released the engine: generation was stopped
    again = asyncio.run(collect(engine, request("t3", 2)))  # and the engine still serves
    assert again[-1].finish_reason == "length"


def test_abort_ends_with_abort(engine):
    async def run():
        req = request("t4", 400)
        chunks = []
        async for c in engine.generate(req):
            chunks.append(c)
            if c.text:
                await engine.abort("t4")
        return chunks

    chunks = asyncio.run(run())
    assert chunks[-1].finished and chunks[-1].finish_reason == "abort"
    assert chunks[-1].completion_tokens < 400


def test_generate_failure_is_raised_not_hung(engine, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom in generate")

    monkeypatch.setattr(engine.model, "generate", broken)
    with pytest.raises(RuntimeError, match="boom in generate"):
        asyncio.run(asyncio.wait_for(collect(engine, request("t5", 4)), timeout=120))
    assert engine.num_unfinished() == 0


def test_finished_generation_is_never_reported_as_abort(engine):
    """The consumer reads the end of the stream (and sets the cancel flag) while the worker thread may
    not yet have chosen the finish reason: only a generation the flag stopped is an abort."""
    for i in range(8):
        chunks = asyncio.run(collect(engine, request(f"t6-{i}", 2)))
        assert (chunks[-1].finish_reason, chunks[-1].completion_tokens) == ("length", 2)
