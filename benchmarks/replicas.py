"""The processes and replicas of a local Serve: their memory, and killing or counting replicas.

* :func:`serve_rss_bytes` / :func:`serve_memory`: resident memory of the Serve processes
  (controller, proxy, replicas), via psutil (shipped with Ray in ``ray/thirdparty_files``).
* :func:`replica_actor_names` / :func:`kill_replica` / :func:`running_replicas`: find, ``ray.kill``
  and count a deployment's replicas (fault benches and tests).
"""

from __future__ import annotations

import os
from typing import Any

#: Serve's actor class names as they appear in process titles (``ray::<Class>``).
SERVE_PROCESS_TITLES = ("ServeController", "ProxyActor", "ServeReplica")


def serve_processes(root_pid: int | None = None) -> list[Any]:
    """psutil processes of Serve's controller, proxy and replicas of *this* Ray instance.

    Only descendants of ``root_pid`` (default: this process, whose ``ray.init`` started the
    raylet that forks every worker) count, so other Ray clusters on the machine do not.
    """
    import psutil
    import ray  # noqa: F401 - puts Ray's bundled psutil on sys.path

    procs = []
    for p in psutil.Process(root_pid or os.getpid()).children(recursive=True):
        try:
            title = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if title.startswith("ray::") and any(t in title for t in SERVE_PROCESS_TITLES):
            procs.append(p)
    return procs


def serve_memory(root_pid: int | None = None) -> list[dict[str, Any]]:
    """Per Serve process: title, RSS and its shared part in MiB (shared: mostly Ray's object
    store, a shared-memory map whose touched pages count in every process that touched them)."""
    import psutil

    out = []
    for p in serve_processes(root_pid):
        try:
            mi = p.memory_info()
            title = " ".join(p.cmdline()).strip()
        except psutil.Error:
            continue
        out.append({"process": title[:80], "rss_mb": round(mi.rss / 2**20, 1),
                    "shared_mb": round(mi.shared / 2**20, 1)})
    return out


def serve_rss_bytes(root_pid: int | None = None) -> tuple[int, int, int]:
    """``(summed RSS, summed private RSS, process count)`` of the Serve processes, in bytes.

    Private = RSS − shared pages; the shared part is mostly Ray's object store (decoded clips),
    whose touched pages stay counted in each process's RSS after the objects are freed.
    """
    import psutil

    total, private, n = 0, 0, 0
    for p in serve_processes(root_pid):
        try:
            mi = p.memory_info()
        except psutil.Error:
            continue
        total += mi.rss
        private += mi.rss - mi.shared
        n += 1
    return total, private, n


def replica_actor_names(app: str, deployment: str) -> list[str]:
    """Names of the live replica actors of one deployment (namespace ``serve``)."""
    import ray

    prefix = f"SERVE_REPLICA::{app}#{deployment}#"
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix))


def kill_replica(actor_name: str) -> None:
    """``ray.kill`` one replica actor (no restart: Serve's controller must replace it)."""
    import ray

    ray.kill(ray.get_actor(actor_name, namespace="serve"), no_restart=True)


def running_replicas(app: str, deployment: str) -> int:
    """Replicas of a deployment that Serve reports RUNNING."""
    from ray import serve
    from ray.serve.schema import ReplicaState  # the keys of replica_states (a str enum)

    status = serve.status().applications.get(app)
    if status is None or deployment not in status.deployments:
        return 0
    return int(status.deployments[deployment].replica_states.get(ReplicaState.RUNNING, 0))
