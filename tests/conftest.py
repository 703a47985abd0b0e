"""Shared fixtures: paths to test clips, the tiny checkpoint, and one Ray Serve per session.

Ray Serve on a 2-core machine: one local Ray instance per test session
(``serve_session``), logical CPUs over-declared so small replica asks fit,
applications deployed under their own route prefixes, and a clean shutdown.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CHECKPOINTS = ROOT / "checkpoints"
TINY_CKPT = CHECKPOINTS / "tiny-qwen2_5_vl"
#: Environment variable holding the session's test API key (set before Ray starts, so replicas
#: inherit it); apps deployed with ``api_key_env: TEST_API_KEY_ENV`` require it.
TEST_API_KEY_ENV = "COSMOS_SERVE_TEST_API_KEY"
#: Environment variable holding the session's Prometheus metrics port (Ray's metrics agent).
METRICS_PORT_ENV = "COSMOS_SERVE_TEST_METRICS_PORT"


def free_port() -> int:
    """An unused TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``tests/data``: the real clips (see tests/data/ATTRIBUTION.md)."""
    return DATA


@pytest.fixture(scope="session")
def tiny_checkpoint() -> Path:
    """The tiny random-weight Qwen2.5-VL checkpoint, built once (git-ignored)."""
    from serve_app.checkpoint import ensure_checkpoint

    return ensure_checkpoint("tiny-random", TINY_CKPT)


def cpu_app_args(**overrides) -> dict:
    """``args`` for a CPU test application: the benches' CPU graph (tiny model, small CPU asks,
    tests/data allowed) with unbounded queues; ``overrides`` merge one level deep."""
    from serve_app.bench.local_serve import cpu_args

    sections = {
        "ingress": {"max_ongoing_requests": 64},
        "decoder": {"max_queued_requests": -1},
        "model_replica": {"max_ongoing_requests": 8, "max_queued_requests": -1},
        "stream_worker": {"num_cpus": 0, "num_replicas": 1},
    }
    for key, value in overrides.items():
        sections[key] = {**sections[key], **value} if isinstance(value, dict) and key in sections else value
    return cpu_args(**sections)


@pytest.fixture(scope="session")
def serve_session(tiny_checkpoint):
    """One local Ray + Serve for the whole session; yields the HTTP base URL."""
    import ray
    from ray import serve

    port = free_port()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault(TEST_API_KEY_ENV, secrets.token_urlsafe(24))
    metrics_port = int(os.environ.setdefault(METRICS_PORT_ENV, str(free_port())))
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, _metrics_export_port=metrics_port)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def deploy(name: str, route_prefix: str, args: dict) -> None:
    """Deploys one application of the real graph on the session's Serve and waits until it runs."""
    from serve_app.bench.local_serve import deploy as deploy_and_wait

    deploy_and_wait(name, route_prefix, args)


@pytest.fixture(scope="session")
def cpu_app(serve_session) -> str:
    """The real graph with the tiny CPU model at ``/``; yields its base URL."""
    deploy("cpu", "/", cpu_app_args())
    return serve_session


@pytest.fixture(scope="session")
def metrics_url(serve_session) -> str:
    """The session's Prometheus endpoint (Ray's metrics agent on this node)."""
    return f"http://127.0.0.1:{os.environ[METRICS_PORT_ENV]}/metrics"
