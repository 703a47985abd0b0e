"""The model-family seam: each family's prompt, engine input and reasoning format, checked against
transformers' own processors on the tiny random checkpoints (random weights: shapes and ids only)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from serve_app.config import ModelConfig
from serve_app.decode.sampling import video_tokens
from serve_app.model.engine_limits import check_context, text_tokens_estimate
from serve_app.model.family import checkpoint_chat_template, family_for
from serve_app.model_facts_qwen3_vl import VIDEO_TOKEN_ID, VISION_START_TOKEN_ID

QUESTION = "Is anyone in danger?"
SYSTEM = "You are a helpful assistant."


def frames(t: int, h: int, w: int) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, size=(t, h, w, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def qwen3_processor(tiny_qwen3_checkpoint):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_qwen3_checkpoint)


def process(processor, family, clip: np.ndarray, fps: float, **extra):
    from transformers.video_utils import VideoMetadata

    prompt = family.render_prompt(QUESTION, SYSTEM)
    kwargs = {**family.processor_kwargs(clip, fps), **extra}
    return processor(text=[prompt], videos=[clip], video_metadata=[VideoMetadata(**family.video_metadata(clip, fps))],
                     return_tensors="pt", **kwargs)


def test_the_checkpoint_template_is_the_one_the_family_renders_with(tiny_qwen3_checkpoint, tiny_checkpoint):
    for name, path in (("qwen3_vl", tiny_qwen3_checkpoint), ("qwen2_5_vl", tiny_checkpoint)):
        family = family_for(name)
        template = checkpoint_chat_template(path)
        assert template == family.chat_template
        assert family.render_prompt(QUESTION, SYSTEM, template=template) == family.render_prompt(QUESTION, SYSTEM)


def test_a_real_checkpoint_template_wins_over_the_family_copy(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['role'] }}]{% endfor %}")
    template = checkpoint_chat_template(tmp_path)
    assert family_for("qwen3_vl").render_prompt(QUESTION, SYSTEM, template=template) == "[system][user]"
    assert checkpoint_chat_template(tmp_path / "missing") is None


@pytest.mark.parametrize("shape", [(40, 320, 608), (2, 64, 64), (8, 192, 352)])
def test_qwen3_frames_sized_by_the_decode_tier_pass_the_processor_unresized(qwen3_processor, shape):
    """Pixel values with the family's kwargs equal the processor's with resizing switched off, so the 32-px
    frames of the decode tier are what the vision tower sees; the video token count is ours."""
    family = family_for("qwen3_vl")
    clip = frames(*shape)
    out = process(qwen3_processor, family, clip, 4.0)
    unresized = process(qwen3_processor, family, clip, 4.0, do_resize=False)
    t, h, w = shape
    assert out["video_grid_thw"].tolist() == [[t // 2, h // 16, w // 16]]
    assert np.array_equal(out["pixel_values_videos"].numpy(), unresized["pixel_values_videos"].numpy())
    ids = out["input_ids"][0].tolist()
    assert ids.count(VIDEO_TOKEN_ID) == video_tokens(t, h, w, 32)
    # one frame group per frame pair, each after its "<t seconds>" text (times from the window start, 2 frames
    # per pair at 4 fps: 0.1 s, 0.6 s, ...)
    text = qwen3_processor.tokenizer.decode(ids)
    assert "<0.1 seconds>" in text and (t < 4 or "<0.6 seconds>" in text)
    assert ids.count(VISION_START_TOKEN_ID) >= t // 2
    # the context check's estimate bounds the real prompt
    groups = t // 2 * family.text_tokens_per_group
    estimate = video_tokens(t, h, w, 32) + text_tokens_estimate(SYSTEM, QUESTION) + groups
    assert len(ids) <= estimate


def test_the_context_check_counts_qwen3_tokens_and_timestamps():
    # 40 frames of 320x608 at factor 32: 20 pairs of 10x19 tokens
    assert check_context(40, 320, 608, 50, None, 32, 10) == 3800
    with pytest.raises(Exception, match="max_frames") as e:
        check_context(40, 320, 608, 50, 3800 + 50 + 199, 32, 10)  # 200 timestamp tokens do not fit
    assert "ask for at most 38 frames" in str(e.value)


def test_the_vllm_video_item_of_each_family():
    clip = frames(4, 64, 64)
    item, kwargs = family_for("qwen3_vl").vllm_video(clip, 2.0, {"device": "cuda"})
    video, meta = item
    assert video is clip and meta["frames_indices"] == [0, 1, 2, 3] and meta["fps"] == 2.0
    assert meta["do_sample_frames"] is False and meta["total_num_frames"] == 4
    assert kwargs["size"] == {"shortest_edge": 4 * 64 * 64, "longest_edge": 4 * 64 * 64}
    assert kwargs["device"] == "cuda" and kwargs["do_sample_frames"] is False
    item, kwargs = family_for("qwen2_5_vl").vllm_video(clip, 2.0)
    assert item is clip and kwargs["video_metadata"] == [{"total_num_frames": 4, "fps": 2.0}]


def test_an_unknown_family_is_refused():
    with pytest.raises(ValueError, match="unknown model family"):
        family_for("llava")


def test_the_transformers_engine_answers_with_the_tiny_qwen3(tiny_qwen3_checkpoint):
    """The whole model path on CPU: prompt from the checkpoint's template, the HF processor, generate; the
    prompt the engine counted is the processor's (random weights: the text is meaningless)."""
    from serve_app.model.engines.transformers_engine import TransformersEngine
    from serve_app.model.generation import answer_stream
    from serve_app.model.sampling_options import sampling_options
    from serve_app.protocol import ClipInfo, ClipQuestion, DecodedClip, Done

    config = ModelConfig(backend="transformers", family="qwen3_vl", model_id=str(tiny_qwen3_checkpoint))
    clip = DecodedClip(frames=frames(4, 64, 96), timestamps_s=np.array([0, 0.25, 0.5, 0.75]), fps=4.0,
                       source_width=96, source_height=64, source_fps=4.0, duration_s=1.0)
    sampling = sampling_options(config.sampling, max_tokens=3, ignore_eos=True)
    question = ClipQuestion(question=QUESTION, sampling=sampling, request_id="r1")

    async def run():
        engine = TransformersEngine(config)
        await engine.start()
        assert engine.chat_template == family_for("qwen3_vl").chat_template
        return [c async for c in answer_stream(engine, question, clip, model_name="m", system_prompt=SYSTEM,
                                               family="qwen3_vl")]

    chunks = asyncio.run(run())
    info, done = chunks[0], chunks[-1]
    assert isinstance(info, ClipInfo) and info.reasoning_format == "think_then_answer"
    assert info.video_tokens == 2 * 2 * 3 and info.random_weights
    assert isinstance(done, Done) and done.completion_tokens == 3 and done.prompt_tokens > info.video_tokens


