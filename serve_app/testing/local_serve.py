"""A local Ray + Serve for tests, benches and manual runs: start, deploy, stop, and the CPU graph's args.

* :func:`start` / :func:`stop` (or :func:`running`): one local Ray and Serve with HTTP on
  ``127.0.0.1:port`` (loopback only).
* :func:`deploy`: the real graph (:func:`serve_app.app.build_app`) as a named application,
  waiting until it is RUNNING.
* :func:`cpu_args` / :func:`cpu_app_args`: application ``args`` of the CPU graph with the tiny
  random-weight model (bounded queues for benches, unbounded for tests).
* ``python -m serve_app.testing.local_serve --config configs/cpu.yaml --port 8470``: serves a
  Serve config's first application on a chosen port until interrupted (what ``serve run``
  does, with a free choice of port and Ray's logical CPU count).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from serve_app.log_limit import get_logger
from serve_app.testing.ports import free_port as free_port  # re-exported: tests take every local-Serve helper from here

logger = get_logger(__name__)

ROOT = Path(__file__).resolve().parents[2]
#: The real clips of the test suite (see tests/data/ATTRIBUTION.md).
DATA = ROOT / "tests" / "data"
#: The clip benches upload: 30 s of a parking lot, 768×432 H.264, 2.8 MB (CC-BY-4.0 Intel).
CLIP = DATA / "intel_car-detection.mp4"
TINY_CKPT = ROOT / "checkpoints" / "tiny-qwen2_5_vl"
#: The tiny random Qwen3-VL (Cosmos-Reason2's architecture, shrunk), built on first use.
TINY_QWEN3_CKPT = ROOT / "checkpoints" / "tiny-qwen3_vl"
#: Environment variable holding a test session's API key (set before Ray starts, so replicas
#: inherit it); apps deployed with ``api_key_env: TEST_API_KEY_ENV`` require it.
TEST_API_KEY_ENV = "COSMOS_SERVE_TEST_API_KEY"
#: Environment variable holding a test session's Prometheus metrics port (Ray's metrics agent).
METRICS_PORT_ENV = "COSMOS_SERVE_TEST_METRICS_PORT"


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides``: a dict value is merged one level deep into a dict section."""
    out = dict(base)
    for key, value in overrides.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def cpu_args(**overrides: Any) -> dict[str, Any]:
    """``args`` of the CPU graph (tiny random model, tests/data allowed) with bounded queues.

    ``overrides`` replace top-level sections (dicts are merged one level deep).
    """
    args: dict[str, Any] = {
        "model": {
            "backend": "transformers",
            "model_id": str(TINY_CKPT),
            "checkpoint": "tiny-random",
            "served_model_name": "tiny-random-qwen2_5_vl",
            "sampling": {"max_tokens": 8},
            "allow_ignore_eos": True,
        },
        "sources": {"allowed_roots": [str(DATA)]},
        "ingress": {"num_cpus": 0, "max_ongoing_requests": 256},
        "decoder": {"num_cpus": 0, "num_replicas": 1, "max_ongoing_requests": 2, "max_queued_requests": 8},
        "model_replica": {"num_cpus": 0, "max_ongoing_requests": 4, "max_queued_requests": 4},
    }
    return _merge(args, overrides)


def reason2_model_args() -> dict[str, Any]:
    """The ``model`` section of a CPU test application with the tiny Qwen3-VL (``configs/cpu-reason2.yaml``'s)."""
    return {
        "family": "qwen3_vl",
        "model_id": str(TINY_QWEN3_CKPT),
        "served_model_name": "tiny-random-qwen3_vl",
        "sampling": {"max_tokens": 8},
    }


def cpu_app_args(**overrides: Any) -> dict[str, Any]:
    """``args`` for a CPU test application: :func:`cpu_args` with unbounded queues (tests that
    are not about back-pressure must not see 503s); ``overrides`` merge one level deep."""
    unbounded = {
        "ingress": {"max_ongoing_requests": 64},
        "decoder": {"max_queued_requests": -1},
        "model_replica": {"max_ongoing_requests": 8, "max_queued_requests": -1},
        "stream_worker": {"num_cpus": 0, "num_replicas": 1},
    }
    return cpu_args(**_merge(unbounded, overrides))


def start(http_port: int, num_cpus: int = 8, object_store_mb: int | None = None,
          metrics_export_port: int | None = None, log_to_driver: bool = False) -> str:
    """Starts a new local Ray and Serve on ``127.0.0.1:http_port``; returns the base URL.

    Always a Ray instance of its own (``address="local"``): never one found through ``RAY_ADDRESS``
    or ``/tmp/ray/ray_current_cluster`` (another engineer's ``ray start`` on the same machine).

    Args:
        http_port: Serve's HTTP port on 127.0.0.1; 0: a free port (:func:`free_port`).
        num_cpus: logical CPUs Ray declares (over-declared on small machines so small replica asks fit).
        object_store_mb: size of Ray's shared-memory object store (None: Ray's default, 30 % of RAM).
            Decoded clips live there; every page of it a process has touched counts in that process's RSS.
        metrics_export_port: port of Ray's Prometheus metrics agent (None: Ray picks one).
    """
    import ray
    from ray import serve

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    http_port = http_port or free_port()
    kwargs: dict[str, Any] = {} if metrics_export_port is None else {"_metrics_export_port": metrics_export_port}
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=log_to_driver,
        object_store_memory=None if object_store_mb is None else object_store_mb * 2**20,
        **kwargs,
    )
    serve.start(http_options={"host": "127.0.0.1", "port": http_port})
    return f"http://127.0.0.1:{http_port}"


def deploy(name: str, route_prefix: str, args: dict[str, Any], timeout_s: float = 300) -> None:
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

    serve.shutdown()  # type: ignore[no-untyped-call]  # Ray's serve.shutdown is unannotated
    ray.shutdown()


@contextlib.contextmanager
def running(http_port: int, **start_kwargs: Any) -> Iterator[str]:
    """:func:`start` … :func:`stop` around a block; yields the base URL."""
    url = start(http_port, **start_kwargs)
    try:
        yield url
    finally:
        stop()


def main(argv: list[str] | None = None) -> None:
    """Serves a Serve config's first application on ``127.0.0.1:--port`` until Ctrl-C or SIGTERM."""
    from serve_app.config import load_serve_config

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--config", default="configs/cpu.yaml")
    p.add_argument("--port", type=int, default=8470)
    p.add_argument("--num-cpus", type=int, default=8, help="logical CPUs Ray declares")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    app = load_serve_config(a.config)["applications"][0]
    stopping: list[int] = []
    with running(a.port, num_cpus=a.num_cpus, log_to_driver=True) as url:
        # after ray.init, which installs a SIGTERM handler of its own that ends the process at once
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
        deploy(app.get("name", "app"), app.get("route_prefix", "/"), app.get("args") or {})
        print(f"READY {url}", flush=True)
        try:
            while not stopping:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
