"""``python -m serve_app.preflight CONFIG``: can this machine run a Serve config? Answered before deploying.

``serve run configs/a100.yaml`` on a machine without a GPU or without vLLM cannot stop by itself:
Ray 2.60's ``serve run`` in config-file mode submits the config (``deploy_apps(config,
_blocking=False)``) and then sleeps until Ctrl-C whatever the application's status, and the
application is built in Serve's controller, so the preflight's refusal
(:func:`serve_app.model.preflight.check_build`) only reaches the terminal as the controller's log line
and ``serve status`` (``DEPLOY_FAILED``). This command asks the same questions without starting
Ray, in well under the time Ray takes to start:

* exit 0 and one line ``OK: …`` when every application of the file that this project builds
  (``import_path: serve_app.app:build_app``) fits this machine;
* exit 1 and the preflight's message on stderr (what is missing, how to install it, the CPU
  config) when one does not: vLLM missing for ``model.backend: vllm``, fewer GPUs than
  ``model_replica.num_gpus``, fewer CPUs than the deployments reserve at their smallest replica
  counts, GPUs whose memory other processes hold (each holder's pid named, e.g. a vLLM engine
  left by an earlier run), or fp8 (``quantization: fp8``, a calibrated fp8 checkpoint) on GPUs below compute
  capability 8.9, where vLLM would run it weight-only;
* exit 2 and a one-line reason when the file cannot be read or its ``args`` are not a valid config.

The machine is seen as a local one-node Ray started here would see it: GPUs by Ray's own
detection (NVML for NVIDIA, capped by ``CUDA_VISIBLE_DEVICES``), CPUs by Ray's count
(cgroup limits included). A cluster (KubeRay) is not checked here: its model replicas check
themselves when they start (:func:`serve_app.model.preflight.check_replica`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The ``import_path`` of this project's applications (other applications in a file are not checked).
APP_IMPORT_PATH = "serve_app.app:build_app"


class ConfigFileError(ValueError):
    """The config file cannot be read, is not a Serve config, or its ``args`` are invalid (the message says which)."""


def local_gpus() -> float:
    """GPUs a local Ray started on this machine would advertise (count).

    Ray's own detection (``ray._private.accelerators``: NVML for NVIDIA GPUs, or the AMD / Intel /
    Apple managers when those find devices), capped by the devices this process may see
    (``CUDA_VISIBLE_DEVICES`` and its kin), as ``ray.init`` resolves its ``GPU`` resource.
    0 when Ray's detection is unavailable.
    """
    try:
        from ray._private import accelerators
    except ImportError:
        return 0.0
    manager = accelerators.get_accelerator_manager_for_resource("GPU")
    if manager is None:
        return 0.0
    count = int(manager.get_current_node_num_accelerators())
    visible = manager.get_current_process_visible_accelerator_ids()
    if visible is not None:
        count = min(count, len(visible))
    return float(count)


def local_cpus() -> float:
    """CPUs a local Ray started on this machine would advertise (count): Ray's cgroup-aware count,
    else ``os.cpu_count()``."""
    try:
        from ray._private.utils import get_num_cpus

        return float(get_num_cpus())
    except ImportError:
        return float(os.cpu_count() or 1)


def app_args(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(name, args)`` of each application in a Serve config file built by :data:`APP_IMPORT_PATH`.

    Raises:
        ConfigFileError: the file is missing or unreadable, is not YAML, has no ``applications``
            list, or none of its applications is this project's.
    """
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigFileError(f"cannot read {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigFileError(f"{path} is not valid YAML: {e}") from None
    apps = doc.get("applications") if isinstance(doc, dict) else None
    if not isinstance(apps, list):
        raise ConfigFileError(f"{path} is not a Serve config file (no 'applications:' list)")
    out = []
    for i, app in enumerate(apps):
        if isinstance(app, dict) and app.get("import_path") == APP_IMPORT_PATH:
            args = app.get("args") or {}
            if not isinstance(args, dict):
                raise ConfigFileError(f"{path}: applications[{i}].args is not a mapping")
            out.append((str(app.get("name") or f"applications[{i}]"), args))
    if not out:
        raise ConfigFileError(f"{path} has no application with import_path {APP_IMPORT_PATH}")
    return out


def held_gpu_problems(config: Any, gpu_memory: Sequence[Any]) -> list[str]:
    """For a vLLM config: the GPUs other processes hold so much of that fewer than the model replicas need
    at their smallest count can start (see :func:`serve_app.model.preflight.gpu_memory_problems`; pure)."""
    from serve_app.model import preflight

    if config.model.backend != "vllm" or config.model_replica.num_gpus <= 0:
        return []
    util = float(config.model.engine_args.get("gpu_memory_utilization", preflight.VLLM_DEFAULT_GPU_MEMORY_UTILIZATION))
    short = [line for g in gpu_memory for line in preflight.gpu_memory_problems([g], util)]
    fitting = len(gpu_memory) - len(short)
    need = config.model_replica.num_gpus * preflight.replica_counts(config)["model_replica"][0]
    return short if fitting < need else []


def fp8_gpu_problems(config: Any, capabilities: Sequence[int]) -> list[str]:
    """For a vLLM config whose engine would run fp8 (``quantization: fp8`` or an fp8 ``quantization_config``,
    :func:`serve_app.model.quantization.fp8_source`): this machine's GPUs below compute capability 8.9
    (:func:`serve_app.model.preflight.fp8_problems`; empty ``capabilities``: not checked)."""
    from serve_app.model import preflight
    from serve_app.model.quantization import model_fp8_source

    if config.model.backend != "vllm" or not capabilities:
        return []
    return preflight.fp8_problems(model_fp8_source(config.model.engine_args, config.model.model_id), capabilities)


def check_file(
    path: Path, gpus: float, cpus: float, has_vllm: bool, gpu_memory: Sequence[Any] = (),
    capabilities: Sequence[int] = (),
) -> list[str]:
    """The preflight messages for every application of ``path`` on a machine with ``gpus`` GPUs,
    ``cpus`` CPUs and vLLM installed or not (empty: the config fits). ``gpu_memory``: the GPUs' memory
    and holders (:func:`serve_app.model.preflight.read_gpu_memory`; empty: not checked); ``capabilities``:
    their compute capabilities, major × 10 + minor (:func:`serve_app.model.preflight.read_gpu_capabilities`;
    empty: fp8 not checked).

    Raises:
        ConfigFileError: see :func:`app_args`; also an application's ``args`` that are not a
            valid :class:`serve_app.config.AppConfig` (the message names the first bad field).
    """
    from pydantic import ValidationError

    from serve_app.config import AppConfig
    from serve_app.config.files import validation_message
    from serve_app.model import preflight

    messages = []
    for name, args in app_args(path):
        try:
            config = AppConfig.model_validate(args)
        except ValidationError as e:
            raise ConfigFileError(f"{path}: application {name!r}: {validation_message(e)}") from None
        found = preflight.problems(config, gpus, has_vllm)
        if found:
            messages.append(preflight.message(found, f"this machine cannot run the model replica of {path}"))
        if not found and (held := held_gpu_problems(config, gpu_memory)):
            messages.append(f"this machine cannot start the model replica of {path} now: {'; '.join(held)}")
        if not found and (fp8 := fp8_gpu_problems(config, capabilities)):
            messages.append(preflight.message(fp8, f"this machine will not run the model replica of {path} in fp8"))
        if cpu := preflight.cpu_problems(config, cpus):
            messages.append(f"this machine cannot run the deployments of {path}: {cpu[0]}")
    return messages


def main(argv: Sequence[str] | None = None) -> int:
    """The command: exit 0 (fits, one ``OK`` line), 1 (missing hardware or packages, the message on
    stderr) or 2 (bad file or arguments)."""
    parser = argparse.ArgumentParser(
        prog="python -m serve_app.preflight",
        description="Check, before `serve run CONFIG`, that this machine has the GPUs, vLLM and CPUs the "
        "Serve config needs (no Ray is started).",
    )
    parser.add_argument("config", type=Path, help="a Serve config file, e.g. configs/a100.yaml")
    opts = parser.parse_args(argv)
    from serve_app.model import preflight

    gpus, cpus, has_vllm = local_gpus(), local_cpus(), preflight.vllm_installed()
    gpu_memory: list[preflight.GpuMemory] = []
    capabilities: list[int] = []
    if gpus > 0:
        try:
            gpu_memory = preflight.read_gpu_memory()
            capabilities = preflight.read_gpu_capabilities()
        except (ImportError, OSError, ValueError):  # no NVML binding: the replica checks again when it starts
            pass
    try:
        messages = check_file(opts.config, gpus, cpus, has_vllm, gpu_memory, capabilities)
    except ConfigFileError as e:
        print(f"preflight: {e}", file=sys.stderr)
        return 2
    if messages:
        for m in messages:
            print(f"preflight: {m}", file=sys.stderr)
        return 1
    vllm = "vLLM installed" if has_vllm else "no vLLM"
    print(f"OK: {opts.config} fits this machine ({gpus:g} GPUs, {cpus:g} CPUs, {vllm}); start it with "
          f"serve run {opts.config}")
    return 0
