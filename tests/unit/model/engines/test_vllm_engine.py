"""The vLLM backend's pure parts, checked on CPU: argument names, prompt, processor kwargs, fps."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from serve_app.config import app_config_from_file
from serve_app.model.engines.base import GenerationRequest, SamplingOptions
from serve_app.model.engines.vllm_inputs import engine_prompt
from serve_app.model.engines.vllm_startup import unknown_engine_args
from serve_app.model.family import family_for
from serve_app.model.prompt import render_prompt
from serve_app.model_facts import DEFAULT_SYSTEM_PROMPT

ROOT = Path(__file__).resolve().parents[4]
NAMES = json.loads((ROOT / "tests/data/vllm/engine_arg_names-0.24.0.json").read_text())["names"]


def gpu_configs():
    return [f for f in sorted((ROOT / "configs").glob("*.yaml")) if app_config_from_file(f).model.backend == "vllm"]


def test_there_are_gpu_configs():
    names = {f.stem for f in gpu_configs()}
    assert {"a10", "a100", "h100", "h200"} <= names


@pytest.mark.parametrize("path", gpu_configs(), ids=lambda p: p.stem)
def test_config_engine_args_are_vllm_0_24_names(path):
    cfg = app_config_from_file(path)
    assert unknown_engine_args(cfg.model.engine_args, set(NAMES)) == []
    share = cfg.model_replica.num_gpus  # a whole GPU, or a share with at most that share of its memory
    assert share == 1 or (0 < share < 1 and cfg.model.engine_args["gpu_memory_utilization"] <= share)
    assert cfg.decoder.autoscaling_config and cfg.decoder.num_cpus > 0


def test_a_misspelled_engine_arg_is_caught():
    assert unknown_engine_args({"max_num_seq": 8, "dtype": "bfloat16"}, set(NAMES)) == ["max_num_seq"]


def test_engine_prompt_carries_frames_and_true_fps():
    frames = np.zeros((40, 420, 756, 3), np.uint8)
    req = GenerationRequest("r1", frames, 2.5, render_prompt("q", "s"), SamplingOptions(8, 0.6, 0.95, 1.05))
    p = engine_prompt(req, {"device": "cuda"})
    assert p["multi_modal_data"]["video"] is frames
    kw = p["mm_processor_kwargs"]
    assert kw["video_metadata"] == [{"total_num_frames": 40, "fps": 2.5}]
    assert kw["do_sample_frames"] is False and kw["device"] == "cuda"
    assert p["prompt"].count("<|video_pad|>") == 1


def test_processor_kwargs_give_the_true_temporal_positions(tiny_checkpoint):
    """With the HF processor vLLM calls: 0.5 s per frame pair at 4 fps, 8,133 prompt tokens.

    A bare ``fps`` kwarg is ignored for temporal positions (the processor falls
    back to 24 fps without metadata); the engine passes metadata instead.
    """
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(tiny_checkpoint)
    frames = np.random.default_rng(0).integers(0, 255, (40, 420, 756, 3), dtype=np.uint8)
    text = render_prompt("Is anyone in this scene in danger? Answer with reasoning.", DEFAULT_SYSTEM_PROMPT)
    kwargs = family_for("qwen2_5_vl").vllm_video(frames, 4.0)[1]
    ours = proc(text=[text], videos=[frames], return_tensors="pt", **kwargs)
    assert float(ours["second_per_grid_ts"][0]) == pytest.approx(0.5)
    assert ours["input_ids"].shape[1] == 8133
    assert ours["video_grid_thw"].tolist() == [[20, 30, 54]]
    bare = proc(text=[text], videos=[frames], return_tensors="pt", fps=4)
    assert float(bare["second_per_grid_ts"][0]) != pytest.approx(0.5)
    # frames at the processor's exact size pass through unresized
    no_resize = proc(text=[text], videos=[frames], return_tensors="pt", do_resize=False, **kwargs)
    assert np.array_equal(no_resize["pixel_values_videos"].numpy(), ours["pixel_values_videos"].numpy())


class _Elem:
    def __init__(self, data):
        self.data = data


class _Feature:
    def __init__(self, item):
        self.data = item


class _Request:
    def __init__(self, features):
        self.mm_features = features


def _engine_request():
    import torch

    pixels = torch.rand(8, 1176, dtype=torch.float32)  # (patches, 3·2·14·14) as the HF processor returns
    grid = torch.tensor([[2, 2, 2]])
    return _Request([_Feature({"pixel_values_videos": _Elem(pixels), "video_grid_thw": _Elem(grid)}),
                     _Feature(None)]), pixels


@pytest.mark.parametrize("mode", ["as_is", "bf16", "bf16_cpu"])
def test_pixel_handoff_casts_only_pixels_and_keeps_the_numbers_the_vision_tower_sees(mode):
    import torch

    from serve_app.model.engines.vllm_inputs import handoff_pixels

    req, pixels = _engine_request()
    nbytes = handoff_pixels(req, mode)
    out = req.mm_features[0].data["pixel_values_videos"].data
    assert req.mm_features[0].data["video_grid_thw"].data.dtype == torch.int64  # grids untouched
    if mode == "as_is":
        assert out is pixels and nbytes == pixels.nbytes
    else:
        assert out.dtype == torch.bfloat16 and nbytes == pixels.nbytes // 2
        # vLLM's vision tower casts to the model dtype first: bf16 earlier gives the same tensor
        assert torch.equal(out, pixels.to(torch.bfloat16))
        assert out.device.type == "cpu"


def test_engine_prompt_passes_patches_through_without_processor_kwargs():
    from serve_app.decode.vision_patches import patchify

    frames = np.random.default_rng(2).integers(0, 256, (4, 56, 84, 3), dtype=np.uint8)
    patches = patchify(frames, 4.0)
    sampling = SamplingOptions(8, 0.6, 0.95, 1.05)
    req = GenerationRequest("r2", None, 4.0, render_prompt("q", "s"), sampling, patches=patches)
    p = engine_prompt(req, {"device": "cuda"})
    video = p["multi_modal_data"]["video"]
    assert set(video) == {"pixel_values_videos", "video_grid_thw", "second_per_grid_ts"}
    assert video["pixel_values_videos"].shape == (2 * 4 * 6, 1176)
    assert video["video_grid_thw"].tolist() == [[2, 4, 6]] and float(video["second_per_grid_ts"][0]) == 0.5
    assert "mm_processor_kwargs" not in p  # no processor runs for a processed clip
    assert p["multi_modal_uuids"] == {"video": ["clip-r2"]}
    assert p["cache_salt"] == "clip-r2"  # prefix-cache blocks are this clip's alone
    assert req.num_frames == 4


def test_engine_prompt_patchifies_frames_with_the_table_when_asked():
    from serve_app.decode.vision_patches import patchify, video_input

    frames = np.random.default_rng(3).integers(0, 256, (5, 56, 84, 3), dtype=np.uint8)
    sampling = SamplingOptions(8, 0.6, 0.95, 1.05)
    req = GenerationRequest("r3", frames, 2.0, render_prompt("q", "s"), sampling)
    p = engine_prompt(req, {"device": "cuda"}, table_device="cpu")
    video = p["multi_modal_data"]["video"]
    ref = video_input(patchify(frames, 2.0))
    assert set(video) == set(ref)
    assert torch.equal(video["pixel_values_videos"].view(torch.int16), ref["pixel_values_videos"].view(torch.int16))
    assert video["video_grid_thw"].tolist() == [[3, 4, 6]] and float(video["second_per_grid_ts"][0]) == 1.0
    assert "mm_processor_kwargs" not in p  # the HF processor does not run
    assert p["multi_modal_uuids"] == {"video": ["clip-r3"]}
    assert p["cache_salt"] == "clip-r3"
    assert "mm_processor_kwargs" in engine_prompt(req, {"device": "cuda"})  # without it: frames, processor


def test_the_cache_salt_is_shared_by_a_windows_questions_and_by_nothing_else():
    frames = np.zeros((4, 56, 84, 3), dtype=np.uint8)  # the same pixels in every request below
    sampling = SamplingOptions(8, 0.6, 0.95, 1.05)

    def salt(request_id: str, clip_id: str | None) -> str:
        req = GenerationRequest(request_id, frames, 4.0, render_prompt("q", "s"), sampling, clip_id=clip_id)
        for table in (None, "cpu"):
            p = engine_prompt(req, {"device": "cuda"}, table_device=table)
            assert p["cache_salt"] == p["multi_modal_uuids"]["video"][0]
        return str(p["cache_salt"])

    window = {salt(f"gen-{q}", "a1b2") for q in range(3)}  # three questions about one window
    assert window == {"clip-a1b2"}
    others = {salt("gen-x", None), salt("gen-y", None), salt("gen-z", "c3d4")}  # other requests, same pixels
    assert len(others) == 3 and not others & window


class _FakeInputProcessor:
    """vLLM's InputProcessor as VLLMEngine._process calls it (records the prompt and the thread)."""

    def __init__(self):
        self.prompts = []
        self.threads = []

    def process_inputs(self, request_id, prompt, params, supported_tasks, arrival_time):
        import threading

        self.prompts.append(prompt)
        self.threads.append(threading.current_thread().name)
        return ("engine-request", request_id)


