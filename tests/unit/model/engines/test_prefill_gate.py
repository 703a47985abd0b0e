"""A clip's later questions reach vLLM's engine core only once its first question has prefilled.

The gate alone (:class:`PrefillGate`), then through :meth:`VLLMEngine.generate` with a stand-in for vLLM's
``AsyncLLM`` that records when each request was submitted and emits its first output when told to.
"""

import asyncio
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from serve_app.model.engines.base import GenerationRequest, SamplingOptions
from serve_app.model.engines.prefill_gate import PrefillGate
from serve_app.model.prompt import render_prompt


async def _settle(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_the_first_request_of_a_clip_leads_and_the_others_wait_for_its_release():
    async def go():
        gate = PrefillGate()
        release = await gate.turn("c1")
        later = [asyncio.ensure_future(gate.turn("c1")) for _ in range(2)]
        other = await asyncio.wait_for(gate.turn("c2"), 1)  # another clip leads on its own
        alone = await asyncio.wait_for(gate.turn(None), 1)  # no shared clip: never waits
        await _settle()
        waiting = [t.done() for t in later]
        assert len(gate) == 2  # c1 and c2 lead, c1's followers are not entries
        release()
        await asyncio.wait_for(asyncio.gather(*later), 1)
        release()  # a second call does nothing
        left = len(gate)
        other()
        alone()
        return waiting, left, len(gate)

    waiting, left, end = asyncio.run(go())
    assert waiting == [False, False]
    assert left == 1  # c2 still leads until its own release
    assert end == 0


def test_a_request_after_the_release_goes_at_once_and_a_cancelled_wait_leaves_nothing():
    async def go():
        gate = PrefillGate()
        release = await gate.turn("c1")
        waiter = asyncio.ensure_future(gate.turn("c1"))
        await _settle()
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert len(gate) == 1  # the leader is still there; the cancelled wait left nothing
        release()
        late = await asyncio.wait_for(gate.turn("c1"), 1)  # the prefix is cached by now: it leads at once
        late()
        return waiter.cancelled(), len(gate)

    cancelled, end = asyncio.run(go())
    assert cancelled and end == 0


class _Out(SimpleNamespace):
    pass


class GateLLM:
    """Stands in for vLLM's AsyncLLM: records each submission; a request's first output waits for ``go[id]``.

    ``output_processor.get_num_unfinished_requests()`` counts the requests submitted and not ended, as vLLM's does.
    """

    errored = False

    def __init__(self, ids: list[str], fail: set[str] = frozenset()) -> None:
        self.submitted: list[str] = []
        self.go = {i: asyncio.Event() for i in ids}
        self.fail = fail
        self.unfinished = 0
        self.output_processor = SimpleNamespace(get_num_unfinished_requests=lambda: self.unfinished)

    async def generate(self, prompt, params, request_id, prompt_text=None):
        self.submitted.append(request_id)
        self.unfinished += 1
        try:
            await self.go[request_id].wait()
            if request_id in self.fail:
                raise RuntimeError("the engine refused this request")
            comp = SimpleNamespace(text="a", token_ids=[1], finish_reason="length")
            yield _Out(prompt_token_ids=[0] * 8, num_cached_tokens=0, outputs=[comp], metrics=None, finished=True)
        finally:
            self.unfinished -= 1


def _request(rid: str, clip_id: str | None) -> GenerationRequest:
    frames = np.zeros((4, 56, 84, 3), np.uint8)
    return GenerationRequest(rid, frames, 4.0, render_prompt("q", "s"), SamplingOptions(8, 0.6, 0.95, 1.05),
                             clip_id=clip_id)


@pytest.fixture
def engine(monkeypatch):
    from serve_app.config import ModelConfig
    from serve_app.model.engines import vllm_engine

    # generate() imports vLLM's own EngineDeadError and builds SamplingParams: neither exists without vLLM.
    dead = type("EngineDeadError", (Exception,), {})
    monkeypatch.setitem(sys.modules, "vllm.v1.engine.exceptions", SimpleNamespace(EngineDeadError=dead))
    monkeypatch.setattr(vllm_engine, "sampling_params", lambda s: None)
    return vllm_engine.VLLMEngine(ModelConfig(backend="vllm", preprocess_threads=0))


async def _drain(engine, req):
    return [c async for c in engine.generate(req)]


def test_a_windows_later_questions_are_submitted_after_the_first_ones_first_output(engine):
    async def go():
        engine.llm = GateLLM(["q1", "q2", "q3", "solo", "w2"])
        reqs = [_request("q1", "c1"), _request("q2", "c1"), _request("q3", "c1"), _request("solo", None),
                _request("w2", "c2")]
        tasks = [asyncio.ensure_future(_drain(engine, r)) for r in reqs]
        await _settle()
        before = list(engine.llm.submitted)
        engine.llm.go["q1"].set()  # question 1's first output: its prompt is prefilled
        await _settle()
        after = list(engine.llm.submitted)
        for e in engine.llm.go.values():
            e.set()
        done = await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return before, after, done

    before, after, done = asyncio.run(go())
    assert before == ["q1", "solo", "w2"]  # the window's other questions wait; other clips do not
    assert sorted(after) == ["q1", "q2", "q3", "solo", "w2"]
    assert all(chunks[-1].finished for chunks in done)
    assert len(engine._gate) == 0


def test_with_prefill_hold_off_every_question_is_submitted_at_once(engine):
    from serve_app.config import ModelConfig

    engine.config = ModelConfig(backend="vllm", preprocess_threads=0, prefill_hold=False)

    async def go():
        engine.llm = GateLLM(["q1", "q2", "q3"])
        tasks = [asyncio.ensure_future(_drain(engine, _request(q, "c1"))) for q in ("q1", "q2", "q3")]
        await _settle()
        before = list(engine.llm.submitted)
        for e in engine.llm.go.values():
            e.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return before

    assert asyncio.run(go()) == ["q1", "q2", "q3"]  # none waited for q1's first output
    assert len(engine._gate) == 0


def test_a_first_question_that_fails_before_its_first_output_lets_the_others_go(engine):
    async def go():
        engine.llm = GateLLM(["q1", "q2"], fail={"q1"})
        first = asyncio.ensure_future(_drain(engine, _request("q1", "c1")))
        second = asyncio.ensure_future(_drain(engine, _request("q2", "c1")))
        await _settle()
        before = list(engine.llm.submitted)
        engine.llm.go["q1"].set()
        got = await asyncio.gather(first, return_exceptions=True)
        await _settle()
        submitted = list(engine.llm.submitted)
        engine.llm.go["q2"].set()
        answered = await asyncio.wait_for(second, 5)
        return before, got, submitted, answered

    before, got, submitted, answered = asyncio.run(go())
    assert before == ["q1"]
    assert isinstance(got[0], RuntimeError)
    assert submitted == ["q1", "q2"]
    assert answered[-1].finished
    assert len(engine._gate) == 0


def test_a_first_question_cancelled_while_it_waits_in_the_engine_lets_the_others_go(engine):
    async def go():
        engine.llm = GateLLM(["q1", "q2"])
        first = asyncio.ensure_future(_drain(engine, _request("q1", "c1")))
        second = asyncio.ensure_future(_drain(engine, _request("q2", "c1")))
        await _settle()
        first.cancel()  # the client went away while question 1 was still queued in the engine
        await asyncio.gather(first, return_exceptions=True)
        await _settle()
        submitted = list(engine.llm.submitted)
        engine.llm.go["q2"].set()
        answered = await asyncio.wait_for(second, 5)
        return submitted, answered

    submitted, answered = asyncio.run(go())
    assert submitted == ["q1", "q2"]
    assert answered[-1].finished


def test_the_engine_timings_row_says_how_long_a_question_waited_at_the_gate():
    from serve_app.model.engines.vllm_timings import timings_row

    row = timings_row("q2", 0.0, 0.25, {"gate_start": 0.05}, None, 16, 8155, cached_tokens=8128)
    assert row["prefill_gate_ms"] == pytest.approx(200.0)
    assert row["frontend_ms"] == pytest.approx(250.0)
    assert "processor_ms" not in row  # no preprocessing thread recorded anything
    assert "prefill_gate_ms" not in timings_row("r1", 0.0, 0.0, {}, None, 16, 8155)


def test_a_later_request_told_not_to_wait_goes_at_once_and_the_leader_still_leads():
    async def go():
        gate = PrefillGate()
        release = await gate.turn("c1")
        at_once = await asyncio.wait_for(gate.turn("c1", wait=False), 1)  # the engine has room: no wait
        held = asyncio.ensure_future(gate.turn("c1"))  # a busy engine: it waits for the leader
        await _settle()
        waited = not held.done()
        at_once()  # not a leader: releases no one
        await _settle()
        still = not held.done()
        release()
        await asyncio.wait_for(held, 1)
        return waited, still, len(gate)

    waited, still, end = asyncio.run(go())
    assert waited and still
    assert end == 0


@pytest.mark.parametrize(
    ("min_requests", "others", "held"),
    [
        (3, 0, False),  # vLLM tracks q1, then q1 and q2, when q2 and q3 come: below 3, no hold
        (3, 2, True),  # two other clips' requests run: q2 finds 3 unfinished in vLLM and waits for q1
        (0, 0, True),  # 0: always hold (the default)
    ],
)
def test_the_hold_applies_only_while_the_engine_holds_prefill_hold_min_requests(engine, min_requests, others, held):
    from serve_app.config import ModelConfig

    engine.config = ModelConfig(backend="vllm", preprocess_threads=0, prefill_hold_min_requests=min_requests)
    busy = [f"o{i}" for i in range(others)]

    async def go():
        engine.llm = GateLLM(["q1", "q2", "q3", *busy])
        running = [asyncio.ensure_future(_drain(engine, _request(o, o))) for o in busy]
        await _settle()
        in_engine = engine.num_unfinished()
        tasks = [asyncio.ensure_future(_drain(engine, _request(q, "c1"))) for q in ("q1", "q2", "q3")]
        await _settle()
        before = list(engine.llm.submitted)
        for e in engine.llm.go.values():
            e.set()
        await asyncio.wait_for(asyncio.gather(*running, *tasks), 5)
        return in_engine, before

    in_engine, before = asyncio.run(go())
    assert in_engine == others
    assert before == busy + (["q1"] if held else ["q1", "q2", "q3"])
    assert len(engine._gate) == 0



def test_a_hold_threshold_without_the_hold_is_refused_with_what_to_set():
    from pydantic import ValidationError

    from serve_app.config import ModelConfig

    with pytest.raises(ValidationError) as e:
        ModelConfig(backend="vllm", prefill_hold=False, prefill_hold_min_requests=8)
    assert "prefill_hold_min_requests 8 applies only with model.prefill_hold: true" in str(e.value)
    assert ModelConfig(backend="vllm", prefill_hold=False).prefill_hold_min_requests == 0  # the default passes
