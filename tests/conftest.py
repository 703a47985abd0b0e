"""Shared fixtures: paths to test clips, the tiny checkpoint, and one Ray Serve per session.

Ray Serve on a 2-core machine: one local Ray instance per test session
(``serve_session``), logical CPUs over-declared so small replica asks fit,
applications deployed under their own route prefixes, and a clean shutdown.
The helpers (ports, app args, deploy) live in :mod:`serve_app.testing.local_serve`,
shared with the benches.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from serve_app.testing import local_serve
from serve_app.testing.local_serve import DATA, METRICS_PORT_ENV, TEST_API_KEY_ENV, TINY_CKPT, TINY_QWEN3_CKPT

#: Marker applied to every test collected under each directory of ``tests/`` (strict markers stay on:
#: a test outside these folders gets no marker, and an unknown one fails the run).
PATH_MARKERS = {"unit": "unit", "integration": "integration", "gpu": "gpu"}


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection sees the items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test by its folder: tests/unit → ``unit``, tests/integration → ``integration``,
    tests/gpu → ``gpu`` (so ``-m unit`` selects exactly the pure tests)."""
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        try:
            folder = item.path.relative_to(tests_dir).parts[0]
        except ValueError:
            continue
        marker = PATH_MARKERS.get(folder)
        if marker is not None and item.get_closest_marker(marker) is None:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``tests/data``: the real clips (see tests/data/ATTRIBUTION.md)."""
    return DATA


@pytest.fixture(scope="session")
def tiny_checkpoint() -> Path:
    """The tiny random-weight Qwen2.5-VL checkpoint, built once (git-ignored)."""
    from serve_app.model.checkpoint import ensure_checkpoint

    return ensure_checkpoint("tiny-random", TINY_CKPT)


@pytest.fixture(scope="session")
def tiny_qwen3_checkpoint() -> Path:
    """The tiny random-weight Qwen3-VL checkpoint (Cosmos-Reason2's architecture), built once (git-ignored)."""
    from serve_app.model.checkpoint import ensure_checkpoint

    return ensure_checkpoint("tiny-random", TINY_QWEN3_CKPT, "qwen3_vl")


@pytest.fixture(scope="session")
def serve_session(tiny_checkpoint):
    """One local Ray + Serve for the whole session; yields the HTTP base URL."""
    os.environ.setdefault(TEST_API_KEY_ENV, secrets.token_urlsafe(24))
    metrics_port = int(os.environ.setdefault(METRICS_PORT_ENV, str(local_serve.free_port())))
    with local_serve.running(local_serve.free_port(), metrics_export_port=metrics_port) as url:
        yield url


@pytest.fixture(scope="session")
def cpu_app(serve_session) -> str:
    """The real graph with the tiny CPU model at ``/``; yields its base URL."""
    local_serve.deploy("cpu", "/", local_serve.cpu_app_args())
    return serve_session


@pytest.fixture(scope="session")
def metrics_url(serve_session) -> str:
    """The session's Prometheus endpoint (Ray's metrics agent on this node)."""
    return f"http://127.0.0.1:{os.environ[METRICS_PORT_ENV]}/metrics"
