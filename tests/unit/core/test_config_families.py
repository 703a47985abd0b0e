"""``model.family``: how a config says which model family it serves, and the defaults that follow."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from serve_app.config import AppConfig
from serve_app.config.families import DEFAULTS, check_family, resolve_family
from serve_app.protocol import FrameGeometry


def checkpoint_dir(tmp_path, architectures):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": architectures}))
    return str(d)


@pytest.mark.parametrize(
    ("architectures", "family"),
    [
        (["Qwen2_5_VLForConditionalGeneration"], "qwen2_5_vl"),
        (["Qwen3VLForConditionalGeneration"], "qwen3_vl"),
        (["Cosmos3ForConditionalGeneration"], "qwen3_vl"),  # vLLM 0.24's Cosmos 3 reasoner class
    ],
)
def test_auto_reads_the_architectures_of_a_local_checkpoint(tmp_path, architectures, family):
    config = AppConfig.model_validate({"model": {"model_id": checkpoint_dir(tmp_path, architectures)}})
    assert config.model.family == family


def test_an_unsupported_architecture_is_refused_naming_it_and_the_supported_ones(tmp_path):
    with pytest.raises(ValidationError) as e:
        AppConfig.model_validate({"model": {"model_id": checkpoint_dir(tmp_path, ["LlavaForConditionalGeneration"])}})
    message = str(e.value)
    assert "LlavaForConditionalGeneration" in message and "Qwen3VLForConditionalGeneration" in message
    assert str(tmp_path) not in message  # no server path in the error


@pytest.mark.parametrize(
    ("model_id", "family"),
    [
        ("nvidia/Cosmos-Reason1-7B", "qwen2_5_vl"),
        ("nvidia/Cosmos-Reason2-8B", "qwen3_vl"),
        ("nvidia/cosmos-reason2-2b", "qwen3_vl"),
        ("Qwen/Qwen3-VL-8B-Instruct", "qwen3_vl"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl"),
    ],
)
def test_auto_knows_the_hub_ids_of_both_families(model_id, family):
    assert resolve_family("auto", model_id, generated=False) == family


def test_an_unknown_hub_id_asks_for_model_family():
    with pytest.raises(ValueError, match=r"set model\.family"):
        resolve_family("auto", "someone/some-vlm", generated=False)


def test_a_local_path_this_machine_cannot_read_takes_the_default_family_and_the_replica_checks_it():
    assert resolve_family("auto", "/models/on-another-node", generated=False) == "qwen2_5_vl"
    check_family(["Qwen2_5_VLForConditionalGeneration"], "qwen2_5_vl", "checkpoint x")
    with pytest.raises(ValueError, match=r"set model\.family: qwen3_vl"):
        check_family(["Qwen3VLForConditionalGeneration"], "qwen2_5_vl", "checkpoint x")


def test_qwen3_vl_fills_its_recipe_where_the_config_is_silent():
    config = AppConfig.model_validate({"model": {"family": "qwen3_vl", "backend": "transformers"}})
    m, d = config.model, DEFAULTS["qwen3_vl"]
    assert m.geometry == FrameGeometry(pixel_factor=32, temporal_patch=2)
    assert m.system_prompt == "You are a helpful assistant."
    assert (m.sampling.temperature, m.sampling.top_p, m.sampling.top_k) == (0.7, 0.8, 20)
    assert m.sampling.presence_penalty == 1.5 and m.sampling.repetition_penalty == 1.0
    assert tuple(m.warmup_clip_shape) == (2, 320, 320)
    b = config.decode.budget
    assert (b.total_pixels, b.max_frame_pixels, b.min_frame_pixels) == (
        d.total_pixels, d.max_frame_pixels, d.min_frame_pixels)
    # 8192·32² over t·h·w (the recipe's processor size), counted per frame pair here
    assert b.total_pixels * 2 == 8192 * 32 * 32


def test_settings_the_config_gives_are_kept_and_missing_sampling_fields_come_from_the_family():
    config = AppConfig.model_validate({
        "model": {"family": "qwen3_vl", "backend": "transformers", "system_prompt": "Be brief.",
                  "sampling": {"temperature": 0.2}},
        "decode": {"budget": {"total_pixels": 1_000_000}},
    })
    assert config.model.system_prompt == "Be brief."
    assert config.model.sampling.temperature == 0.2 and config.model.sampling.top_k == 20
    assert config.decode.budget.total_pixels == 1_000_000


def test_qwen2_5_vl_defaults_are_unchanged():
    config = AppConfig()
    assert config.model.family == "qwen2_5_vl"
    assert config.model.geometry == FrameGeometry(28, 2)
    assert config.decode.budget.total_pixels == 8192 * 28 * 28
    assert config.model.sampling.top_k == 0 and config.model.sampling.repetition_penalty == 1.05


def test_a_resolved_config_survives_the_round_trip_to_a_replica():
    config = AppConfig.model_validate({"model": {"model_id": "nvidia/Cosmos-Reason2-8B"}})
    again = AppConfig.model_validate(config.model_dump())
    assert again == config and again.model.family == "qwen3_vl"


@pytest.mark.parametrize("setting", [{"vision_input": "patches"}, {"patchify": "table"}])
def test_the_project_patchify_is_refused_for_qwen3_vl(setting):
    with pytest.raises(ValidationError, match=r"patchify is Qwen2\.5-VL"):
        AppConfig.model_validate({"model": {"family": "qwen3_vl", "backend": "vllm", **setting}})


def test_a_qwen3_warmup_shape_must_be_a_32_pixel_multiple():
    with pytest.raises(ValidationError, match="multiples of 32"):
        AppConfig.model_validate({"model": {"family": "qwen3_vl", "warmup_clip_shape": [2, 336, 336]}})


def test_a_family_the_local_checkpoint_contradicts_is_refused_when_the_config_loads(tmp_path):
    path = checkpoint_dir(tmp_path, ["Qwen3VLForConditionalGeneration"])
    with pytest.raises(ValidationError, match=r"set model\.family: qwen3_vl"):
        AppConfig.model_validate({"model": {"model_id": path, "family": "qwen2_5_vl"}})
    assert AppConfig.model_validate({"model": {"model_id": path, "family": "qwen3_vl"}}).model.family == "qwen3_vl"


def test_a_config_json_that_is_not_an_object_is_refused_without_a_traceback(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text("[1, 2]")
    with pytest.raises(ValidationError, match="cannot be read as a JSON object"):
        AppConfig.model_validate({"model": {"model_id": str(d)}})
