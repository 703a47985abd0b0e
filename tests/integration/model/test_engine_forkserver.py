"""The engine core forked from a preloaded fork server (serve_app.model.engines.engine_process), with real processes.

Each scenario runs in its own interpreter (the fork server is one per process), standing in for the model
replica: it starts the server with a marker module to preload, changes its environment afterwards, and
starts a child through the context vLLM would get.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

MARKER = textwrap.dedent("""
    import json, os, sys, time
    IMPORTED_IN = os.getpid()  # the process that imported this module (the fork server when preloaded)

    def report(path):
        from serve_app.model.engines.engine_watch import PARENT_ENV
        with open(path, "w") as f:
            json.dump({"pid": os.getpid(), "ppid": os.getppid(), "imported_in": IMPORTED_IN,
                       "late": os.environ.get("COSMOS_TEST_LATE"), "gone": os.environ.get("COSMOS_TEST_GONE"),
                       "watch": os.environ.get(PARENT_ENV)}, f)

    def watch_and_wait(path):
        from serve_app.model.engines import engine_watch
        engine_watch.watch_parent(int(os.environ[engine_watch.PARENT_ENV]), engine_watch._kill_self, poll_s=0.05)
        report(path)
        time.sleep(60)
""")


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for a reaper counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _replica(tmp_path: Path, target: str, wait: bool) -> subprocess.Popen[str]:
    """Starts the stand-in replica: fork server with the marker preloaded, env changed, child started."""
    (tmp_path / "cosmos_marker.py").write_text(MARKER)
    script = textwrap.dedent(f"""
        import os, sys, time
        os.environ["COSMOS_TEST_GONE"] = "set before the server started"
        from serve_app.model.engines import engine_process
        engine_process.start_server(["cosmos_marker"])
        os.environ["COSMOS_TEST_LATE"] = "set after the server started"
        del os.environ["COSMOS_TEST_GONE"]
        os.environ["COSMOS_SERVE_ENGINE_PARENT_PID"] = str(os.getpid())  # what engine_watch.install() sets
        import cosmos_marker
        out = {str(tmp_path / "out.json")!r}
        p = engine_process.CONTEXT.Process(target=getattr(cosmos_marker, {target!r}), args=(out,))
        p.start()
        print(os.getpid(), flush=True)
        if {wait!r}:
            p.join(30)
            print(p.exitcode, flush=True)
        else:
            time.sleep(60)
    """)
    # On PYTHONPATH, not sys.path: Python 3.11's fork server does not take over its parent's sys.path.
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)


def _read_report(path: Path, timeout_s: float = 30) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            data: dict[str, object] = json.loads(path.read_text())
            return data
        except (OSError, ValueError):
            time.sleep(0.05)
    pytest.fail(f"the child wrote no report in {timeout_s} s")


def test_the_child_is_forked_from_the_preloaded_server_with_the_replicas_environment_at_start(tmp_path):
    p = _replica(tmp_path, "report", wait=True)
    try:
        replica_pid = int(p.stdout.readline())  # type: ignore[union-attr]
        assert p.stdout.readline().strip() == "0"  # type: ignore[union-attr]  # the child's exit code
        r = _read_report(tmp_path / "out.json")
    finally:
        p.kill()
    # Forked from the fork server, which imported the marker: neither the replica nor the child imported it.
    assert r["ppid"] != replica_pid and r["ppid"] == r["imported_in"] and r["pid"] != r["imported_in"]
    # The environment is the replica's when the child started, not the server's.
    assert r["late"] == "set after the server started"
    assert r["gone"] is None
    # The engine-core watch looks at the actual parent (the fork server).
    assert r["watch"] == str(r["ppid"])


def test_the_child_ends_when_the_replica_is_killed(tmp_path):
    p = _replica(tmp_path, "watch_and_wait", wait=False)
    try:
        p.stdout.readline()  # type: ignore[union-attr]
        r = _read_report(tmp_path / "out.json")
        child = int(r["pid"])  # type: ignore[call-overload]
        assert _alive(child)
        os.kill(p.pid, signal.SIGKILL)  # the replica dies without warning; its fork server then exits
        p.wait(10)
        deadline = time.monotonic() + 20  # generous on a loaded 2-core CI machine (the watch polls every 0.05 s)
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        p.kill()
