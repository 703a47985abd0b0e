"""Preflight: the hardware and packages a config needs are there, or a message that says how to fix it.

Two places check, because a cluster and a laptop differ:

* :func:`check_build` runs in ``build_app``. On a local one-node Ray (``serve
  run configs/a100.yaml`` on a workstation) it refuses at once a config whose
  model replica needs vLLM or GPUs the node does not have, instead of Serve
  waiting forever for a GPU that will never come. In a cluster it does nothing:
  the head that builds the app has no GPU and GPU pods may scale up from zero.
  It also refuses a config whose deployments reserve more CPUs at their smallest
  replica counts than the local node has (Serve would wait forever for the last
  replica, typically the ingress, and the app would never answer).
* :func:`check_replica` runs first thing in a model replica (the vLLM engine's
  ``start``): a replica without vLLM or without a visible CUDA GPU fails at once
  with the same kind of message, wherever it runs; so does one whose GPU another
  process holds (:func:`check_gpu_free`: the message names the holder's pid, instead
  of vLLM's generic not-enough-free-memory error a minute later).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from serve_app.config import AppConfig
from serve_app.log_limit import get_logger
from serve_app.model.quantization import Fp8Source

logger = get_logger(__name__)

GPU_INSTALL = 'pip install ".[gpu]"'
CPU_CONFIG = "configs/cpu.yaml"
#: Set to 0 to skip :func:`check_build` (e.g. a VM cluster whose GPU nodes scale up from zero).
SKIP_ENV = "COSMOS_SERVE_PREFLIGHT"


class HardwareError(RuntimeError):
    """The config needs a package or a device that is missing here (the message says what and how to fix it)."""


def vllm_installed() -> bool:
    """True when ``import vllm`` can find the package (nothing is imported)."""
    return importlib.util.find_spec("vllm") is not None


def problems(config: AppConfig, gpus: float, has_vllm: bool) -> list[str]:
    """What the model replica of ``config`` lacks on a node with ``gpus`` GPUs (pure; empty: nothing).

    Args:
        config: the application's config.
        gpus: GPUs Ray can give a replica there (count).
        has_vllm: whether vLLM is importable there.
    """
    found = []
    if config.model.backend == "vllm" and not has_vllm:
        found.append(f"model.backend is vllm but vLLM is not installed: {GPU_INSTALL} (vLLM 0.24.0, CUDA 13)")
    need = config.model_replica.num_gpus
    if need > 0 and gpus < need:
        found.append(
            f"model_replica.num_gpus is {need:g} but {'no GPU is' if gpus == 0 else f'only {gpus:g} GPUs are'} "
            "visible (an NVIDIA GPU with a CUDA 13 driver, R580+)"
        )
    return found


#: The app's deployments, by config field.
DEPLOYMENT_FIELDS = ("ingress", "decoder", "model_replica", "stream_worker")


def replica_counts(config: AppConfig) -> dict[str, tuple[int, int]]:
    """``(smallest, largest)`` replica count of each deployment (fixed: ``num_replicas``; autoscaled:
    ``min_replicas`` and ``max_replicas``, Ray Serve's defaults 1 and 1 when absent); ``stream_worker``
    counts its ``streams.workers`` deployments together."""
    out = {}
    for field in DEPLOYMENT_FIELDS:
        d = getattr(config, field)
        k = config.streams.workers if field == "stream_worker" else 1
        if d.autoscaling_config is None:
            n = d.num_replicas or 1
            out[field] = (n * k, n * k)
        else:
            lo = int(d.autoscaling_config.get("min_replicas", 1))
            out[field] = (lo * k, max(lo, int(d.autoscaling_config.get("max_replicas", 1))) * k)
    return out


def reserved_cpus(config: AppConfig, largest: bool = False) -> float:
    """CPUs the deployments reserve (``num_cpus`` × replicas) at their smallest (or largest) replica counts."""
    counts = replica_counts(config)
    total: float = sum(getattr(config, f).num_cpus * counts[f][1 if largest else 0] for f in DEPLOYMENT_FIELDS)
    return total


def cpu_problems(config: AppConfig, cpus: float) -> list[str]:
    """The CPU shortfall of ``config`` on a node whose Ray has ``cpus`` CPUs (pure; empty: it fits)."""
    need = reserved_cpus(config)
    if need <= cpus + 1e-9:
        return []
    counts = replica_counts(config)
    parts = ", ".join(f"{f} {getattr(config, f).num_cpus:g}×{counts[f][0]}" for f in DEPLOYMENT_FIELDS)
    return [
        f"the deployments reserve {need:g} CPUs at their smallest replica counts ({parts}) but this machine's "
        f"Ray has {cpus:g}: lower their num_cpus (fractions are fine) or min_replicas"
    ]


def message(found: list[str], where: str) -> str:
    """One error message: what is missing ``where``, how to install it, and the CPU alternative."""
    lines = "; ".join(found)
    return (
        f"{where}: {lines}. On a GPU machine: {GPU_INSTALL}. Without a GPU: serve run {CPU_CONFIG} "
        "(the same graph on CPU with a tiny random-weight model)."
    )


def _in_cluster(env: Mapping[str, str], alive_nodes: int) -> bool:
    return "KUBERNETES_SERVICE_HOST" in env or alive_nodes > 1


def check_build(config: AppConfig, env: Mapping[str, str] | None = None) -> None:
    """Refuses, on a local one-node Ray, a config whose model replica cannot run there.

    Skipped in a cluster (a Kubernetes pod, or more than one Ray node), when
    ``COSMOS_SERVE_PREFLIGHT=0``, or when the config needs neither vLLM nor GPUs.

    Raises:
        HardwareError: vLLM or GPUs are missing on the local node, or its CPUs cannot hold every
            deployment at its smallest replica count.
    """
    env = os.environ if env is None else env
    if env.get(SKIP_ENV) == "0":
        return
    import ray

    if not ray.is_initialized():
        return  # built outside Ray (tests, tooling): nothing to ask
    alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]  # unannotated in Ray
    if _in_cluster(env, len(alive)):
        return
    resources = ray.cluster_resources()  # type: ignore[no-untyped-call]  # unannotated in Ray
    if config.model.backend == "vllm" or config.model_replica.num_gpus > 0:
        found = problems(config, float(resources.get("GPU", 0)), vllm_installed())
        if found:
            raise HardwareError(message(found, "this machine cannot run the config's model replica"))
    if found := cpu_problems(config, float(resources.get("CPU", 0))):
        raise HardwareError(f"this machine cannot run the config's deployments: {found[0]}")


def check_replica() -> None:
    """First thing in a vLLM model replica: vLLM importable and a CUDA GPU visible to this process.

    Raises:
        HardwareError: vLLM is not installed, or no CUDA GPU is visible.
    """
    found = []
    if not vllm_installed():
        found.append(f"vLLM is not installed in this replica's Python: {GPU_INSTALL} (or use the GPU image)")
    import torch

    # device_count() asks NVML, not the CUDA runtime: torch.cuda.is_available() would call cuInit here
    # and "poison fork" for the engine-core process vLLM starts next (torch/cuda/__init__.py notes both).
    if torch.cuda.device_count() == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
        found.append(f"no CUDA GPU is visible (CUDA_VISIBLE_DEVICES={visible}; an NVIDIA driver with CUDA 13, R580+)")
    if found:
        raise HardwareError(message(found, "the vLLM model replica cannot start"))


#: vLLM's default ``gpu_memory_utilization`` (``vllm/config/cache.py``, 0.9): the fraction of the GPU's
#: total memory the engine asks for at start, which must be free then (``request_memory`` in
#: ``vllm/v1/worker/utils.py`` refuses to start otherwise).
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: Seconds :func:`check_gpu_free` waits for a holder to let go before it fails (an engine core of a
#: replica that was just killed takes a moment to exit and release its memory).
HOLDER_GRACE_S = 10.0
_GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class GpuHolder:
    """A process that holds memory on a GPU (from NVML).

    Attributes:
        pid: its process id (as NVML reports it: the host's pid when this runs in a container).
        name: its command name (``VLLM::EngineCore``...), or ``?`` when this process cannot see it.
        used_bytes: device memory it holds, bytes (None when the driver does not say).
    """

    pid: int
    name: str
    used_bytes: int | None


@dataclasses.dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory as NVML reports it: ``index`` (NVML's), ``total_bytes``, ``free_bytes``, ``holders``."""

    index: int
    total_bytes: int
    free_bytes: int
    holders: tuple[GpuHolder, ...]


def gpu_memory_problems(gpus: Sequence[GpuMemory], utilization: float) -> list[str]:
    """What keeps a vLLM engine asking for ``utilization`` × total memory from starting on ``gpus`` (pure).

    Args:
        gpus: the replica's GPUs.
        utilization: ``gpu_memory_utilization`` (0..1].

    Returns:
        One line per GPU whose free memory is short, naming the processes that hold it; empty when all fit.
    """
    found = []
    for g in gpus:
        need = g.total_bytes * utilization
        if g.free_bytes >= need:
            continue
        held = ", ".join(
            f"pid {h.pid} ({h.name}"
            + (f", {h.used_bytes / _GIB:.1f} GiB)" if h.used_bytes is not None else ")")
            for h in g.holders
        ) or "no process this driver lists (another container, or memory being freed)"
        pids = " ".join(str(h.pid) for h in g.holders)
        fix = f"stop it (e.g. `kill {pids}`; a VLLM::EngineCore is a vLLM engine left by an earlier run)" if pids else (
            "free it")
        found.append(
            f"GPU {g.index} has {g.free_bytes / _GIB:.1f} GiB free of {g.total_bytes / _GIB:.1f} GiB but the engine "
            f"asks for gpu_memory_utilization {utilization:g} = {need / _GIB:.1f} GiB; held by {held}: {fix}, "
            "or lower model.engine_args.gpu_memory_utilization"
        )
    return found


def _process_name(pid: int) -> str:
    """``pid``'s command name from /proc, or ``?`` when this process cannot see it."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() or "?"
    except OSError:
        return "?"


def read_gpu_memory(visible: str | None = None) -> list[GpuMemory]:
    """The memory of the GPUs this process may use, from NVML (no CUDA context is made).

    Args:
        visible: ``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-...`` UUIDs); default: the environment's.
            Unset: every GPU.

    Raises:
        ImportError: no NVML binding (``nvidia-ml-py``, a vLLM dependency) is installed.
        OSError: NVML failed (no driver, an unknown device id).
    """
    import pynvml

    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    try:
        return _read_nvml(pynvml, visible)
    except pynvml.NVMLError as e:
        raise OSError(f"NVML: {e}") from e


def _read_nvml(pynvml: Any, visible: str | None) -> list[GpuMemory]:
    """:func:`read_gpu_memory`'s NVML calls (raises ``pynvml.NVMLError``)."""
    pynvml.nvmlInit()
    try:
        if visible is None:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        else:
            ids = [v.strip() for v in visible.split(",") if v.strip()]
            handles = [
                pynvml.nvmlDeviceGetHandleByUUID(v) if v.startswith(("GPU-", "MIG-"))
                else pynvml.nvmlDeviceGetHandleByIndex(int(v))
                for v in ids
            ]
        out = []
        for h in handles:
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            holders = tuple(
                GpuHolder(int(p.pid), _process_name(int(p.pid)), getattr(p, "usedGpuMemory", None)) for p in procs
            )
            out.append(GpuMemory(int(pynvml.nvmlDeviceGetIndex(h)), int(mem.total), int(mem.free), holders))
        return out
    finally:
        pynvml.nvmlShutdown()


def check_gpu_free(
    utilization: float,
    grace_s: float = HOLDER_GRACE_S,
    read: Callable[[], list[GpuMemory]] = read_gpu_memory,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Fails at once when other processes hold the memory a vLLM engine needs on this replica's GPUs.

    Re-reads every 0.5 s for up to ``grace_s`` seconds first (a killed replica's engine core takes a
    moment to release its memory). Skipped (with a log line) when NVML cannot be read.

    Args:
        utilization: the engine's ``gpu_memory_utilization``.
        grace_s: seconds to wait for a holder to let go.
        read: the NVML reader (tests pass their own).
        sleep: the wait (tests pass their own).

    Raises:
        HardwareError: the memory is still held after ``grace_s``; the message names the holders' pids.
    """
    try:
        found = gpu_memory_problems(read(), utilization)
        waited = 0.0
        while found and waited < grace_s:
            sleep(0.5)
            waited += 0.5
            found = gpu_memory_problems(read(), utilization)
    except (ImportError, OSError, ValueError) as e:  # no NVML binding or driver: vLLM's own check still runs
        logger.info("GPU memory preflight skipped: %s", e)
        return
    if found:
        raise HardwareError(f"the vLLM model replica cannot start: {'; '.join(found)} (waited {waited:g} s)")


#: Lowest CUDA compute capability (major × 10 + minor) whose GPUs multiply in fp8 (Ada 8.9, Hopper 9.0).
#: Below it vLLM 0.24 runs ``quantization: fp8`` through its "FP8 Marlin kernel for GPUs that lack FP8
#: hardware support" (``vllm/model_executor/kernels/linear/scaled_mm/marlin.py``, chosen below
#: capability 89): weight-only fp8, activations in bf16 — half the weight memory, no faster prefill.
FP8_MIN_CAPABILITY = 89


def fp8_problems(source: Fp8Source | None, capabilities: Sequence[int]) -> list[str]:
    """Why the engine's fp8 cannot run as fp8 compute on these GPUs (pure).

    Args:
        source: where the fp8 comes from (:func:`serve_app.model.quantization.fp8_source`: ``quantization: fp8``,
            an ``hf_overrides`` or checkpoint ``quantization_config``), None for no fp8.
        capabilities: each of the replica's GPUs' compute capability, major × 10 + minor (A100: 80).

    Returns:
        One line per GPU below :data:`FP8_MIN_CAPABILITY` when ``source`` is set, naming the source and its fix;
        else empty.
    """
    if source is None:
        return []
    return [
        f"GPU {i} has compute capability {c // 10}.{c % 10}: vLLM runs fp8 ({source.where}) there as weight-only "
        "fp8 (Marlin kernels, activations in bf16): less weight memory but no faster prefill. fp8 needs "
        f"compute capability 8.9+ (Ada, Hopper: configs/h100-fp8.yaml, configs/h200-fp8.yaml); {source.fix}"
        for i, c in enumerate(capabilities) if c < FP8_MIN_CAPABILITY
    ]


def read_gpu_capabilities(visible: str | None = None) -> list[int]:
    """Compute capability (major × 10 + minor) of this process's GPUs from NVML, in ``CUDA_VISIBLE_DEVICES``
    order (numeric indexes or UUIDs); NVML, not CUDA, so no CUDA context is made before vLLM forks.

    Raises:
        ImportError: the NVML binding (``nvidia-ml-py``) is not installed.
        OSError: NVML cannot be read (no driver), as ``pynvml.NVMLError``'s message.
    """
    import pynvml

    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    try:
        pynvml.nvmlInit()
        try:
            if visible is None:
                handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            else:
                handles = [
                    pynvml.nvmlDeviceGetHandleByUUID(v) if v.startswith(("GPU-", "MIG-"))
                    else pynvml.nvmlDeviceGetHandleByIndex(int(v))
                    for v in (x.strip() for x in visible.split(",")) if v
                ]
            out = []
            for h in handles:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                out.append(int(major) * 10 + int(minor))
            return out
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError as e:
        raise OSError(str(e)) from e


def check_fp8(source: Fp8Source | None, read: Callable[[], list[int]] = read_gpu_capabilities) -> None:
    """Fails at once when the engine's fp8 (``source``, see :func:`fp8_problems`) would run weight-only on this
    replica's GPUs.

    Skipped (with a log line) when NVML cannot be read.

    Raises:
        HardwareError: a GPU's compute capability is below :data:`FP8_MIN_CAPABILITY`; the message says why.
    """
    if source is None:
        return
    try:
        found = fp8_problems(source, read())
    except (ImportError, OSError, ValueError) as e:
        logger.info("fp8 preflight skipped: %s", e)
        return
    if found:
        raise HardwareError(message(found, "the vLLM model replica will not run fp8"))
