"""What the lifecycle bench inspects and cleans up on the machine: the GPU's memory and processes (nvidia-smi),
the vLLM engine-core, model-replica and Ray processes (ps), py-spy stack dumps, and a forced clean-up
after each stop."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

#: GPU memory (MiB) under which a GPU counts as idle (the driver's own use is a few hundred MiB).
IDLE_MIB = 1024


def gpu_state() -> dict[str, Any]:
    """GPU memory used (MiB, summed over GPUs) and the compute processes (``pid``, ``name``, ``mib``): nvidia-smi."""
    if shutil.which("nvidia-smi") is None:  # a CPU machine: nothing to hold
        return {"used_mib": 0, "processes": []}
    used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, check=False).stdout.split()
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True, check=False).stdout
    procs = []
    for row in apps.strip().splitlines():
        pid, name, mib = (x.strip() for x in row.split(","))
        procs.append({"pid": int(pid), "name": name, "mib": int(mib) if mib.isdigit() else None})
    return {"used_mib": sum(int(x) for x in used if x.isdigit()), "processes": procs}


def gpu_name() -> str | None:
    """The GPU's name (nvidia-smi), or None on a machine without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True, check=False).stdout.strip() or None


def engine_processes() -> list[dict[str, Any]]:
    """Live vLLM engine-core and model-replica processes (``pid``, ``ppid``, ``cmd``).

    An engine core is recognised by vLLM's title (``VLLM::EngineCore`` in its command line, under ``spawn``) or
    by its kernel name (``VLLM::EngineCor``: a core forked from the fork server keeps the server's command
    line; ``serve_app.model.engines.engine_process`` names it); its ``cmd`` then starts with that name.
    """
    ps = subprocess.run(["ps", "-eo", "pid,ppid,comm,args"], capture_output=True, text=True, check=False).stdout
    return parse_ps(ps)


def parse_ps(ps: str) -> list[dict[str, Any]]:
    """The engine-core and model-replica rows of ``ps -eo pid,ppid,comm,args`` output (see
    :func:`engine_processes`; pure). A process is matched by its title or kernel name, never by a word that
    its command line merely mentions: a shell running ``grep EngineCore`` is not an engine (a GPU call's own
    ``bash -c`` was listed as one on 2026-12-02)."""
    out = []
    for row in ps.splitlines()[1:]:
        parts = row.strip().split(None, 3)
        if len(parts) < 4:
            continue
        pid, ppid, comm, cmd = parts
        if comm.startswith("VLLM::EngineCor") and not cmd.startswith("VLLM::EngineCore"):
            cmd = f"{comm} ({cmd})"
        if cmd.startswith("VLLM::EngineCor") or (cmd.startswith("ray::ServeReplica:") and "VideoModel" in cmd):
            out.append({"pid": int(pid), "ppid": int(ppid), "cmd": cmd[:80]})
    return out


def descendants(root: int, pairs: list[tuple[int, int]]) -> set[int]:
    """Every process below ``root`` in ``(pid, ppid)`` pairs (pure). A forked engine core is the replica's
    grandchild (replica → fork server → engine core); a spawned one its child."""
    children: dict[int, list[int]] = {}
    for pid, ppid in pairs:
        children.setdefault(ppid, []).append(pid)
    out: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def process_pairs() -> list[tuple[int, int]]:
    """``(pid, ppid)`` of every process (ps)."""
    ps = subprocess.run(["ps", "-eo", "pid,ppid"], capture_output=True, text=True, check=False).stdout
    rows = (r.split() for r in ps.splitlines()[1:])
    return [(int(r[0]), int(r[1])) for r in rows if len(r) == 2 and r[0].isdigit() and r[1].isdigit()]


def ray_processes() -> list[str]:
    """Command lines (first 60 characters) of live Ray processes: workers, raylet, GCS (zombies excluded)."""
    ps = subprocess.run(["ps", "-eo", "stat,args"], capture_output=True, text=True, check=False).stdout
    return parse_ray_ps(ps)


#: Executables of Ray's own daemons (their ``argv[0]`` basename).
RAY_DAEMONS = ("raylet", "gcs_server")


def parse_ray_ps(ps: str) -> list[str]:
    """The live Ray rows of ``ps -eo stat,args`` output (pure): a worker by its title (``ray::...``), a daemon
    by its executable; zombies and commands that merely mention Ray (a shell running ``grep raylet``) are not."""
    out = []
    for row in ps.splitlines()[1:]:
        parts = row.strip().split(None, 1)
        if len(parts) != 2 or parts[0].startswith("Z"):
            continue
        cmd = parts[1]
        if cmd.startswith("ray::") or cmd.split()[0].rsplit("/", 1)[-1] in RAY_DAEMONS:
            out.append(cmd[:60])
    return out


def wait_gpu_idle(timeout_s: float) -> float | None:
    """Seconds until the GPU's used memory falls under :data:`IDLE_MIB` (None: not within ``timeout_s``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if gpu_state()["used_mib"] < IDLE_MIB:
            return round(time.monotonic() - t0, 1)
        time.sleep(0.5)
    return None


def force_clean() -> dict[str, Any]:
    """Stops whatever a step left (``ray stop --force``, then SIGKILL to every GPU process); what it found."""
    left: dict[str, Any] = {"gpu": gpu_state(), "engine_processes": engine_processes()}
    subprocess.run(["ray", "stop", "--force"], capture_output=True, check=False)
    left["idle_after_ray_stop_force_s"] = wait_gpu_idle(20)  # what ends by itself once Ray is gone
    left["gpu_processes_after_ray_stop_force"] = gpu_state()["processes"]
    for p in gpu_state()["processes"]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p["pid"], signal.SIGKILL)
    left["idle_after_s"] = wait_gpu_idle(30)
    return left


def dump_stacks(path: Path, at_s: float) -> None:
    """Appends py-spy dumps of the model replica and engine-core processes to ``path`` (``at_s``: seconds
    since start). py-spy pauses each process while it reads it (seconds for a replica with many threads):
    a start sampled this way is slower than one that is not."""
    with open(path, "a") as f:
        _dump_to(f, at_s)


def _dump_to(f: Any, at_s: float) -> None:
    for p in engine_processes():
        d = subprocess.run(["py-spy", "dump", "--pid", str(p["pid"])], capture_output=True, text=True,
                           check=False, timeout=30)
        f.write(f"=== t={at_s}s pid {p['pid']} {p['cmd'][:60]}\n{d.stdout}{d.stderr[-300:]}\n")
        if d.returncode and "VideoModel" in p["cmd"]:  # no ptrace here: the replica's own handler (serve log)
            with contextlib.suppress(ProcessLookupError):
                os.kill(p["pid"], signal.SIGUSR1)