def test_the_preprocessing_thread_patchifies_frames_with_the_table_before_vllm_processes_them():
    """model.patchify 'table': vLLM's input processing gets processed fields, made in the preprocessing thread."""
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    from serve_app.config import ModelConfig
    from serve_app.decode.vision_patches import patchify, video_input
    from serve_app.model.engines.vllm_engine import VLLMEngine

    config = ModelConfig(backend="vllm", patchify="table", preprocess_threads=1, processor_kwargs={"device": "cpu"})
    engine = VLLMEngine(config)
    engine.llm = SimpleNamespace(input_processor=_FakeInputProcessor())
    frames = np.random.default_rng(4).integers(0, 256, (4, 56, 84, 3), dtype=np.uint8)
    req = GenerationRequest("r4", frames, 4.0, render_prompt("q", "s"), SamplingOptions(8, 0.6, 0.95, 1.05))
    stage: dict = {}
    with ThreadPoolExecutor(1, thread_name_prefix="mm-preprocess") as pool:
        out = pool.submit(engine._process, req, None, stage).result()
    assert out == ("engine-request", "r4")
    (prompt,) = engine.llm.input_processor.prompts
    assert engine.llm.input_processor.threads[0].startswith("mm-preprocess")
    assert "mm_processor_kwargs" not in prompt  # no HF processor
    ref = video_input(patchify(frames, 4.0))["pixel_values_videos"]
    ours = prompt["multi_modal_data"]["video"]["pixel_values_videos"]
    assert torch.equal(ours.view(torch.int16), ref.view(torch.int16))
    assert stage["thread_start"] <= stage["processed"] <= stage["thread_end"]
    # with the HF processor (the default), the same thread hands vLLM frames and processor kwargs
    engine_hf = VLLMEngine(ModelConfig(backend="vllm", preprocess_threads=1))
    engine_hf.llm = SimpleNamespace(input_processor=_FakeInputProcessor())
    engine_hf._process(req, None, {})
    assert engine_hf.llm.input_processor.prompts[0]["multi_modal_data"]["video"] is frames


