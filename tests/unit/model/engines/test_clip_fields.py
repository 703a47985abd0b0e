"""A window's questions patchify its frames once: :class:`ClipFieldsCache` alone (threads, failure, eviction,
expiry), then through the vLLM engine's preprocessing with the table patchify on the CPU and a stand-in for
vLLM's input processor."""

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from serve_app.model.engines.base import GenerationRequest, SamplingOptions
from serve_app.model.engines.clip_fields import ClipFieldsCache
from serve_app.model.prompt import render_prompt


def test_a_clips_requests_share_one_build_even_when_they_ask_at_once():
    cache: ClipFieldsCache[object] = ClipFieldsCache()
    started, finish = threading.Event(), threading.Event()
    builds: list[int] = []

    def build():
        builds.append(1)
        started.set()
        finish.wait(5)
        return object()

    results: list[tuple[object, bool]] = []
    owner = threading.Thread(target=lambda: results.append(cache.get("c1", build)))
    owner.start()
    assert started.wait(5)
    waiters = [threading.Thread(target=lambda: results.append(cache.get("c1", build))) for _ in range(2)]
    for t in waiters:
        t.start()
    finish.set()
    for t in [owner, *waiters]:
        t.join(5)
    assert len(builds) == 1
    assert len({id(v) for v, _ in results}) == 1  # one output, shared
    assert sorted(reused for _, reused in results) == [False, True, True]


def test_requests_without_a_clip_identity_always_build_and_nothing_is_kept():
    cache: ClipFieldsCache[int] = ClipFieldsCache()
    calls = iter(range(10))
    assert [cache.get(None, lambda: next(calls)) for _ in range(2)] == [(0, False), (1, False)]
    assert len(cache) == 0


def test_a_failed_build_reaches_its_caller_and_the_waiters_build_on_their_own():
    cache: ClipFieldsCache[str] = ClipFieldsCache()
    started, finish = threading.Event(), threading.Event()

    def failing():
        started.set()
        finish.wait(5)
        raise ValueError("frames the patchify cannot take")

    errors: list[Exception] = []
    got: list[tuple[str, bool]] = []

    def first():
        try:
            cache.get("c1", failing)
        except ValueError as e:
            errors.append(e)

    owner = threading.Thread(target=first)
    owner.start()
    assert started.wait(5)
    waiter = threading.Thread(target=lambda: got.append(cache.get("c1", lambda: "own")))
    waiter.start()
    finish.set()
    owner.join(5)
    waiter.join(5)
    assert len(errors) == 1 and got == [("own", False)]
    assert cache.get("c1", lambda: "next") == ("next", False)  # the failed build left nothing behind


def test_the_least_recently_used_clip_leaves_first_and_an_unused_one_expires():
    now = [0.0]
    cache: ClipFieldsCache[str] = ClipFieldsCache(max_clips=2, ttl_s=30.0, clock=lambda: now[0])
    cache.get("c1", lambda: "1")
    cache.get("c2", lambda: "2")
    assert cache.get("c1", lambda: "x") == ("1", True)  # c1 used last: c2 leaves when c3 comes
    cache.get("c3", lambda: "3")
    assert cache.get("c2", lambda: "2 again") == ("2 again", False)
    assert len(cache) == 2
    now[0] = 31.0  # nothing used for longer than ttl_s
    assert cache.get("c3", lambda: "3 again") == ("3 again", False)
    assert len(cache) == 1


@pytest.mark.parametrize("max_clips, ttl_s", [(0, 30.0), (4, 0.0)])
def test_a_cache_that_could_keep_nothing_is_refused(max_clips, ttl_s):
    with pytest.raises(ValueError, match="max_clips"):
        ClipFieldsCache(max_clips=max_clips, ttl_s=ttl_s)


class _InputProcessor:
    """Stands in for vLLM's input processor: keeps each prompt it was given."""

    def __init__(self) -> None:
        self.prompts: dict[str, dict] = {}

    def process_inputs(self, request_id, prompt, params, supported_tasks=None, arrival_time=None):
        self.prompts[request_id] = prompt
        return SimpleNamespace(mm_features=[])


def _request(rid: str, clip_id: str | None, frames: np.ndarray) -> GenerationRequest:
    return GenerationRequest(rid, frames, 4.0, render_prompt(f"question {rid}", "s"),
                             SamplingOptions(8, 0.6, 0.95, 1.05), clip_id=clip_id)


def test_the_engine_patchifies_a_windows_frames_once_for_all_its_questions(monkeypatch):
    from serve_app.config import ModelConfig
    from serve_app.model.engines import vllm_engine

    calls: list[str] = []
    real = vllm_engine.patchify_fields

    def counting(frames, fps, device):
        calls.append(device)
        return real(frames, fps, device)

    monkeypatch.setattr(vllm_engine, "patchify_fields", counting)
    engine = vllm_engine.VLLMEngine(ModelConfig(backend="vllm", patchify="table", processor_kwargs={"device": "cpu"},
                                                preprocess_threads=0))
    engine.llm = SimpleNamespace(input_processor=_InputProcessor())
    window = np.random.default_rng(0).integers(0, 255, (4, 56, 84, 3), dtype=np.uint8)
    other = np.zeros_like(window)
    stages = {}
    for rid, clip_id, frames in [("q1", "c1", window), ("q2", "c1", window), ("q3", "c1", window),
                                 ("w2", "c2", other), ("solo", None, other)]:
        stages[rid] = {}
        engine._process(_request(rid, clip_id, frames), None, stages[rid])
    prompts = engine.llm.input_processor.prompts
    assert calls == ["cpu", "cpu", "cpu"]  # c1 once, c2 once, the request without a clip identity once
    videos = {rid: p["multi_modal_data"]["video"] for rid, p in prompts.items()}
    assert videos["q2"]["pixel_values_videos"] is videos["q1"]["pixel_values_videos"]  # shared, not redone
    assert videos["q2"] is not videos["q1"]  # each prompt has its own dict of them
    assert videos["w2"]["pixel_values_videos"] is not videos["q1"]["pixel_values_videos"]
    assert not np.array_equal(videos["w2"]["pixel_values_videos"].float().numpy(),
                              videos["q1"]["pixel_values_videos"].float().numpy())
    assert prompts["q2"]["prompt"] != prompts["q1"]["prompt"]  # the question is each request's own
    assert [stages[r]["patchify_reused"] for r in ("q1", "q2", "q3", "w2", "solo")] == [0.0, 1.0, 1.0, 0.0, 0.0]
