"""``python -m serve_app.preflight CONFIG``: before deploying, a GPU config on a machine without the GPU
(or vLLM) exits non-zero with the preflight's message and no traceback; a config that fits exits 0 with one line.

The command runs in its own process (no Ray is started, none is shared with other tests); the
machine is made GPU-less for it with ``CUDA_VISIBLE_DEVICES=""``, so the outcome does not depend on
the machine the test runs on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ray.serve.exceptions import RayServeException

from serve_app.model import preflight, preflight_cli

ROOT = Path(__file__).resolve().parents[3]
#: Generous: a cold Python start plus imports on a loaded 2-core machine (it takes about 0.5 s idle).
COMMAND_TIMEOUT_S = 120


def run_preflight(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU for this process, whatever the machine has
    return subprocess.run(
        [sys.executable, "-m", "serve_app.preflight", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
    )  # fmt: skip


@pytest.mark.parametrize("config", ["a100.yaml", "h200.yaml"])
def test_gpu_config_without_a_gpu_exits_1_with_the_message(config):
    r = run_preflight(f"configs/{config}")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert f"this machine cannot run the model replica of configs/{config}" in r.stderr
    assert "model_replica.num_gpus is 1 but no GPU is visible" in r.stderr
    assert "serve run configs/cpu.yaml" in r.stderr and 'pip install ".[gpu]"' in r.stderr
    assert "Traceback" not in r.stderr


def test_cpu_config_exits_0_with_one_ok_line():
    r = run_preflight("configs/cpu.yaml")
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("OK: configs/cpu.yaml fits this machine (0 GPUs")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read"),
        ("applications: [", "is not valid YAML"),
        ("proxy_location: EveryNode\n", "no 'applications:' list"),
        ("applications:\n  - import_path: other.app:build\n", "no application with import_path"),
        (
            "applications:\n  - name: x\n    import_path: serve_app.app:build_app\n    args: {model: {colour: red}}\n",
            "application 'x': args.model.colour: Extra inputs are not permitted",
        ),
    ],
)
def test_bad_config_files_exit_2_naming_the_problem(tmp_path, content, expected):
    path = tmp_path / "serve.yaml"
    if content is not None:
        path.write_text(content)
    r = run_preflight(str(path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expected in r.stderr and "Traceback" not in r.stderr


def test_check_file_on_a_gpu_machine_finds_nothing():
    assert preflight_cli.check_file(ROOT / "configs" / "a100.yaml", gpus=1, cpus=16, has_vllm=True) == []


def test_check_file_names_every_shortfall():
    found = preflight_cli.check_file(ROOT / "configs" / "a100.yaml", gpus=1, cpus=2, has_vllm=False)
    assert len(found) == 2
    assert "vLLM is not installed" in found[0] and "no GPU" not in found[0]
    assert "reserve 6 CPUs" in found[1] and "has 2" in found[1]


def test_local_gpus_respects_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert preflight_cli.local_gpus() == 0


def test_build_refusal_is_a_serve_exception_carrying_the_message(monkeypatch):
    """Serve's controller reports a RayServeException raised by the builder as the app's status message,
    as is (no traceback, no retries of the build task); build_app's refusal must be one."""
    import ray

    from serve_app.app import BuildRefusedError, build_app

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}])
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0})
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv(preflight.SKIP_ENV, raising=False)
    monkeypatch.setattr(preflight, "vllm_installed", lambda: True)
    args = yaml.safe_load((ROOT / "configs" / "a100.yaml").read_text())["applications"][0]["args"]
    with pytest.raises(RayServeException) as info:
        build_app(args)
    assert isinstance(info.value, BuildRefusedError) and isinstance(info.value, preflight.HardwareError)
    text = str(info.value)
    assert "no GPU is visible" in text and "python -m serve_app.preflight CONFIG" in text


def test_a_gpu_held_by_another_process_is_named_before_deploying(tmp_path):
    from serve_app.model.preflight import GpuHolder, GpuMemory
    from serve_app.model.preflight_cli import check_file

    cfg = tmp_path / "gpu.yaml"
    cfg.write_text(
        "applications:\n  - name: a\n    import_path: serve_app.app:build_app\n    args:\n"
        "      model: {backend: vllm, engine_args: {gpu_memory_utilization: 0.9}}\n"
        "      model_replica: {num_gpus: 1}\n"
    )
    gib = 1024**3
    held = GpuMemory(0, 140 * gib, 5 * gib, (GpuHolder(4242, "VLLM::EngineCore", 130 * gib),))
    free = GpuMemory(1, 140 * gib, 139 * gib, ())
    [msg] = check_file(cfg, gpus=1, cpus=64, has_vllm=True, gpu_memory=[held])
    assert "pid 4242 (VLLM::EngineCore" in msg and "kill 4242" in msg
    assert check_file(cfg, gpus=2, cpus=64, has_vllm=True, gpu_memory=[held, free]) == []  # one GPU is enough
    assert check_file(cfg, gpus=1, cpus=64, has_vllm=True) == []  # memory not read: not checked


def test_fp8_on_an_ampere_machine_is_refused_before_deploying(tmp_path):
    """``configs/h100-fp8.yaml`` on an A100, or a calibrated fp8 checkpoint in the bf16 config there: refused with
    the reason (vLLM would run it weight-only); on a Hopper machine, or capabilities unread, nothing."""
    from serve_app.model.preflight_cli import check_file

    fp8_config = ROOT / "configs" / "h100-fp8.yaml"
    [msg] = check_file(fp8_config, gpus=1, cpus=64, has_vllm=True, capabilities=[80])
    assert "will not run the model replica of" in msg and "in fp8" in msg
    assert "compute capability 8.0" in msg and "remove quantization" in msg
    assert check_file(fp8_config, gpus=1, cpus=64, has_vllm=True, capabilities=[90]) == []
    assert check_file(fp8_config, gpus=1, cpus=64, has_vllm=True) == []  # capabilities not read: not checked
    assert check_file(ROOT / "configs" / "a100.yaml", gpus=1, cpus=64, has_vllm=True, capabilities=[80]) == []

    ckpt = tmp_path / "cosmos-fp8"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(
        '{"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",'
        ' "quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}}'
    )
    cfg = tmp_path / "a100-calibrated.yaml"
    doc = yaml.safe_load((ROOT / "configs" / "a100.yaml").read_text())
    doc["applications"][0]["args"]["model"]["model_id"] = str(ckpt)
    cfg.write_text(yaml.safe_dump(doc))
    [msg] = check_file(cfg, gpus=1, cpus=64, has_vllm=True, capabilities=[80])
    assert "the checkpoint's quantization_config (fp8, static activation scales)" in msg
    assert "serve the bf16 checkpoint" in msg and "remove quantization" not in msg