@pytest.mark.parametrize(
    ("model", "device"),
    [
        ({"patchify": "table", "processor_kwargs": {"device": "cuda"}}, "cuda"),
        ({"patchify": "table"}, "cpu"),
        ({"patchify": "processor", "processor_kwargs": {"device": "cuda"}}, None),
    ],
)
def test_the_table_runs_on_the_device_of_processor_kwargs(model, device):
    from serve_app.config import ModelConfig
    from serve_app.model.engines.vllm_engine import VLLMEngine

    assert VLLMEngine(ModelConfig(backend="vllm", **model))._table_device == device


def test_table_patchify_is_refused_for_the_transformers_backend():
    from pydantic import ValidationError

    from serve_app.config import ModelConfig

    with pytest.raises(ValidationError, match="patchify 'table' needs backend 'vllm'"):
        ModelConfig(backend="transformers", patchify="table")
    assert ModelConfig(backend="vllm", patchify="table").patchify == "table"
    # with patches from the decode tier there are no frames to patchify: allowed, no effect
    assert ModelConfig(backend="vllm", patchify="table", vision_input="patches").vision_input == "patches"


def test_patches_are_refused_for_the_transformers_backend():
    from pydantic import ValidationError

    from serve_app.config import ModelConfig

    with pytest.raises(ValidationError, match="vision_input 'patches' needs backend 'vllm'"):
        ModelConfig(backend="transformers", vision_input="patches")
    assert ModelConfig(backend="vllm", vision_input="patches").vision_input == "patches"


@pytest.mark.parametrize("rate", [0.5, 0.1])
def test_video_pruning_is_refused_with_the_reason(rate):
    from pydantic import ValidationError

    from serve_app.config import ModelConfig

    with pytest.raises(ValidationError, match=r"video_pruning_rate .* \(EVS\) is refused: .*temporal position 0"):
        ModelConfig(engine_args={"video_pruning_rate": rate})
    assert ModelConfig(engine_args={"video_pruning_rate": 0}).engine_args == {"video_pruning_rate": 0}


