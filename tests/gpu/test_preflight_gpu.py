"""The model replica's preflight on a real GPU: the right verdict, and CUDA left uninitialised for vLLM.

Needs a CUDA GPU, not vLLM: on a machine without vLLM the check must name
vLLM alone (the GPU is there). Run on the GPU machine:
``python -m pytest tests/gpu/test_preflight_gpu.py``.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()  # NVML: does not initialise CUDA here either
    except Exception:  # noqa: BLE001
        return 0


pytestmark = pytest.mark.skipif(_gpus() == 0, reason="GPU test: no CUDA GPU")

# In a fresh interpreter: the preflight, then a fork whose child uses the GPU, as
# vLLM's AsyncLLM does when it starts its engine-core process.
FORK_PROBE = """
import os, sys, torch
from serve_app.model import preflight
try:
    preflight.check_replica()
except preflight.HardwareError as exc:
    print("preflight:", exc)
{before_fork}
print("parent cuda initialised:", torch.cuda.is_initialized())
pid = os.fork()
if pid == 0:
    try:
        ok = torch.ones(4, device="cuda").sum().item() == 4
    except Exception as exc:
        print("child:", type(exc).__name__, exc)
        ok = False
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
print("child exit:", os.waitstatus_to_exitcode(status))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_replica_check_names_only_what_is_missing_here():
    from serve_app.model import preflight

    if importlib.util.find_spec("vllm") is not None:
        preflight.check_replica()  # vLLM and a GPU: nothing to report
        return
    with pytest.raises(preflight.HardwareError) as info:
        preflight.check_replica()
    text = str(info.value)
    assert "vLLM is not installed" in text and 'pip install ".[gpu]"' in text
    assert "no CUDA GPU" not in text


def test_preflight_leaves_cuda_to_the_forked_engine_core():
    out = subprocess.run(
        [sys.executable, "-c", FORK_PROBE.format(before_fork="")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "parent cuda initialised: False" in out.stdout, out.stdout + out.stderr
    assert out.returncode == 0, out.stdout + out.stderr


HOLDER = """
import sys, time, torch
free, total = torch.cuda.mem_get_info()
block = torch.empty(int(total * 0.5), dtype=torch.uint8, device="cuda")  # half the GPU
print("holding", flush=True)
time.sleep(120)
"""


def test_a_gpu_held_by_another_process_fails_the_start_naming_its_pid():
    # Not run in the session that wrote it (its device time was spent): run with tests/gpu.
    from serve_app.model.preflight import HardwareError, check_gpu_free

    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(HardwareError, match=rf"pid {holder.pid} \(python"):
            check_gpu_free(0.9, grace_s=1)
    finally:
        holder.kill()
        holder.wait(30)
    check_gpu_free(0.4, grace_s=15)  # memory back once the holder is gone: no error


def _smi_capabilities() -> list[int]:
    """Each GPU's compute capability from ``nvidia-smi --query-gpu=compute_cap`` (a second reader, not NVML's
    Python binding), major × 10 + minor, in nvidia-smi's index order."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return [int(major) * 10 + int(minor) for major, minor in (line.split(".") for line in out.split())]


def test_nvml_capabilities_match_nvidia_smi():
    from serve_app.model.preflight import read_gpu_capabilities

    smi = _smi_capabilities()
    assert read_gpu_capabilities(visible=",".join(str(i) for i in range(len(smi)))) == smi
    assert read_gpu_capabilities(visible="") == []  # CUDA_VISIBLE_DEVICES="": no GPU for this process


def test_fp8_verdict_follows_the_gpu():
    from serve_app.model.preflight import FP8_MIN_CAPABILITY, HardwareError, check_fp8
    from serve_app.model.quantization import QUANTIZATION_FP8

    if all(c >= FP8_MIN_CAPABILITY for c in _smi_capabilities()):
        check_fp8(QUANTIZATION_FP8)  # Ada / Hopper: fp8 compute, no error
    else:
        with pytest.raises(HardwareError, match="weight-only"):
            check_fp8(QUANTIZATION_FP8)


def test_preflight_cli_fp8_line_follows_the_gpu():
    from serve_app.model.preflight import FP8_MIN_CAPABILITY

    # The CLI may report other things on this machine (CPUs, GPUs held); only its fp8 line is asserted.
    out = subprocess.run([sys.executable, "-m", "serve_app.preflight", "configs/h200-fp8.yaml"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    # The fp8 line is checked only where the replica fits (one GPU, vLLM installed): the GPU machine's case.
    assert "cannot run the model replica" not in out.stderr, out.stderr
    refused = "in fp8" in out.stderr and "weight-only" in out.stderr
    assert refused == any(c < FP8_MIN_CAPABILITY for c in _smi_capabilities()), out.stderr
    assert out.returncode in (0, 1), out.stderr
