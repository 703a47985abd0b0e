"""Writes Cosmos-Reason1-7B checkpoint directories without the model hub.

Two variants, both with the real Qwen2.5 tokenizer and processor config
(token ids, patch sizes, pixel bounds from :mod:`serve_app.model_facts`; the
architecture sizes below from the hub's Qwen2.5-VL-7B-Instruct ``config.json``,
restated in ``shared/model-facts.md``):

* ``full-dummy``: the full 8.29 B-parameter architecture, config only (no
  weights); vLLM loads it with ``load_format="dummy"`` (random numbers, real
  compute) for GPU benchmarks.
* ``tiny-random``: the same architecture shrunk to 19.6 M parameters with
  random weights (``model.safetensors``), run by the transformers backend on
  CPU for tests and the laptop default.

Both carry ``random_weights.json``: whatever they generate is meaningless.

Usage::

    python -m serve_app.checkpoint tiny-random checkpoints/tiny-qwen2_5_vl
    python -m serve_app.checkpoint full-dummy checkpoints/cosmos-reason1-7b-dummy
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from serve_app import model_facts as facts
from serve_app.log_limit import get_logger
from serve_app.model.checkpoint_qwen3_vl import RANDOM_MARKER as RANDOM_MARKER
from serve_app.model.tokenizer import write_tokenizer_files

logger = get_logger(__name__)

# RANDOM_MARKER (the marker file: its presence means the weights are random) is defined in
# serve_app.model.checkpoint_qwen3_vl, which this module imports without a cycle; re-exported here.

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
    (out / RANDOM_MARKER).write_text(
        json.dumps(
            {
                "variant": variant,
                "random_weights": True,
                "note": "Generated by serve_app.model.checkpoint from shared/model-facts.md. Weights are random "
                "(or vLLM dummy-loaded): outputs are meaningless text.",
            },
            indent=2,
        )
    )


def _write_tiny_weights(out: Path, seed: int = 0) -> None:
    import torch
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(out)
    # transformers types PreTrainedModel.to through a decorator whose stub drops the bound self.
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32)  # type: ignore[arg-type]
    model.save_pretrained(out, safe_serialization=True)
    # save_pretrained rewrites config.json with the running transformers version.
    (out / "config.json").write_text(json.dumps(model_config("tiny-random"), indent=2))


def build_checkpoint(variant: str, out_dir: str | Path, *, force: bool = False) -> Path:
    """Writes a checkpoint directory atomically (built in a temp dir, then renamed).

    Args:
        variant: ``tiny-random`` or ``full-dummy``.
        out_dir: destination directory.
        force: rebuild even if a complete checkpoint is already there.

    Returns:
        The checkpoint directory.

    Raises:
        ValueError: unknown variant.
        FileNotFoundError: the Qwen vocabulary (``dashscope`` package) is missing.
    """
    out = Path(out_dir).resolve()
    if is_complete(out) and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _write_common(tmp, variant)
        if variant == "tiny-random":
            _write_tiny_weights(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info("wrote %s checkpoint to %s", variant, out)
    return out


def is_complete(path: str | Path) -> bool:
    """True if ``path`` holds a checkpoint this module wrote (or any with config + tokenizer)."""
    p = Path(path)
    need = ["config.json", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"]
    return all((p / f).is_file() for f in need)


def ensure_checkpoint(variant: str, out_dir: str | Path) -> Path:
    """Builds the checkpoint once, under a file lock (several replicas may start at once)."""
    from filelock import FileLock

    out = Path(out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock", timeout=600):
        return build_checkpoint(variant, out)


def has_random_weights(path: str | Path) -> bool:
    """True if the directory carries this module's random-weights marker."""
    return (Path(path) / RANDOM_MARKER).is_file()


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m serve_app.checkpoint VARIANT OUT_DIR [--force]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("out_dir")
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = build_checkpoint(args.variant, args.out_dir, force=args.force)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
