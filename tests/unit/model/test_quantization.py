"""Which fp8 a replica's engine would run: ``quantization``, ``hf_overrides`` or the checkpoint's config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serve_app.model.preflight import HardwareError, check_fp8
from serve_app.model.quantization import (
    QUANTIZATION_FP8,
    checkpoint_quantization_config,
    fp8_source,
    model_fp8_source,
)

STATIC = {"quant_method": "fp8", "activation_scheme": "static"}
# llm-compressor's FP8 scheme as compressed-tensors writes it into config.json (abridged)
COMPRESSED_FP8 = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {
    "group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}}}}
COMPRESSED_W4A16 = {"quant_method": "compressed-tensors", "config_groups": {
    "group_0": {"weights": {"num_bits": 4, "type": "int"}}}}


def _where(engine_args: dict[str, object], checkpoint_config: object) -> str | None:
    """:func:`fp8_source`'s words for an error message (None: no fp8)."""
    source = fp8_source(engine_args, checkpoint_config)
    return None if source is None else source.where


def test_the_quantization_argument_wins():
    assert fp8_source({"quantization": "fp8"}, None) == QUANTIZATION_FP8
    assert fp8_source({"quantization": "fp8", "hf_overrides": {"quantization_config": STATIC}}, None) == (
        QUANTIZATION_FP8)
    assert fp8_source({"quantization": "awq"}, STATIC) is None  # vLLM refuses the mismatch itself
    assert fp8_source({}, None) is None and fp8_source({"quantization": None}, None) is None


def test_a_checkpoints_fp8_config_is_fp8_without_any_argument():
    assert _where({}, STATIC) == "the checkpoint's quantization_config (fp8, static activation scales)"
    assert _where({}, {"quant_method": "fp8"}) == (
        "the checkpoint's quantization_config (fp8, dynamic activation scales)")
    assert _where({}, COMPRESSED_FP8) == "the checkpoint's quantization_config (fp8 (compressed-tensors))"
    assert fp8_source({"quantization": "compressed-tensors"}, COMPRESSED_FP8) is not None
    assert fp8_source({}, COMPRESSED_W4A16) is None
    assert fp8_source({}, {"quant_method": "awq", "bits": 4}) is None
    assert fp8_source({}, "fp8") is None and fp8_source({}, {"quant_method": "compressed-tensors"}) is None


def test_hf_overrides_replace_the_checkpoints_config():
    over = {"hf_overrides": {"quantization_config": STATIC}}
    assert _where(over, None) == "hf_overrides.quantization_config (fp8, static activation scales)"
    assert fp8_source({"hf_overrides": {"quantization_config": COMPRESSED_W4A16}}, STATIC) is None
    assert fp8_source({"hf_overrides": {"rope_theta": 1e6}}, STATIC) is not None  # other overrides: the checkpoint's


def test_the_checkpoints_config_is_read_from_a_local_directory(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["X"], "quantization_config": STATIC}))
    assert checkpoint_quantization_config(str(tmp_path)) == STATIC
    assert checkpoint_quantization_config("nvidia/Cosmos-Reason1-7B") is None  # a hub id is not fetched
    (tmp_path / "config.json").write_text("{not json")
    assert checkpoint_quantization_config(str(tmp_path)) is None
    (tmp_path / "config.json").write_text("[1, 2]")
    assert checkpoint_quantization_config(str(tmp_path)) is None


def test_a_calibrated_fp8_checkpoint_is_refused_on_ampere(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": COMPRESSED_FP8}))
    source = model_fp8_source({}, str(tmp_path))
    assert source is not None and source.where == "the checkpoint's quantization_config (fp8 (compressed-tensors))"
    with pytest.raises(HardwareError, match="serve the bf16 checkpoint"):
        check_fp8(source, read=lambda: [80])
    check_fp8(source, read=lambda: [90])
    with pytest.raises(HardwareError, match=r"remove hf_overrides\.quantization_config"):
        check_fp8(fp8_source({"hf_overrides": {"quantization_config": STATIC}}, None), read=lambda: [86])


def test_a_quantization_override_is_refused_on_real_weights():
    """``hf_overrides.quantization_config`` reads a bf16 checkpoint as an fp8 one: allowed only with dummy weights."""
    from pydantic import ValidationError

    from serve_app.config import ModelConfig

    over = {"quantization": "fp8", "hf_overrides": {"quantization_config": STATIC}}
    with pytest.raises(ValidationError, match=r"hf_overrides\.quantization_config .* engine_args\.load_format: dummy"):
        ModelConfig(engine_args=over)
    assert ModelConfig(engine_args={**over, "load_format": "dummy"}).engine_args["hf_overrides"] == {
        "quantization_config": STATIC}
    assert ModelConfig(engine_args={"hf_overrides": {"rope_theta": 1e6}}).engine_args["hf_overrides"]
