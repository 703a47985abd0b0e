"""The model replica's warm-up: how many clips, which shape and sampling, sent at once."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from pydantic import ValidationError

from serve_app.config import AppConfig
from serve_app.deployments.model import warmup_requests


def _config(**model) -> AppConfig:
    return AppConfig.model_validate({"model": {"backend": "serve_app.testing.engines:scripted_engine", **model}})


def test_warmup_requests_use_the_real_sampling_and_distinct_ids():
    cfg = _config(warmup_clips=5, warmup_clip_shape=(4, 56, 112), warmup_max_tokens=3)
    reqs = warmup_requests(cfg)
    assert len(reqs) == 5
    assert len({r.request_id for r in reqs}) == 5
    assert len({r.media_uuid for r in reqs}) == 5  # no multimodal cache can serve one from another
    for r in reqs:
        assert r.frames is not None and r.frames.shape == (4, 56, 112, 3) and r.frames.dtype == np.uint8
        assert r.patches is None
        s = r.sampling
        assert (s.temperature, s.top_p, s.repetition_penalty) == (
            cfg.model.sampling.temperature, cfg.model.sampling.top_p, cfg.model.sampling.repetition_penalty)
        assert s.temperature > 0  # the sampled path (top-p kernel), not greedy
        assert s.max_tokens == 3 and s.ignore_eos


def test_warmup_requests_come_as_patches_when_clips_do():
    cfg = AppConfig.model_validate({"model": {"backend": "vllm", "vision_input": "patches", "warmup_clips": 2,
                                              "warmup_clip_shape": [40, 420, 756]}})
    reqs = warmup_requests(cfg)
    assert [r.frames for r in reqs] == [None, None]
    p = reqs[0].patches
    assert p is not None and p.grid_thw == (20, 30, 54)  # 8,100 video tokens, as a real 10-s window
    assert reqs[1].patches is p  # one pixel array for all


@pytest.mark.parametrize(
    "shape", [(0, 336, 336), (1, 336, 336), (3, 336, 336), (2, 336, 330), (2, 28, 28), (2, 28 * 200, 28 * 200)]
)
def test_a_shape_the_processor_would_resize_is_refused_at_config_load(shape):
    with pytest.raises(ValidationError, match="warmup_clip_shape") as e:
        _config(warmup_clip_shape=shape)
    assert "multiples of 28" in str(e.value)


@pytest.mark.parametrize("shape", [(2, 56, 56), (4, 28 * 64, 28 * 256), (2, 28 * 128, 28 * 128)])
def test_every_shape_the_config_accepts_patchifies_unchanged(shape):
    """The validator's bounds are patchify's: an accepted warm-up shape never fails at replica start."""
    cfg = AppConfig.model_validate({"model": {"backend": "vllm", "vision_input": "patches", "warmup_clips": 1,
                                              "warmup_clip_shape": shape}})
    [req] = warmup_requests(cfg)
    t, h, w = shape
    assert req.patches is not None and req.patches.grid_thw == (t // 2, h // 14, w // 14)


async def _warm_up_with(engine_cls, clips: int):
    """A model replica (scripted backend, no warm-up at start) whose engine is ``engine_cls``; runs its
    warm-up of ``clips`` clips, shuts the replica down and returns the engine. Exceptions propagate."""
    from serve_app.deployments.model import VideoModel

    model = VideoModel.func_or_class.__new__(VideoModel.func_or_class)
    await model.__init__({"model": {"backend": "serve_app.testing.engines:scripted_engine", "warmup": False,
                                    "warmup_clips": clips}})
    engine = model.engine = engine_cls(model.config.model)
    try:
        await model._warmup()
    finally:
        await model.__del__()
    return engine


def test_the_replica_sends_its_warmup_clips_at_once():
    from serve_app.testing.engines import ScriptedEngine

    class Counting(ScriptedEngine):
        def __init__(self, config):
            super().__init__(config)
            self.now = self.peak = self.calls = 0

        async def generate(self, request):
            self.now += 1
            self.calls += 1
            self.peak = max(self.peak, self.now)
            await asyncio.sleep(0.01)
            self.now -= 1
            async for chunk in super().generate(request):
                yield chunk

    engine = asyncio.run(_warm_up_with(Counting, 6))
    assert engine.calls == 6
    assert engine.peak == 5  # the first clip alone (it builds the engine's processor), then the other 5 at once


def test_a_warmup_clip_longer_than_the_context_is_refused_at_config_load():
    big = {"warmup_clip_shape": (2, 3584, 3584), "engine_args": {"max_model_len": 16384}}  # 16,384 video tokens
    with pytest.raises(ValidationError, match="16384 video tokens") as e:
        AppConfig.model_validate({"model": {"backend": "vllm", **big}})
    assert "max_model_len" in str(e.value)


@pytest.mark.parametrize("name", ["a10", "a100", "h100", "h200"])
def test_every_gpu_config_warms_the_sampled_path_at_batch_8_or_more(name):
    """vLLM 0.24 samples top-k/top-p with a Triton kernel from 8 sequences in a batch and compiles it on
    first use (results/gpu/NOTES.md, session 5): a GPU config's warm-up must reach that batch size,
    with real-size clips, so the first burst of camera windows does not pay the compile."""
    from pathlib import Path

    from serve_app.config import app_config_from_file

    cfg = app_config_from_file(Path(__file__).resolve().parents[3] / "configs" / f"{name}.yaml").model
    assert cfg.warmup
    assert min(cfg.warmup_clips, cfg.engine_args["max_num_seqs"]) >= 8
    assert cfg.sampling.temperature > 0 and cfg.sampling.top_p < 1  # the recipe samples: the kernel is used
    assert cfg.warmup_clip_shape == (40, 420, 756)  # a real 10-s window's shape


def test_a_failing_warmup_clip_fails_the_start_with_the_engines_error_and_cancels_the_rest():
    from serve_app.model.engines.base import EngineDeadError
    from serve_app.testing.engines import ScriptedEngine

    class DiesOnThird(ScriptedEngine):
        def __init__(self, config):
            super().__init__(config)
            self.calls = self.finished = 0

        async def generate(self, request):
            self.calls += 1
            if self.calls == 3:
                raise EngineDeadError("engine died during warm-up")
            await asyncio.sleep(0.5)
            self.finished += 1
            async for chunk in super().generate(request):
                yield chunk

    engines: list = []

    def make(config):
        engines.append(DiesOnThird(config))
        return engines[0]

    with pytest.raises(EngineDeadError, match="during warm-up"):
        asyncio.run(_warm_up_with(make, 5))
    engine = engines[0]
    assert engine.calls == 5 and engine.finished == 1  # the first ran alone; the rest were cancelled, not left running


def test_the_decode_sweep_shrinks_the_batch_one_sequence_per_step():
    from serve_app.deployments.model import decode_sweep_requests

    config = AppConfig.model_validate({"model": {"backend": "vllm", "warmup_decode_sweep": 5,
                                                 "sampling": {"temperature": 0.6, "top_p": 0.95}}})
    sweep = decode_sweep_requests(config)
    assert [r.sampling.max_tokens for r in sweep] == [1, 2, 3, 4, 5]  # batch sizes 5, 4, 3, 2, 1 each run once
    assert all(r.sampling.ignore_eos for r in sweep)
    assert {r.sampling.temperature for r in sweep} == {0.6} and {r.sampling.top_p for r in sweep} == {0.95}
    assert {r.frames.shape for r in sweep} == {(2, 56, 56, 3)}  # 2x2 merged 14-px patches: 4 video tokens
    assert len({r.request_id for r in sweep}) == 5
    off = AppConfig.model_validate({"model": {"backend": "vllm"}})
    assert decode_sweep_requests(off) == []
    qwen3 = AppConfig.model_validate({"model": {"backend": "vllm", "family": "qwen3_vl", "warmup_decode_sweep": 2}})
    assert {r.frames.shape for r in decode_sweep_requests(qwen3)} == {(2, 64, 64, 3)}  # 32-px multiples


def test_the_warmup_runs_the_decode_sweep_after_the_clips():
    from serve_app.testing.engines import ScriptedEngine

    class Recording(ScriptedEngine):
        def __init__(self, config):
            super().__init__(config)
            self.shapes = []

        async def generate(self, request):
            self.shapes.append(request.frames.shape[:3])
            async for chunk in super().generate(request):
                yield chunk

    async def run():
        from serve_app.deployments.model import VideoModel

        model = VideoModel.func_or_class.__new__(VideoModel.func_or_class)
        await model.__init__({"model": {"backend": "serve_app.testing.engines:scripted_engine", "warmup": False,
                                        "warmup_clips": 2, "warmup_decode_sweep": 3}})
        engine = model.engine = Recording(model.config.model)
        try:
            await model._warmup()
        finally:
            await model.__del__()
        return engine

    engine = asyncio.run(run())
    clip = tuple(AppConfig().model.warmup_clip_shape)
    sweep = (2, 56, 56)
    assert engine.shapes == [clip, clip, sweep, sweep, sweep]
