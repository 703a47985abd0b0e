"""Writes Qwen3-VL (Cosmos-Reason2) checkpoint directories without the model hub.

The Qwen3-VL counterpart of :mod:`serve_app.model.checkpoint` (Qwen2.5-VL). Two variants, both with
the real Qwen3 tokenizer (Qwen2.5's BPE ranks plus Qwen3's added tokens, rebuilt by
:mod:`serve_app.model.tokenizer`), the Qwen3-VL-Instruct chat template and the Qwen3-VL processor
configs; every number comes from :mod:`serve_app.model_facts_qwen3_vl`:

* ``full-dummy``: Cosmos-Reason2-8B's (= Qwen3-VL-8B-Instruct's) full architecture, config only
  (no weights); vLLM loads it with ``load_format="dummy"`` (random numbers, real compute).
* ``tiny-random``: the same architecture shrunk (text 64 wide, 2 layers; vision 32 wide, depth 2,
  DeepStack taps at vision blocks 0 and 1) with random float32 weights (``model.safetensors``,
  19.74 M parameters, 19.45 M of them the two 151936 × 64 embedding matrices), small enough for
  the transformers backend to generate on CPU.

Both get the random-weights marker from :func:`serve_app.model.checkpoint.build_checkpoint`: whatever
they generate is meaningless.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from serve_app import model_facts_qwen3_vl as facts
from serve_app.log_limit import get_logger
from serve_app.model.random_weights import write_random_weights
from serve_app.model.tokenizer import write_tokenizer_files

logger = get_logger(__name__)

VARIANTS = ("tiny-random", "full-dummy")

#: ``config.json`` of Cosmos-Reason2-8B / Qwen3-VL-8B-Instruct (values in :mod:`serve_app.model_facts_qwen3_vl`).
CONFIG_FULL: dict[str, Any] = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "image_token_id": facts.IMAGE_TOKEN_ID,
    "video_token_id": facts.VIDEO_TOKEN_ID,
    "vision_start_token_id": facts.VISION_START_TOKEN_ID,
    "vision_end_token_id": facts.VISION_END_TOKEN_ID,
    "tie_word_embeddings": facts.TEXT_8B["tie_word_embeddings"],
    # The version of the stored Qwen3-VL-8B config copies (the first release with Qwen3-VL).
    "transformers_version": "4.57.0",
    "text_config": {
        **facts.TEXT_8B,
        "model_type": "qwen3_vl_text",
        "vocab_size": facts.VOCAB_SIZE,
        "bos_token_id": facts.ENDOFTEXT_TOKEN_ID,
        "eos_token_id": facts.IM_END_TOKEN_ID,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "dtype": "bfloat16",
    },
    "vision_config": {**facts.VISION_8B, "model_type": "qwen3_vl", "initializer_range": 0.02},
}

#: What ``tiny-random`` changes. Text: head_dim 16, so the interleaved M-RoPE sections sum to 8
#: (16/2), as [24, 20, 20] sums to 64 (128/2). Vision: ``out_hidden_size`` is the text width;
#: ``deepstack_visual_indexes`` must name vision blocks (< depth) and at most one per text layer.
TINY_TEXT: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default"},
    "dtype": "float32",
}
TINY_VISION: dict[str, Any] = {
    "depth": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "out_hidden_size": 64,
    "deepstack_visual_indexes": [0, 1],
}

#: The patching both processors share (patch, temporal patch, merge, normalisation; the facts module).
_PATCHING: dict[str, Any] = {
    "patch_size": facts.PATCH_SIZE,
    "temporal_patch_size": facts.TEMPORAL_PATCH_SIZE,
    "merge_size": facts.SPATIAL_MERGE_SIZE,
    "image_mean": list(facts.IMAGE_MEAN),
    "image_std": list(facts.IMAGE_STD),
    "processor_class": "Qwen3VLProcessor",
}
#: ``preprocessor_config.json`` (image processor; transformers maps qwen3_vl to the Qwen2-VL image
#: processor, the hub file names ``Qwen2VLImageProcessorFast``).
PREPROCESSOR: dict[str, Any] = {
    "size": {"shortest_edge": facts.IMAGE_MIN_PIXELS, "longest_edge": facts.IMAGE_MAX_PIXELS},
    **_PATCHING,
    "image_processor_type": "Qwen2VLImageProcessorFast",
}
#: ``video_preprocessor_config.json`` (``size`` bounds t·h·w of the whole clip).
VIDEO_PREPROCESSOR: dict[str, Any] = {
    "size": {"shortest_edge": facts.VIDEO_SHORTEST_EDGE, "longest_edge": facts.VIDEO_LONGEST_EDGE},
    **_PATCHING,
    "video_processor_type": "Qwen3VLVideoProcessor",
}

#: ``generation_config.json``: token ids only (the hub file's sampling fields were not checked;
#: sampling comes from the serving config, see ``facts.COSMOS_*_SAMPLING``).
GENERATION_CONFIG: dict[str, Any] = {
    "bos_token_id": facts.ENDOFTEXT_TOKEN_ID,
    "eos_token_id": [facts.IM_END_TOKEN_ID, facts.ENDOFTEXT_TOKEN_ID],
    "pad_token_id": facts.ENDOFTEXT_TOKEN_ID,
}


def model_config(variant: str) -> dict[str, Any]:
    """``config.json`` of a variant (text_config and vision_config written in full).

    Raises:
        ValueError: unknown variant.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown checkpoint variant {variant!r}; choose from {VARIANTS}")
    cfg: dict[str, Any] = copy.deepcopy(CONFIG_FULL)
    if variant == "tiny-random":
        cfg["text_config"].update(copy.deepcopy(TINY_TEXT))
        cfg["vision_config"].update(copy.deepcopy(TINY_VISION))
    return cfg


def write_checkpoint(out: Path, variant: str) -> None:
    """Writes a Qwen3-VL checkpoint directory (not atomically; callers build into a temp dir).

    Files: ``config.json``, ``preprocessor_config.json``, ``video_preprocessor_config.json``,
    ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``,
    ``chat_template.json``, and for ``tiny-random`` ``model.safetensors``
    (:func:`serve_app.model.checkpoint.build_checkpoint` adds the random-weights marker).

    Args:
        out: destination directory (created if missing).
        variant: ``tiny-random`` or ``full-dummy``.

    Raises:
        ValueError: unknown variant.
        FileNotFoundError: the Qwen vocabulary (``dashscope`` package) is missing.
    """
    cfg = model_config(variant)
    out.mkdir(parents=True, exist_ok=True)
    write_tokenizer_files(
        out,
        added_tokens=facts.ADDED_TOKENS,
        chat_template=facts.CHAT_TEMPLATE,
        model_max_length=facts.MODEL_MAX_LENGTH,
    )
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    (out / "video_preprocessor_config.json").write_text(json.dumps(VIDEO_PREPROCESSOR, indent=2))
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    if variant == "tiny-random":
        write_random_weights(out, "Qwen3VLForConditionalGeneration", model_config("tiny-random"))
    logger.info("wrote Qwen3-VL %s checkpoint to %s", variant, out)
