"""The GPU machine as the GPU benches see it: GPU memory in use (nvidia-smi) and the versions behind the figures."""

from __future__ import annotations

import subprocess


def gpu_memory_used_mib() -> int | None:
    """GPU memory in use on device 0 (MiB), from nvidia-smi."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        )
        return int(out.stdout.split()[0])
    except Exception:  # noqa: BLE001 - informational only
        return None


def versions() -> dict[str, str | None]:
    """Versions of the packages and GPU behind the figures."""
    import importlib.metadata as md

    out: dict[str, str | None] = {}
    for pkg in ("vllm", "torch", "transformers", "ray", "av", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        name = None
    out["gpu"] = name
    return out
