"""Which fp8 a model replica's engine would run, read from its config and checkpoint before vLLM starts (pure).

fp8 reaches vLLM 0.24 three ways, and each runs W8A8 fp8 GEMMs from compute capability 8.9 and weight-only
fp8 (Marlin kernels) below it:

* ``engine_args.quantization: fp8``: vLLM quantizes a bf16 checkpoint at load (dynamic activation scales,
  ``configs/h100-fp8.yaml``);
* ``engine_args.hf_overrides.quantization_config``: the checkpoint's config as if it carried one (how the GPU
  benchmarks time static activation scales on dummy weights, ``results/gpu/fleet-lease18/``);
* the checkpoint's own ``config.json`` ``quantization_config``: a calibrated fp8 checkpoint, with vLLM's ``fp8``
  method (``{"quant_method": "fp8", "activation_scheme": "static"}``) or llm-compressor's compressed-tensors
  format (a config group whose ``weights`` are ``{"type": "float", "num_bits": 8}``: llm-compressor's ``FP8``
  and ``FP8_DYNAMIC`` schemes), which vLLM reads without any ``quantization`` argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Fp8Source:
    """Where a model replica's fp8 comes from (:func:`fp8_source`).

    Attributes:
        where: the source in words for an error message, e.g. ``"quantization: fp8"`` or ``"the checkpoint's
            quantization_config (fp8, static activation scales)"``.
        fix: what to change to serve on a GPU that runs fp8 only weight-only (below compute capability 8.9).
    """

    where: str
    fix: str


#: ``engine_args.quantization: fp8``: vLLM quantizes a bf16 checkpoint at load.
QUANTIZATION_FP8 = Fp8Source("quantization: fp8", "remove quantization from engine_args on this GPU")


def _fp8_config(config: object) -> str | None:
    """``"fp8, static activation scales"``-like words for a ``quantization_config`` that asks for fp8, else None."""
    if not isinstance(config, Mapping):
        return None
    method = config.get("quant_method")
    if method == "fp8":
        return f"fp8, {config.get('activation_scheme', 'dynamic')} activation scales"
    if method == "compressed-tensors":
        groups = config.get("config_groups")
        for group in groups.values() if isinstance(groups, Mapping) else ():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping) and weights.get("type") == "float" and weights.get("num_bits") == 8:
                return "fp8 (compressed-tensors)"
    return None


def checkpoint_quantization_config(model: str) -> object:
    """The ``quantization_config`` of a local checkpoint directory's ``config.json``.

    Args:
        model: ``model.model_id``: a local directory, or a hub id (not read: None).

    Returns:
        The parsed value, or None where there is no such directory, file or key, or the file is not JSON.
    """
    path = Path(model) / "config.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc.get("quantization_config") if isinstance(doc, dict) else None


def fp8_source(engine_args: Mapping[str, Any], checkpoint_config: object) -> Fp8Source | None:
    """Where the engine's fp8 would come from, or None for no fp8.

    Args:
        engine_args: the config's ``model.engine_args`` (vLLM's engine arguments).
        checkpoint_config: the checkpoint's ``quantization_config`` (:func:`checkpoint_quantization_config`).

    Returns:
        :data:`QUANTIZATION_FP8`, an ``hf_overrides.quantization_config (…)`` or ``the checkpoint's
        quantization_config (…)`` source (the override replaces the checkpoint's), or None. A ``quantization``
        argument other than fp8 that differs from the config's ``quant_method`` gives None (vLLM refuses the
        mismatch).
    """
    quantization = engine_args.get("quantization")
    if quantization == "fp8":
        return QUANTIZATION_FP8
    overrides = engine_args.get("hf_overrides")
    if isinstance(overrides, Mapping) and "quantization_config" in overrides:
        where, config = "hf_overrides.quantization_config", overrides["quantization_config"]
        fix = "remove hf_overrides.quantization_config from engine_args on this GPU"
    else:
        where, config = "the checkpoint's quantization_config", checkpoint_config
        fix = "serve the bf16 checkpoint on this GPU"
    words = _fp8_config(config)
    if words is None or not isinstance(config, Mapping):
        return None
    if quantization is not None and quantization != config.get("quant_method"):
        return None
    return Fp8Source(f"{where} ({words})", fix)


def model_fp8_source(engine_args: Mapping[str, Any], model: str) -> Fp8Source | None:
    """:func:`fp8_source` for a model replica's config: its ``engine_args`` and the ``quantization_config`` of
    the checkpoint at ``model`` (``model.model_id``; a hub id is not read)."""
    return fp8_source(engine_args, checkpoint_quantization_config(model))
