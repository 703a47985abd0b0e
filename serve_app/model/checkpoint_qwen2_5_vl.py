"""Cosmos-Reason1-7B (Qwen2.5-VL) checkpoint directories, written without the model hub.

The real Qwen2.5 tokenizer and processor config (token ids, patch sizes, pixel bounds from
:mod:`serve_app.model_facts`; the architecture sizes below from the hub's Qwen2.5-VL-7B-Instruct
``config.json``, restated in ``shared/model-facts.md``):

* ``full-dummy``: the full 8.29 B-parameter architecture, config only (no weights); vLLM loads it
  with ``load_format="dummy"`` (random numbers, real compute) for GPU benchmarks.
* ``tiny-random``: the same architecture shrunk to 19.6 M parameters with random weights
  (``model.safetensors``), run by the transformers backend on CPU for tests and the laptop default.

:func:`serve_app.model.checkpoint.build_checkpoint` calls :func:`write_checkpoint` through the
family seam and adds the random-weights marker.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from serve_app import model_facts as facts
from serve_app.model.random_weights import write_random_weights
from serve_app.model.tokenizer import write_tokenizer_files

VISION_FULL = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "out_hidden_size": 3584,
    "patch_size": facts.PATCH_SIZE,
    "spatial_patch_size": facts.PATCH_SIZE,
    "spatial_merge_size": facts.SPATIAL_MERGE_SIZE,
    "temporal_patch_size": facts.TEMPORAL_PATCH_SIZE,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
    "tokens_per_second": 2,
    "in_chans": 3,
    "in_channels": 3,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "model_type": "qwen2_5_vl",
}

CONFIG_FULL = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": facts.VOCAB_SIZE,
    "max_position_embeddings": 128000,
    "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "sliding_window": 32768,
    "use_sliding_window": False,
    "max_window_layers": 28,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "use_cache": True,
    "bos_token_id": facts.ENDOFTEXT_TOKEN_ID,
    "eos_token_id": facts.IM_END_TOKEN_ID,
    "vision_start_token_id": facts.VISION_START_TOKEN_ID,
    "vision_end_token_id": facts.VISION_END_TOKEN_ID,
    "vision_token_id": facts.VISION_TOKEN_ID,
    "image_token_id": facts.IMAGE_TOKEN_ID,
    "video_token_id": facts.VIDEO_TOKEN_ID,
    # Newer values trigger a false tokenizer-regex warning (model-facts.md).
    "transformers_version": "4.41.2",
    "vision_config": VISION_FULL,
}

#: The tiny variant seen working on CPU (model-facts.md): 19.6 M parameters.
TINY_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_window_layers": 2,
    "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
    "torch_dtype": "float32",
}
TINY_VISION = {
    "depth": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "out_hidden_size": 64,
    "fullatt_block_indexes": [1],
}

#: ``preprocessor_config.json`` of Qwen2.5-VL-7B-Instruct (values in :mod:`serve_app.model_facts`).
PREPROCESSOR = {
    "min_pixels": facts.MIN_PIXELS,
    "max_pixels": facts.MAX_PIXELS,
    "patch_size": facts.PATCH_SIZE,
    "temporal_patch_size": facts.TEMPORAL_PATCH_SIZE,
    "merge_size": facts.SPATIAL_MERGE_SIZE,
    "image_mean": list(facts.IMAGE_MEAN),
    "image_std": list(facts.IMAGE_STD),
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}

VARIANTS = ("tiny-random", "full-dummy")


def model_config(variant: str) -> dict[str, Any]:
    """``config.json`` of a variant (vision_config always written in full)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown checkpoint variant {variant!r}; choose from {VARIANTS}")
    cfg: dict[str, Any] = copy.deepcopy(CONFIG_FULL)
    if variant == "tiny-random":
        cfg.update(copy.deepcopy(TINY_TEXT))
        cfg["vision_config"].update(TINY_VISION)
    return cfg


def write_checkpoint(out: Path, variant: str) -> None:
    """Writes the ``variant`` checkpoint's files into ``out`` (tokenizer, configs; tiny-random: weights).

    Raises:
        ValueError: unknown variant.
        FileNotFoundError: the Qwen vocabulary (``dashscope`` package) is missing.
    """
    _write_common(out, variant)
    if variant == "tiny-random":
        write_random_weights(out, "Qwen2_5_VLForConditionalGeneration", model_config("tiny-random"))


def _write_common(out: Path, variant: str) -> None:
    write_tokenizer_files(out)
    (out / "config.json").write_text(json.dumps(model_config(variant), indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps(
            {
                "bos_token_id": facts.ENDOFTEXT_TOKEN_ID,
                "eos_token_id": [facts.IM_END_TOKEN_ID, facts.ENDOFTEXT_TOKEN_ID],
                "pad_token_id": facts.ENDOFTEXT_TOKEN_ID,
            },
            indent=2,
        )
    )
