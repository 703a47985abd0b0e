"""The generated Qwen3-VL checkpoints (serve_app.model.checkpoint_qwen3_vl) load and run in transformers.

The tiny-random variant is built once per module (the tokenizer conversion takes most of the
seconds); the full-dummy one is config only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from serve_app import model_facts_qwen3_vl as facts
from serve_app.model.checkpoint import RANDOM_MARKER, build_checkpoint
from serve_app.model.checkpoint_qwen3_vl import model_config, write_checkpoint

FPS = 4.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("qwen3vl") / "tiny"
    build_checkpoint("tiny-random", out, family="qwen3_vl")
    return out


@pytest.fixture(scope="module")
def processor(tiny: Path):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny)


def _video_messages() -> list[dict]:
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]},
    ]


def _frames(t: int, h: int, w: int) -> np.ndarray:
    """(t, h, w, 3) uint8 noise."""
    return np.random.default_rng(t * h * w).integers(0, 256, size=(t, h, w, 3), dtype=np.uint8)


def _process(processor, frames: np.ndarray, text: str):
    """The processor on pre-sampled frames at FPS, with the resize bounds pinned to the clip's own size."""
    from transformers.video_utils import VideoMetadata

    t, h, w, _ = frames.shape
    meta = VideoMetadata(total_num_frames=t, fps=FPS, frames_indices=list(range(t)))
    return processor(
        text=[text],
        videos=[frames],
        video_metadata=[meta],
        do_sample_frames=False,
        cap_pixels_per_frame=False,
        size={"shortest_edge": t * h * w, "longest_edge": t * h * w},
        return_tensors="pt",
    )


def test_the_checkpoint_has_every_file_and_the_marker(tiny: Path):
    names = {p.name for p in tiny.iterdir()}
    assert {
        "config.json", "preprocessor_config.json", "video_preprocessor_config.json", "generation_config.json",
        "tokenizer.json", "tokenizer_config.json", "chat_template.json", "model.safetensors", RANDOM_MARKER,
    } <= names
    assert json.loads((tiny / RANDOM_MARKER).read_text())["random_weights"] is True


def test_processor_classes_and_geometry(processor):
    assert type(processor).__name__ == "Qwen3VLProcessor"
    assert type(processor.video_processor).__name__ == "Qwen3VLVideoProcessor"
    for proc in (processor.image_processor, processor.video_processor):
        assert (proc.patch_size, proc.merge_size, proc.temporal_patch_size) == (16, 2, 2)
        assert list(proc.image_mean) == [0.5, 0.5, 0.5] and list(proc.image_std) == [0.5, 0.5, 0.5]
    assert processor.video_processor.size["longest_edge"] == facts.VIDEO_LONGEST_EDGE


