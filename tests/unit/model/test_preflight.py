"""Preflight: a config that needs vLLM or GPUs fails at once where they are missing, with how to fix it."""

import asyncio
from pathlib import Path

import pytest
import ray
import yaml

from serve_app.config import AppConfig, ModelConfig
from serve_app.model import preflight

ROOT = Path(__file__).resolve().parents[3]


def config_of(name: str) -> AppConfig:
    doc = yaml.safe_load((ROOT / "configs" / name).read_text())
    return AppConfig.model_validate(doc["applications"][0]["args"])


@pytest.fixture
def local_ray(monkeypatch):
    """A local one-node Ray without GPUs, as seen from build_app (no Ray started)."""
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}, {"Alive": False}])
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv(preflight.SKIP_ENV, raising=False)


@pytest.mark.parametrize(
    "gpus, has_vllm, expected",
    [
        (1, True, []),
        (0, True, ["model_replica.num_gpus is 1 but no GPU is visible"]),
        (1, False, ['model.backend is vllm but vLLM is not installed: pip install ".[gpu]"']),
        (0.5, False, ["vLLM is not installed", "model_replica.num_gpus is 1 but only 0.5 GPUs are visible"]),
    ],
)
def test_problems_of_the_a100_config(gpus, has_vllm, expected):
    found = preflight.problems(config_of("a100.yaml"), gpus, has_vllm)
    assert len(found) == len(expected)
    assert all(e in f for e, f in zip(expected, found, strict=True)), found


def test_cpu_config_needs_nothing():
    assert preflight.problems(config_of("cpu.yaml"), 0, False) == []


def test_local_build_without_gpu_or_vllm_fails_at_once_with_the_fix(local_ray, monkeypatch):
    monkeypatch.setattr(preflight, "vllm_installed", lambda: False)
    with pytest.raises(preflight.HardwareError) as info:
        preflight.check_build(config_of("a100.yaml"))
    text = str(info.value)
    assert "vLLM is not installed" in text and "no GPU is visible" in text
    assert 'pip install ".[gpu]"' in text and "serve run configs/cpu.yaml" in text


def test_build_app_runs_the_preflight(local_ray, monkeypatch):
    from serve_app.app import build_app

    monkeypatch.setattr(preflight, "vllm_installed", lambda: True)
    args = yaml.safe_load((ROOT / "configs" / "a100.yaml").read_text())["applications"][0]["args"]
    with pytest.raises(preflight.HardwareError, match="no GPU is visible"):
        build_app(args)


@pytest.mark.parametrize(
    "env, nodes", [({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, 1), ({}, 2), ({preflight.SKIP_ENV: "0"}, 1)]
)
def test_clusters_are_not_checked_at_build_time(local_ray, monkeypatch, env, nodes):
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}] * nodes)
    monkeypatch.setattr(preflight, "vllm_installed", lambda: False)
    preflight.check_build(config_of("a100.yaml"), env=env)  # no error: GPU pods may scale up later


def test_cpu_config_builds_on_a_machine_without_gpu(local_ray):
    preflight.check_build(config_of("cpu.yaml"))


def test_vllm_replica_without_vllm_or_gpu_fails_before_importing_vllm(monkeypatch):
    import torch

    from serve_app.model.engines.vllm_engine import VLLMEngine

    monkeypatch.setattr(preflight, "vllm_installed", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    engine = VLLMEngine(ModelConfig(backend="vllm", model_id="nvidia/Cosmos-Reason1-7B"))
    with pytest.raises(preflight.HardwareError) as info:
        asyncio.run(engine.start())
    text = str(info.value)
    assert text.startswith("the vLLM model replica cannot start: vLLM is not installed")
    assert "no CUDA GPU is visible (CUDA_VISIBLE_DEVICES=;" in text and 'pip install ".[gpu]"' in text


def test_vllm_replica_with_vllm_but_no_gpu_names_only_the_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(preflight, "vllm_installed", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(preflight.HardwareError, match=r"cannot start: no CUDA GPU is visible") as info:
        preflight.check_replica()
    assert "vLLM is not installed" not in str(info.value)


def test_replica_check_does_not_initialise_cuda(monkeypatch):
    import torch

    def poisoning():
        raise AssertionError("torch.cuda.is_available() runs cuInit and poisons fork for vLLM's engine core")

    monkeypatch.setattr(preflight, "vllm_installed", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", poisoning)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    preflight.check_replica()  # vLLM and one GPU: nothing to report


def test_a_config_whose_replicas_cannot_all_fit_the_node_is_refused_naming_the_asks(local_ray):
    """The asks `configs/cpu.yaml` had (2.1 CPUs on a 2-core laptop): Serve would wait forever for the ingress."""
    args = yaml.safe_load((ROOT / "configs" / "cpu.yaml").read_text())["applications"][0]["args"]
    args["decoder"]["num_cpus"], args["stream_worker"]["num_cpus"] = 0.5, 0.5
    config = AppConfig.model_validate(args)
    assert preflight.reserved_cpus(config) == pytest.approx(2.1)
    with pytest.raises(preflight.HardwareError) as info:
        preflight.check_build(config)
    text = str(info.value)
    assert "reserve 2.1 CPUs at their smallest replica counts" in text and "Ray has 2" in text
    assert "ingress 0.1×1, decoder 0.5×1, model_replica 1×1, stream_worker 0.5×1" in text


def test_the_cpu_config_fits_a_two_core_machine_even_fully_scaled_up():
    config = config_of("cpu.yaml")
    assert preflight.cpu_problems(config, 2.0) == []
    assert preflight.reserved_cpus(config, largest=True) <= 2.0
    assert preflight.replica_counts(config)["decoder"] == (1, 2)
