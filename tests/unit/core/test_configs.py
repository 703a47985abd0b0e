"""Every configs/*.yaml loads with Ray Serve's own config schema, and its args with AppConfig.

Ray's ServeDeploySchema accepts unknown keys (forward compatibility), and its
AutoscalingConfig ignores them, so the tests also hold each key against the
field names of Ray's own models: a misspelled key fails here, not on a cluster.
"""

from pathlib import Path

import pytest
import yaml
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import DeploymentSchema, ServeApplicationSchema, ServeDeploySchema

from serve_app.config import AppConfig

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
DEPLOYMENTS = {
    "ingress": "Ingress", "decoder": "VideoDecoder", "model_replica": "VideoModel", "stream_worker": "StreamWorker",
}


def serve_config_problems(doc: dict) -> list[str]:
    """Problems of a Serve config under Ray's schemas plus unknown-key checks (empty: valid).

    Raises:
        pydantic.ValidationError: Ray's ServeDeploySchema or the project's AppConfig rejects it.
    """
    ServeDeploySchema.model_validate(doc)
    problems = [f"unknown top-level key {k!r}" for k in doc if k not in ServeDeploySchema.model_fields]
    for i, app in enumerate(doc["applications"]):
        problems += [
            f"applications[{i}]: unknown key {k!r}" for k in app if k not in ServeApplicationSchema.model_fields
        ]
        config = AppConfig.model_validate(app.get("args") or {})
        for field, name in DEPLOYMENTS.items():
            options = getattr(config, field).ray_options()
            DeploymentSchema.model_validate({"name": name, **options})
            scaling = options.get("autoscaling_config") or {}
            problems += [
                f"applications[{i}].args.{field}.autoscaling_config: unknown key {k!r}"
                for k in scaling
                if k not in AutoscalingConfig.model_fields
            ]
            if scaling:
                AutoscalingConfig.model_validate(scaling)
    return problems


def test_configs_exist():
    names = {p.name for p in CONFIGS}
    assert {"cpu.yaml", "a100.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_loads_with_ray_schema_and_app_config(path):
    doc = yaml.safe_load(path.read_text())
    assert serve_config_problems(doc) == []
    for app in doc["applications"]:
        assert app["import_path"] == "serve_app.app:build_app"


def test_misspelled_top_level_key_is_reported():
    doc = yaml.safe_load((ROOT / "configs" / "a100.yaml").read_text())
    doc["proxy_locaton"] = doc.pop("proxy_location")
    assert serve_config_problems(doc) == ["unknown top-level key 'proxy_locaton'"]


def test_misspelled_autoscaling_key_is_reported():
    doc = yaml.safe_load((ROOT / "configs" / "a100.yaml").read_text())
    scaling = doc["applications"][0]["args"]["decoder"]["autoscaling_config"]
    scaling["target_ongoing_request"] = scaling.pop("target_ongoing_requests")
    assert serve_config_problems(doc) == [
        "applications[0].args.decoder.autoscaling_config: unknown key 'target_ongoing_request'"
    ]


def test_ray_schema_rejects_a_bad_value():
    doc = yaml.safe_load((ROOT / "configs" / "a100.yaml").read_text())
    doc["proxy_location"] = "Everywhere"
    with pytest.raises(ValueError, match="proxy_location"):
        serve_config_problems(doc)


def test_app_config_rejects_a_misspelled_arg():
    doc = yaml.safe_load((ROOT / "configs" / "a100.yaml").read_text())
    doc["applications"][0]["args"]["decode"]["max_frame"] = 64
    with pytest.raises(ValueError, match="max_frame"):
        serve_config_problems(doc)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_states_the_model_context(path):
    """Issue 13: a clip over the context is refused before the engine only if the config states it
    (vLLM: engine_args.max_model_len; the CPU engine: model.max_model_len)."""
    for app in yaml.safe_load(path.read_text())["applications"]:
        assert AppConfig.model_validate(app.get("args") or {}).model.context_tokens, path.name


VLLM_CONFIGS = [p for p in CONFIGS
                if any((app.get("args") or {}).get("model", {}).get("backend") == "vllm"
                       for app in yaml.safe_load(p.read_text())["applications"])]


@pytest.mark.parametrize("path", VLLM_CONFIGS, ids=lambda p: p.name)
def test_vllm_configs_size_the_replica_and_the_sweep_by_max_num_seqs(path):
    """The model replica admits as many requests as vLLM runs at once, and the decode sweep (where on) warms every
    batch size up to it: a config that raises ``max_num_seqs`` (2026-12-07: 128 -> 256 on the H200 configs,
    results/gpu/fleet-lease20/) without the other two would queue in Serve or meet a cold batch size."""
    for app in yaml.safe_load(path.read_text())["applications"]:
        config = AppConfig.model_validate(app["args"])
        seqs = config.model.engine_args["max_num_seqs"]
        assert config.model_replica.max_ongoing_requests == seqs, path.name
        assert config.model.warmup_decode_sweep in (0, seqs), path.name


@pytest.mark.parametrize("suffix", ["", "-fp8"])
def test_h100_configs_run_the_model_settings_measured_on_an_h100(suffix):
    """Every H100 figure since the thirteenth lease ran ``configs/h200*.yaml``'s model settings on an H100 80GB
    (results/gpu/fleet-lease13 to -lease21); until 2026-12-07 ``h100.yaml`` kept older ones (``max_num_seqs`` 96,
    the HF processor, no vision-tower compile) that no lease measured. The two stay equal in the model and the
    model replica; the decode tier may differ (host cores)."""
    h100, h200 = ({app["name"]: app["args"] for app in yaml.safe_load(
        (ROOT / "configs" / f"{card}{suffix}.yaml").read_text())["applications"]} for card in ("h100", "h200"))
    assert h100.keys() == h200.keys()
    for name in h100:
        for section in ("model", "model_replica"):
            assert h100[name][section] == h200[name][section], f"h100{suffix}.yaml {name} {section}"
