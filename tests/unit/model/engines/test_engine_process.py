"""Which multiprocessing context vLLM's engine-core launcher gets (serve_app.model.engines.engine_process)."""

from __future__ import annotations

import multiprocessing

from serve_app.model.engines.engine_process import CONTEXT, EnvForwardingProcess, vllm_context


def test_where_vllm_would_spawn_the_preloaded_fork_server_is_used():
    calls = []

    def vllm_spawn():
        calls.append(1)  # vLLM's function still runs (it sets RAY_ADDRESS for the child)
        return multiprocessing.get_context("spawn")

    ctx = vllm_context(vllm_spawn)()
    assert ctx is CONTEXT and calls == [1]
    assert ctx.get_start_method() == "forkserver"
    assert ctx.Process is EnvForwardingProcess


def test_where_vllm_would_fork_its_choice_stands():
    fork = multiprocessing.get_context("fork")
    assert vllm_context(lambda: fork)() is fork


def test_the_engine_timings_row_carries_the_prefix_cache_hits():
    from serve_app.model.engines.vllm_timings import timings_row

    row = timings_row("r1", 0.0, 0.002, {}, None, 16, 8133, cached_tokens=8112)
    assert row["cached_tokens"] == 8112 and row["prompt_tokens"] == 8133 and row["frontend_ms"] == 2.0
    assert "cached_tokens" not in timings_row("r2", 0.0, 0.0, {}, None, 16, 8133)  # unknown: left out
