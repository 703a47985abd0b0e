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
