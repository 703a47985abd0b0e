"""Random weights for a generated tiny checkpoint (the one writer both families' checkpoint modules use)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_random_weights(out: Path, model_class: str, config: dict[str, Any], seed: int = 0) -> None:
    """Saves ``transformers.<model_class>`` built from ``out/config.json`` with transformers' own seeded
    initialisation, in float32, as ``out/model.safetensors``; then writes ``config`` back as ``config.json``
    (``save_pretrained`` rewrites it in the running transformers' layout and version).

    Raises:
        AttributeError: transformers has no ``model_class``.
    """
    import torch
    import transformers

    torch.manual_seed(seed)
    model_cls = getattr(transformers, model_class)
    model = model_cls(transformers.AutoConfig.from_pretrained(out)).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
