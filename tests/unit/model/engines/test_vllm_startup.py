"""The engine's build with a larger encoder cache (serve_app/model/engines/vllm_startup.py), with vLLM's
``AsyncEngineArgs`` / ``AsyncLLM`` replaced by doubles that record what they were given."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from serve_app.config import ModelConfig
from serve_app.model.engines.vllm_startup import build_async_llm


class _Args:
    """``AsyncEngineArgs`` as far as the build reads it; ``create_engine_config`` gives vLLM's default size."""

    enable_log_requests = True
    disable_log_stats = False

    def __init__(self, vllm_cache_tokens: int) -> None:
        self.config = SimpleNamespace(scheduler_config=SimpleNamespace(encoder_cache_size=vllm_cache_tokens))
        self.usage: list[Any] = []

    def create_engine_config(self, usage_context: Any) -> Any:
        self.usage.append(usage_context)
        return self.config


class _LLM:
    """``AsyncLLM``'s two constructors: each returns what it was called with."""

    @classmethod
    def from_engine_args(cls, engine_args: Any, **kwargs: Any) -> Any:
        return ("from_engine_args", engine_args, kwargs)

    @classmethod
    def from_vllm_config(cls, vllm_config: Any, **kwargs: Any) -> Any:
        return ("from_vllm_config", vllm_config, kwargs)


def test_without_a_size_the_engine_is_built_as_vllm_builds_it():
    args = _Args(16384)
    how, got, kwargs = build_async_llm(args, _LLM, None, "ENGINE_CONTEXT")
    assert (how, got, kwargs) == ("from_engine_args", args, {"usage_context": "ENGINE_CONTEXT"})
    assert args.config.scheduler_config.encoder_cache_size == 16384


def test_a_size_reaches_the_schedulers_config_and_the_engine_keeps_its_logging():
    args = _Args(16384)
    how, config, kwargs = build_async_llm(args, _LLM, 131072, "ENGINE_CONTEXT")
    assert how == "from_vllm_config" and config is args.config
    assert config.scheduler_config.encoder_cache_size == 131072
    assert args.usage == ["ENGINE_CONTEXT"]
    assert kwargs == {"usage_context": "ENGINE_CONTEXT", "enable_log_requests": True, "disable_log_stats": False}


def test_a_size_below_vllms_own_does_not_shrink_the_cache():
    args = _Args(16384)
    _, config, _ = build_async_llm(args, _LLM, 4096, "ENGINE_CONTEXT")
    assert config.scheduler_config.encoder_cache_size == 16384


@pytest.mark.parametrize(("bad", "says"), [(0, "greater than or equal to 1"), (-8, "greater than or equal to 1"),
                                           (1_048_577, "less than or equal to 1048576")])
def test_the_config_refuses_an_encoder_cache_out_of_range_saying_the_limit(bad, says):
    with pytest.raises(ValidationError, match="encoder_cache_tokens") as e:
        ModelConfig(encoder_cache_tokens=bad)
    assert says in str(e.value)
    assert ModelConfig(encoder_cache_tokens=1_048_576).encoder_cache_tokens == 1_048_576
    assert ModelConfig(encoder_cache_tokens=131072).encoder_cache_tokens == 131072
    assert ModelConfig().encoder_cache_tokens is None
