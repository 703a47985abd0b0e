"""Issue 25, item 9: a tiny temperature is greedy; a tiny repetition penalty is a 400 naming the field."""

from __future__ import annotations

import pytest

from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError
from serve_app.http.query.parsing import validate_query
from serve_app.http.query.protocol import sampling_options
from serve_app.protocol import MIN_REPETITION_PENALTY, SamplingOptions

QUESTION = {"question": "What happens?", "video_path": "a.mp4"}


@pytest.mark.parametrize("temperature", [1e-300, 5e-324, 1e-6])
def test_a_tiny_temperature_is_greedy(temperature):
    """1e-300 divided the logits into inf/nan probabilities: a 500."""
    cfg = AppConfig()
    q = validate_query({**QUESTION, "temperature": temperature}, cfg)
    assert sampling_options(q, cfg).temperature == 0.0
    assert SamplingOptions(max_tokens=1, temperature=temperature, top_p=1.0, repetition_penalty=1.0).temperature == 0


def test_ordinary_temperatures_are_kept():
    assert SamplingOptions(max_tokens=1, temperature=1e-5, top_p=1.0, repetition_penalty=1.0).temperature == 1e-5
    assert SamplingOptions(max_tokens=1, temperature=0.6, top_p=1.0, repetition_penalty=1.0).temperature == 0.6


@pytest.mark.parametrize("penalty", [1e-300, 0.009])
def test_a_repetition_penalty_under_the_floor_is_400_naming_the_field(penalty):
    with pytest.raises(InvalidRequestError) as e:
        validate_query({**QUESTION, "repetition_penalty": penalty}, AppConfig())
    assert e.value.param == "repetition_penalty" and "0.01" in e.value.message


def test_the_config_has_the_same_floor():
    with pytest.raises(ValueError, match="repetition_penalty"):
        AppConfig.model_validate({"model": {"sampling": {"repetition_penalty": 1e-300}}})
    assert AppConfig.model_validate({"model": {"sampling": {"repetition_penalty": MIN_REPETITION_PENALTY}}})


@pytest.mark.parametrize("sampling", [
    {"temperature": 1e-300}, {"repetition_penalty": MIN_REPETITION_PENALTY}, {"temperature": 2.0, "top_p": 1e-300},
])  # fmt: skip
def test_the_engine_generates_at_the_bounds(tiny_checkpoint, sampling):
    """What gave 'probability tensor contains either inf, nan or element < 0' now generates."""
    import asyncio

    import numpy as np

    from serve_app.config import ModelConfig
    from serve_app.model.engines.base import GenerationRequest
    from serve_app.model.engines.transformers_engine import TransformersEngine
    from serve_app.model.prompt import render_prompt
    from serve_app.model_facts import DEFAULT_SYSTEM_PROMPT

    engine = TransformersEngine(ModelConfig(model_id=str(tiny_checkpoint), backend="transformers"))
    asyncio.run(engine.start())
    frames = np.zeros((2, 56, 56, 3), dtype=np.uint8)
    options = SamplingOptions(**{"max_tokens": 3, "temperature": 0.6, "top_p": 0.95, "repetition_penalty": 1.05,
                                 **sampling})  # fmt: skip
    request = GenerationRequest("r", frames, 4.0, render_prompt("What happens?", DEFAULT_SYSTEM_PROMPT), options)

    async def run():
        return [chunk async for chunk in engine.generate(request)]

    chunks = asyncio.run(run())
    assert chunks[-1].finished and chunks[-1].completion_tokens == 3