def test_the_transformers_engine_refuses_a_checkpoint_of_the_other_family(tiny_qwen3_checkpoint):
    """A config that could not read the checkpoint (another machine) took the default family: the replica,
    which can, refuses to start and says which family to set."""
    from serve_app.model.engines.transformers_engine import TransformersEngine

    config = ModelConfig.model_construct(**{**ModelConfig(backend="transformers").__dict__,
                                            "model_id": str(tiny_qwen3_checkpoint)})
    assert config.family == "qwen2_5_vl"
    with pytest.raises(ValueError, match=r"set model\.family: qwen3_vl"):
        asyncio.run(TransformersEngine(config).start())


def test_an_empty_system_prompt_sends_no_system_message_and_the_template_default_applies():
    q25, q3 = family_for("qwen2_5_vl"), family_for("qwen3_vl")
    assert [m["role"] for m in q3.build_messages(QUESTION, "")] == ["user"]
    assert not q3.render_prompt(QUESTION, "").startswith("<|im_start|>system")  # Qwen3-VL's template adds none
    # Qwen2.5-VL's template adds its default system turn, as plain vLLM's server renders it
    assert q25.render_prompt(QUESTION, "") == q25.render_prompt(QUESTION, "You are a helpful assistant.")


@pytest.mark.parametrize(("family", "pairs"), [("qwen3_vl", 3), ("qwen2_5_vl", 1)])
def test_the_cpu_engine_prompt_has_one_vision_block_per_frame_pair_as_vllm_makes_it(
    family, pairs, tiny_qwen3_checkpoint, tiny_checkpoint
):
    """transformers 5.x's Qwen3-VL processor would keep the template's outer vision start/end around its own
    per-pair blocks; the engine hands it ``<|video_pad|>`` alone then, so each frame pair has exactly one
    ``<t seconds><|vision_start|>…<|vision_end|>`` (vLLM's form). Qwen2.5-VL: one block for the clip."""
    from serve_app.model.engines.base import GenerationRequest
    from serve_app.model.engines.transformers_engine import TransformersEngine
    from serve_app.protocol import SamplingOptions

    path = tiny_qwen3_checkpoint if family == "qwen3_vl" else tiny_checkpoint
    engine = TransformersEngine(ModelConfig(backend="transformers", family=family, model_id=str(path)))
    asyncio.run(engine.start())
    side = 2 * family_for(family).geometry.pixel_factor
    prompt = family_for(family).render_prompt(QUESTION, SYSTEM)
    sampling = SamplingOptions(max_tokens=1, temperature=0.0, top_p=1.0, repetition_penalty=1.0)
    ids = engine._inputs(GenerationRequest("r", frames(6, side, side), 4.0, prompt, sampling))["input_ids"][0].tolist()
    tok = engine.processor.tokenizer
    starts, ends = (tok.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>"))
    assert ids.count(starts) == ids.count(ends) == pairs
    assert ids.count(tok.convert_tokens_to_ids("<|video_pad|>")) == video_tokens(6, side, side, side // 2)


def test_the_family_mismatch_error_names_the_setting_not_the_server_path(tiny_qwen3_checkpoint):
    from serve_app.model.engines.transformers_engine import TransformersEngine

    config = ModelConfig.model_construct(**{**ModelConfig(backend="transformers").__dict__,
                                            "model_id": str(tiny_qwen3_checkpoint)})
    with pytest.raises(ValueError) as e:
        asyncio.run(TransformersEngine(config).start())
    assert "model.model_id" in str(e.value) and str(tiny_qwen3_checkpoint) not in str(e.value)