@pytest.mark.parametrize(("t", "h", "w"), [(4, 64, 96), (6, 32, 64), (2, 128, 32)])
def test_video_grid_tokens_and_timestamps(processor, t: int, h: int, w: int):
    prompt = processor.apply_chat_template(_video_messages(), tokenize=False, add_generation_prompt=True)
    inputs = _process(processor, _frames(t, h, w), prompt)

    assert inputs["video_grid_thw"].tolist() == [[t // 2, h // 16, w // 16]]
    n_pad = int((inputs["input_ids"] == facts.VIDEO_TOKEN_ID).sum())
    assert n_pad == (t // 2) * (h // 16) * (w // 16) // 4
    # one 1536-value row per 16×16×2 patch: 3 channels × 2 frames × 16 × 16
    assert tuple(inputs["pixel_values_videos"].shape) == ((t // 2) * (h // 16) * (w // 16), 3 * 2 * 16 * 16)

    text = processor.tokenizer.decode(inputs["input_ids"][0])
    # each frame pair is stamped with the mean of its two frame times, one decimal
    stamps = [f"<{(2 * i + 0.5) / FPS:.1f} seconds>" for i in range(t // 2)]
    positions = [text.index(s) for s in stamps]
    assert positions == sorted(positions)
    assert text.count(" seconds>") == t // 2


def test_processor_template_equals_the_facts_renderer(processor):
    from serve_app.model.family import render_chat

    multi_turn = [
        {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Is the car moving?"}]},
        {"role": "assistant", "content": "<think>\nIt shifts.\n</think>\n\nYes."},
        {"role": "user", "content": [{"type": "text", "text": "Which way?"}]},
    ]
    for messages in (_video_messages(), multi_turn):
        rendered = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert rendered == render_chat(facts.CHAT_TEMPLATE, messages)
    assert rendered.endswith("Which way?<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>assistant\n<think>\nIt shifts.\n</think>\n\nYes.<|im_end|>" in rendered


def test_the_template_is_the_pinned_one_and_the_checkpoint_carries_it(tiny: Path):
    assert hashlib.sha256(facts.CHAT_TEMPLATE.encode()).hexdigest() == facts.CHAT_TEMPLATE_SHA256
    assert len(facts.CHAT_TEMPLATE.encode()) == 5292
    assert json.loads((tiny / "chat_template.json").read_text())["chat_template"] == facts.CHAT_TEMPLATE
    assert json.loads((tiny / "tokenizer_config.json").read_text())["chat_template"] == facts.CHAT_TEMPLATE


def test_tiny_model_generates_three_tokens_on_cpu(tiny: Path, processor):
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration.from_pretrained(tiny).eval()
    assert model.config.vision_config.deepstack_visual_indexes == [0, 1]
    prompt = processor.apply_chat_template(_video_messages(), tokenize=False, add_generation_prompt=True)
    inputs = _process(processor, _frames(4, 64, 64), prompt)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    assert out.shape == (1, inputs["input_ids"].shape[1] + 3)
    assert torch.equal(out[0, : inputs["input_ids"].shape[1]], inputs["input_ids"][0])


def test_tokenizer_ids_are_the_facts(tiny: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    assert tok.convert_tokens_to_ids("<think>") == facts.THINK_OPEN_TOKEN_ID == 151667
    assert tok.convert_tokens_to_ids("</think>") == facts.THINK_CLOSE_TOKEN_ID == 151668
    assert tok.convert_tokens_to_ids("<|video_pad|>") == facts.VIDEO_TOKEN_ID == 151656
    assert (tok.eos_token_id, tok.pad_token_id) == (facts.IM_END_TOKEN_ID, facts.ENDOFTEXT_TOKEN_ID)
    for token_id, content, _ in facts.ADDED_TOKENS:
        assert tok.convert_tokens_to_ids(content) == token_id
    ids = tok("<think>\nx\n</think>\n\ny<|im_end|>", add_special_tokens=False).input_ids
    assert ids[0] == 151667 and 151668 in ids
    # <think> is not special: it survives skip_special_tokens, <|im_end|> does not
    assert tok.decode(ids, skip_special_tokens=True) == "<think>\nx\n</think>\n\ny"


def test_qwen3_tokenizer_is_qwen25_bpe_below_the_added_tokens(tiny: Path):
    """Plain text encodes to tiktoken's ids on qwen.tiktoken (the ranks Qwen2.5 and Qwen3 share)."""
    import tiktoken
    from tokenizers import Tokenizer

    from serve_app.model.tokenizer import PRETOKENIZE_REGEX, load_ranks, tiktoken_file

    ranks = load_ranks(tiktoken_file())
    enc = tiktoken.Encoding("qwen", pat_str=PRETOKENIZE_REGEX, mergeable_ranks=ranks, special_tokens={})
    hf = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    for text in ("A forklift backs into aisle 7 at 14:32.", "  café 日本語 🚗\n\nx**2"):
        assert hf.encode(text, add_special_tokens=False).ids == enc.encode_ordinary(text)
    assert hf.get_vocab_size(with_added_tokens=True) == 151669


def test_full_dummy_config_loads_with_about_8_8_billion_parameters(tmp_path: Path):
    import torch
    from transformers import AutoConfig, Qwen3VLForConditionalGeneration

    (tmp_path / "config.json").write_text(json.dumps(model_config("full-dummy")))
    config = AutoConfig.from_pretrained(tmp_path)
    assert type(config).__name__ == "Qwen3VLConfig"
    assert config.architectures == ["Qwen3VLForConditionalGeneration"]
    assert (config.text_config.num_hidden_layers, config.vision_config.depth) == (36, 27)
    assert config.vision_config.deepstack_visual_indexes == [8, 16, 24]
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(config)
    n = sum(p.numel() for p in model.parameters())
    assert 8.7e9 < n < 8.8e9, n  # 8,767,123,696 with transformers 5.24 (vision tower 576 M)


def test_full_dummy_writes_config_only(tmp_path: Path):
    out = tmp_path / "full"
    build_checkpoint("full-dummy", out, family="qwen3_vl")
    assert not list(out.glob("*.safetensors"))
    assert json.loads((out / "config.json").read_text()) == model_config("full-dummy")
    assert json.loads((out / RANDOM_MARKER).read_text())["variant"] == "full-dummy"


def test_tiny_deepstack_taps_fit_the_shrunk_towers():
    cfg = model_config("tiny-random")
    taps = cfg["vision_config"]["deepstack_visual_indexes"]
    assert all(0 <= i < cfg["vision_config"]["depth"] for i in taps)
    assert len(taps) <= cfg["text_config"]["num_hidden_layers"]
    text = cfg["text_config"]
    assert sum(text["rope_scaling"]["mrope_section"]) * 2 == text["head_dim"]
    assert cfg["vision_config"]["out_hidden_size"] == text["hidden_size"]


def test_unknown_variant_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="unknown checkpoint variant"):
        model_config("huge")
    with pytest.raises(ValueError):
        write_checkpoint(tmp_path / "x", "huge")