def test_the_compile_cache_env_keeps_every_compiler_under_one_folder(tmp_path):
    from serve_app.model.engines.vllm_startup import compile_cache_env

    env = compile_cache_env(str(tmp_path / "cache"))
    assert env == {"VLLM_CACHE_ROOT": str(tmp_path / "cache" / "vllm"),
                   "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache" / "inductor"),
                   "TRITON_CACHE_DIR": str(tmp_path / "cache" / "triton")}
    assert all(v.startswith("/") for v in compile_cache_env("rel/dir").values())  # the engine core may run elsewhere


def test_the_start_says_whether_the_compile_cache_was_warm(tmp_path):
    from serve_app.model.engines.vllm_startup import cache_state

    assert cache_state(str(tmp_path)).startswith("cold")
    (tmp_path / "torch_compile_cache" / "abc" / "rank_0_0").mkdir(parents=True)
    assert cache_state(str(tmp_path)).startswith("cold")  # folders without artifacts are not a cache
    (tmp_path / "torch_compile_cache" / "abc" / "rank_0_0" / "model").write_bytes(b"x")
    assert cache_state(str(tmp_path)).startswith("warm (1 files")


def test_a_tokenizer_pool_deep_copies_to_itself_and_a_plain_tokenizer_does_not(monkeypatch):
    import copy
    import sys
    import types

    from serve_app.model.engines.vllm_patches import share_tokenizer_pools

    class Mixin:  # stands for vllm.tokenizers.hf.ThreadSafeHFTokenizerMixin
        pass

    class Tokenizer:
        def __init__(self):
            self.vocab = {"a": 1}

    class Pool(Tokenizer, Mixin):  # what maybe_make_thread_pool makes
        pass

    hf = types.ModuleType("vllm.tokenizers.hf")
    hf.ThreadSafeHFTokenizerMixin = Mixin
    for name, mod in {"vllm": types.ModuleType("vllm"), "vllm.tokenizers": types.ModuleType("vllm.tokenizers"),
                      "vllm.tokenizers.hf": hf}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    pool, plain = Pool(), Tokenizer()
    assert copy.deepcopy(pool) is not pool
    assert share_tokenizer_pools() is True
    assert copy.deepcopy(pool) is pool
    assert copy.deepcopy({"tokenizer": pool})["tokenizer"] is pool  # as transformers copies its kwargs
    twin = copy.deepcopy(plain)
    assert twin is not plain and twin.vocab == plain.vocab and twin.vocab is not plain.vocab


def test_without_vllm_nothing_is_patched(monkeypatch):
    import sys

    from serve_app.model.engines.vllm_patches import share_tokenizer_pools

    monkeypatch.setitem(sys.modules, "vllm.tokenizers.hf", None)  # import fails
    assert share_tokenizer_pools() is False


class StatsLLM:
    """Counts ``do_log_stats`` calls; the second one fails."""

    def __init__(self):
        self.calls = 0

    async def do_log_stats(self):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("stats broke")


def test_the_engine_stats_are_logged_every_interval_and_a_failed_call_does_not_stop_them(caplog):
    import asyncio

    from serve_app.model.engines.vllm_engine import log_stats_every

    llm = StatsLLM()

    async def go():
        task = asyncio.get_running_loop().create_task(log_stats_every(llm, 0.01))
        for _ in range(500):  # bounded: at most ~5 s
            if llm.calls >= 4:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return task

    task = asyncio.run(go())
    assert llm.calls >= 4  # the loop went on past the failed second call
    assert task.cancelled()
    assert any("do_log_stats failed" in r.getMessage() for r in caplog.records)


def test_shutdown_stops_the_stats_loop():
    import asyncio

    from serve_app.config import ModelConfig
    from serve_app.model.engines.vllm_engine import VLLMEngine, log_stats_every

    async def go():
        engine = VLLMEngine(ModelConfig(backend="vllm", model_id="m"))
        llm = StatsLLM()
        engine._stats_task = asyncio.get_running_loop().create_task(log_stats_every(llm, 3600))
        task = engine._stats_task
        await engine.shutdown()
        await asyncio.gather(task, return_exceptions=True)
        return engine, task, llm

    engine, task, llm = asyncio.run(go())
    assert task.cancelled() and engine._stats_task is None and llm.calls == 0
