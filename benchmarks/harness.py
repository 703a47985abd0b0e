"""The harness of the config-driven benches (overload, soak): their shared options and local Serve.

:func:`add_serve_options` adds the options they share (``--config``, ``--out``, ``--port``,
``--cameras``, ``--object-store-mb``);
:func:`serving` starts a local Ray + Serve (loopback), deploys the config's first
application under ``name`` and stops both afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

from serve_app.config import load_serve_config
from serve_app.testing import local_serve


def add_serve_options(ap: argparse.ArgumentParser, port: int, out: str) -> None:
    """Adds ``--config`` (the Serve config deployed), ``--out`` (the result file), ``--port``,
    ``--cameras`` and ``--object-store-mb``."""
    ap.add_argument("--config", default="configs/cpu.yaml")
    ap.add_argument("--out", default=out)
    ap.add_argument("--port", type=int, default=port, help="Serve's HTTP port on 127.0.0.1 (0: a free one)")
    ap.add_argument("--cameras", type=int, default=4)
    ap.add_argument("--object-store-mb", type=int, default=2048,
                    help="Ray object store size (MiB); 0: Ray's default (30%% of RAM)")


def app_of(config: str) -> dict[str, Any]:
    """The first application of a Serve config (``name``, ``import_path``, ``args``…)."""
    app: dict[str, Any] = load_serve_config(config)["applications"][0]
    return app


def object_store(args: argparse.Namespace) -> int | str:
    """How a result file names the object store size of ``--object-store-mb``."""
    return args.object_store_mb or "ray default (30% of RAM)"


@contextlib.contextmanager
def serving(args: argparse.Namespace, name: str) -> Iterator[str]:
    """Serves ``--config``'s first application as ``name`` at ``/`` on ``127.0.0.1:--port``; yields the URL."""
    with local_serve.running(args.port, object_store_mb=args.object_store_mb or None) as url:
        local_serve.deploy(name, "/", app_of(args.config)["args"])
        yield url


def stop_process_group(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> None:
    """Stops a server started with ``start_new_session=True``: ``sig`` to its whole process group,
    then ``SIGKILL`` if it has not exited within ``timeout_s`` seconds."""
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
