"""What the robustness benches (overload, fault, soak) and fault tests share.

* :func:`start` / :func:`stop`: a local Ray + Serve on a chosen HTTP port.
* :func:`serve_rss_bytes`: summed resident memory of the Serve processes
  (controller, proxy, replicas), via psutil (shipped with Ray in
  ``ray/thirdparty_files``).
* :func:`camera_load`: N simulated cameras, each posting clip windows to
  ``/v1/video/query`` back to back (asyncio + httpx), every outcome recorded.
* :func:`replica_actor_names` / :func:`kill_replica`: find and ``ray.kill`` a replica.

Not the camera-fleet load tester (``loadtest/``): a small, dependency-free
client for scenarios that must run inside a test or next to a fault.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import platform
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CLIP = ROOT / "tests" / "data" / "intel_car-detection.mp4"
TINY_CKPT = ROOT / "checkpoints" / "tiny-qwen2_5_vl"
#: Serve's actor class names as they appear in process titles (``ray::<Class>``).
SERVE_PROCESS_TITLES = ("ServeController", "ProxyActor", "ServeReplica")


def cpu_args(**overrides) -> dict:
    """``args`` of the CPU graph (tiny random model, tests/data allowed) with bounded queues.

    ``overrides`` replace top-level sections (dicts are merged one level deep).
    """
    args: dict = {
        "model": {
            "backend": "transformers",
            "model_id": str(TINY_CKPT),
            "checkpoint": "tiny-random",
            "served_model_name": "tiny-random-qwen2_5_vl",
            "sampling": {"max_tokens": 8},
            "allow_ignore_eos": True,
        },
        "sources": {"allowed_roots": [str(CLIP.parent)]},
        "ingress": {"num_cpus": 0, "max_ongoing_requests": 256},
        "decoder": {"num_cpus": 0, "num_replicas": 1, "max_ongoing_requests": 2, "max_queued_requests": 8},
        "model_replica": {"num_cpus": 0, "max_ongoing_requests": 4, "max_queued_requests": 4},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(args.get(key), dict):
            args[key] = {**args[key], **value}
        else:
            args[key] = value
    return args


def start(http_port: int, num_cpus: int = 8, object_store_mb: int | None = None) -> str:
    """Starts a local Ray and Serve on ``127.0.0.1:http_port``; returns the base URL.

    ``object_store_mb``: size of Ray's shared-memory object store (None: Ray's default, 30 % of RAM).
    Decoded clips live there; every page of it a process has touched counts in that process's RSS.
    """
    import ray
    from ray import serve

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=None if object_store_mb is None else object_store_mb * 2**20,
    )
    serve.start(http_options={"host": "127.0.0.1", "port": http_port})
    return f"http://127.0.0.1:{http_port}"


def deploy(name: str, route_prefix: str, args: dict, timeout_s: float = 300) -> None:
    """Deploys the real graph as application ``name`` and waits until it is RUNNING.

    Raises:
        RuntimeError: the deployment failed. TimeoutError: not running after ``timeout_s``.
    """
    from ray import serve

    from serve_app.app import build_app

    serve.run(build_app(args), name=name, route_prefix=route_prefix, blocking=False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = serve.status().applications.get(name)
        if status is not None and status.status == "RUNNING":
            return
        if status is not None and status.status == "DEPLOY_FAILED":
            raise RuntimeError(f"application {name} failed: {status.message}")
        time.sleep(0.5)
    raise TimeoutError(f"application {name} not running after {timeout_s} s")


def stop() -> None:
    """Shuts Serve and Ray down."""
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


def serve_processes(root_pid: int | None = None) -> list:
    """psutil processes of Serve's controller, proxy and replicas of *this* Ray instance.

    Only descendants of ``root_pid`` (default: this process, whose ``ray.init`` started the
    raylet that forks every worker) count, so other Ray clusters on the machine do not.
    """
    import ray  # noqa: F401 - puts Ray's bundled psutil on sys.path
    import psutil

    procs = []
    for p in psutil.Process(root_pid or os.getpid()).children(recursive=True):
        try:
            title = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if title.startswith("ray::") and any(t in title for t in SERVE_PROCESS_TITLES):
            procs.append(p)
    return procs


def serve_memory(root_pid: int | None = None) -> list[dict]:
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
        out.append({"process": title[:80], "rss_mb": round(mi.rss / 2**20, 1), "shared_mb": round(mi.shared / 2**20, 1)})
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

    status = serve.status().applications.get(app)
    if status is None or deployment not in status.deployments:
        return 0
    return int(status.deployments[deployment].replica_states.get("RUNNING", 0))


@dataclasses.dataclass
class Outcome:
    """One request of a load run: start/end (seconds since the run began), status (0: no response)."""

    camera: int
    start_s: float
    end_s: float
    status: int
    error: str | None = None

    @property
    def latency_s(self) -> float:
        """End-to-end latency in seconds."""
        return self.end_s - self.start_s


async def camera_load(
    url: str,
    *,
    cameras: int,
    duration_s: float,
    fields: dict,
    clip: Path = CLIP,
    timeout_s: float = 120.0,
    stop: asyncio.Event | None = None,
    on_outcome=None,
) -> list[Outcome]:
    """Runs ``cameras`` closed-loop clients posting ``clip`` to ``{url}/v1/video/query``.

    Args:
        url: base URL of the application.
        cameras: concurrent clients; each sends its next request when the last one ends.
        duration_s: stop sending new requests after this many seconds (or when ``stop`` is set).
        fields: form fields of each request (question, window, max_tokens...).
        timeout_s: client timeout per request; a timeout is recorded as status 0.
        on_outcome: optional callback called with each :class:`Outcome` as it happens.

    Returns:
        Every request's outcome, in completion order.
    """
    data = clip.read_bytes()
    outcomes: list[Outcome] = []
    t0 = time.monotonic()
    stop = stop or asyncio.Event()

    async def camera(i: int, client: httpx.AsyncClient) -> None:
        while not stop.is_set() and time.monotonic() - t0 < duration_s:
            start = time.monotonic() - t0
            status, err = 0, None
            try:
                r = await client.post(
                    f"{url}/v1/video/query",
                    files={"video": (clip.name, data, "video/mp4")},
                    data={**{k: str(v) for k, v in fields.items()}, "camera_id": f"cam-{i}"},
                    timeout=timeout_s,
                )
                status = r.status_code
                if status != 200:
                    err = r.json().get("error", {}).get("type") if "json" in r.headers.get("content-type", "") else None
            except httpx.HTTPError as e:
                err = type(e).__name__
            o = Outcome(i, start, time.monotonic() - t0, status, err)
            outcomes.append(o)
            if on_outcome:
                on_outcome(o)

    limits = httpx.Limits(max_connections=cameras + 4)
    async with httpx.AsyncClient(limits=limits) as client:
        await asyncio.gather(*(camera(i, client) for i in range(cameras)))
    return outcomes


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100, linear interpolation) or None for no values."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))


def machine() -> dict:
    """Where a bench ran: CPU count, platform, Python."""
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def write_result(path: str | Path, result: dict) -> Path:
    """Writes a bench result as indented JSON (creating the folder)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(result, indent=2) + "\n")
    return p
