"""The engine core ends with its model replica: the parent watch (pure parts and a real orphaned process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from serve_app.model.engines.engine_watch import parent_gone, watch_parent

ROOT = Path(__file__).resolve().parents[3]


def test_a_new_parent_means_the_old_one_is_gone():
    assert parent_gone(1234, 1) is True  # re-parented to init
    assert parent_gone(1234, 999) is True  # or to a subreaper
    assert parent_gone(1234, 1234) is False
    assert parent_gone(0, 1) is False  # the parent is unknown: never act on a guess


def test_the_watch_calls_back_once_when_the_parent_changes():
    ppids = iter([50, 50, 1, 1, 1])
    called = threading.Event()
    calls = []

    def gone() -> None:
        calls.append(1)
        called.set()

    t = watch_parent(50, gone, poll_s=0.001, getppid=lambda: next(ppids, 1))
    assert called.wait(5)
    t.join(5)
    assert calls == [1] and not t.is_alive()


def test_a_stopped_watch_never_calls_back():
    stop = threading.Event()
    calls = []
    t = watch_parent(50, lambda: calls.append(1), poll_s=0.001, getppid=lambda: 50, stop=stop)
    stop.set()
    t.join(5)
    assert not t.is_alive() and calls == []


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for a reaper counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_child_whose_parent_is_killed_ends_itself():
    # A stand-in for the replica (parent) and its engine core (child): SIGKILL the parent, as `ray stop
    # --force` or the OOM killer would; the child must end by itself.
    child = textwrap.dedent("""
        import os, time
        from serve_app.model.engines.engine_watch import _kill_self, watch_parent
        watch_parent(os.getppid(), _kill_self, poll_s=0.05)
        print("watching", flush=True)
        time.sleep(60)
    """)
    parent = textwrap.dedent(f"""
        import subprocess, sys, time
        c = subprocess.Popen([sys.executable, "-c", {child!r}], stdout=subprocess.PIPE, text=True)
        assert c.stdout.readline().strip() == "watching"
        print(c.pid, flush=True)
        time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, env=env)
    try:
        child_pid = int(p.stdout.readline())
        assert _alive(child_pid)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        deadline = time.monotonic() + 20  # a generous bound on a loaded CI machine (the watch polls every 0.05 s)
        while _alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child_pid)
    finally:
        p.kill()
