"""benchmarks/fleet_gpu.sh on the CPU: the phases that need no server.

``burst`` runs in a later device call than ``graph-start``, so the engine timings file named by
``COSMOS_SERVE_ENGINE_TIMINGS`` at graph-start must reach it through a file, not the environment (the fourteenth
lease's timings were fetched by hand). A misspelt step makes ``benchmarks.lifecycle`` exit 2 before anything
starts, which lets the copy run here without a GPU or a server. A burst and a cross-check leave the running
server's log so far, as a sweep does (a machine lost before ``stop`` took vLLM's stats lines with it).
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "fleet_gpu.sh"

pytestmark = pytest.mark.skipif(not shutil.which("gzip"), reason="needs gzip")


def _burst(tmp_path: Path, name_file: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``burst NAME bogus`` with this interpreter's ``python3`` first on PATH, the results under tmp_path/out.

    The graph's log (``SERVE_LOG_FILE``) is tmp_path/serve.log, absent unless a test writes it.
    """
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    run_env = {k: v for k, v in os.environ.items() if k != "COSMOS_SERVE_ENGINE_TIMINGS"}
    run_env.update(PATH=path, OUT=str(tmp_path / "out"), ENGINE_TIMINGS_NAME_FILE=str(name_file),
                   SERVE_LOG_FILE=str(tmp_path / "serve.log"), **env)
    return subprocess.run(["bash", str(SCRIPT), "burst", "run1", "bogus"], cwd=ROOT, env=run_env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_burst_copies_the_timings_named_at_graph_start(tmp_path: Path) -> None:
    timings = tmp_path / "et.jsonl"
    timings.write_text('{"request_id": "r1", "completion_tokens": 256}\n')
    name_file = tmp_path / "timings.path"
    name_file.write_text(f"{timings}\n")  # as graph-start writes it
    result = _burst(tmp_path, name_file)
    assert "== burst run1 rc=2" in result.stdout  # the misspelt step: lifecycle stopped before starting
    copied = tmp_path / "out" / "run1" / "engine_timings.jsonl.gz"
    assert gzip.decompress(copied.read_bytes()).decode() == timings.read_text()


def test_the_environment_still_names_the_timings_first(tmp_path: Path) -> None:
    named, env_file = tmp_path / "named.jsonl", tmp_path / "env.jsonl"
    named.write_text("named\n")
    env_file.write_text("from the environment\n")
    name_file = tmp_path / "timings.path"
    name_file.write_text(f"{named}\n")
    _burst(tmp_path, name_file, COSMOS_SERVE_ENGINE_TIMINGS=str(env_file))
    copied = tmp_path / "out" / "run1" / "engine_timings.jsonl.gz"
    assert gzip.decompress(copied.read_bytes()).decode() == "from the environment\n"


def test_no_timings_without_a_named_file(tmp_path: Path) -> None:
    result = _burst(tmp_path, tmp_path / "absent.path")
    assert "== burst run1 rc=2" in result.stdout
    assert not (tmp_path / "out" / "run1" / "engine_timings.jsonl.gz").exists()


def test_the_replicas_loop_lag_comes_with_the_timings(tmp_path: Path) -> None:
    timings = tmp_path / "et.jsonl"
    timings.write_text("{}\n")
    (tmp_path / "et.loop_lag.jsonl").write_text('{"samples": 500, "lag_max_ms": 12.5}\n')  # as graph-start names it
    name_file = tmp_path / "timings.path"
    name_file.write_text(f"{timings}\n")
    _burst(tmp_path, name_file)
    copied = tmp_path / "out" / "run1" / "loop_lag.jsonl.gz"
    assert gzip.decompress(copied.read_bytes()).decode() == '{"samples": 500, "lag_max_ms": 12.5}\n'


def test_stacks_are_not_asked_of_a_replica_without_the_handler(tmp_path: Path) -> None:
    # SIGUSR1 ends a process that did not register faulthandler for it: burst sends it only after a graph-start
    # that set COSMOS_SERVE_STACKS_ON_SIGUSR1 (which leaves STACKS_MARK_FILE).
    mark = tmp_path / "stacks.mark"
    result = _burst(tmp_path, tmp_path / "absent.path", STACKS_AT_S="0", STACKS_MARK_FILE=str(mark))
    assert "STACKS_AT_S ignored: graph-start did not set COSMOS_SERVE_STACKS_ON_SIGUSR1" in result.stdout
    assert "stacks:" not in result.stdout


def test_stacks_are_asked_after_a_graph_start_that_set_the_handler(tmp_path: Path) -> None:
    mark = tmp_path / "stacks.mark"
    mark.touch()  # as graph-start leaves it
    # 300 s: the steps end (rc 2) long before, so no signal is sent to any replica this machine may run.
    result = _burst(tmp_path, tmp_path / "absent.path", STACKS_AT_S="300", STACKS_MARK_FILE=str(mark))
    assert "STACKS_AT_S ignored" not in result.stdout
    assert "== burst run1 rc=2" in result.stdout
    assert "stacks: " in result.stdout  # the sender started and was stopped with the steps


def test_burst_leaves_the_graphs_log_so_far(tmp_path: Path) -> None:
    # 2026-12-07: a machine given back before `stop` took vLLM's stats lines with it; a sweep keeps them since,
    # and the loop's running and waiting counts are read from the same lines.
    log = tmp_path / "serve.log"
    log.write_text("Running: 182 reqs, Waiting: 0 reqs\n")
    result = _burst(tmp_path, tmp_path / "absent.path")
    assert result.returncode == 0, result.stderr
    assert gzip.decompress((tmp_path / "out" / "run1" / "serve_so_far.log.gz").read_bytes()) == log.read_bytes()
    assert log.exists()  # the server's log stays for `stop`


def test_burst_without_a_server_log_leaves_none(tmp_path: Path) -> None:
    result = _burst(tmp_path, tmp_path / "absent.path")
    assert result.returncode == 0, result.stderr
    assert not list((tmp_path / "out").rglob("*so_far*"))


@pytest.mark.parametrize("side", ["graph", "plain"])
def test_a_crosscheck_leaves_the_running_servers_log_so_far(tmp_path: Path, side: str) -> None:
    # `vllm bench serve` and the window cut are stood in for (``python3 -m vllm…`` and ``python3 -`` exit 0); the
    # side is the plain server's when its log exists, as on the machine.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f"""#!/bin/bash
if [ "$1" = -c ]; then exec {sys.executable} "$@"; fi
if [ "$1" = - ]; then cat > /dev/null; exit 0; fi
if [ "$1 $2" = "-m vllm.entrypoints.cli.main" ]; then echo "Successful requests: 96"; exit 0; fi
exit 9
""")
    (bin_dir / "curl").write_text("""#!/bin/bash
echo '{"data": [{"id": "cosmos-reason1-7b-dummy"}]}'
""")
    for tool in ("python3", "curl"):
        (bin_dir / tool).chmod(0o755)
    logs = {"graph": tmp_path / "serve.log", "plain": tmp_path / "plain_server.log"}
    logs[side].write_text(f"{side}: Running: 14 reqs, Waiting: 0 reqs\n")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "OUT": str(tmp_path / "out"),
           "SERVE_LOG_FILE": str(logs["graph"]), "PLAIN_LOG_FILE": str(logs["plain"])}
    result = subprocess.run(["bash", str(SCRIPT), "crosscheck", "1.4", "4"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert f"== crosscheck {side} 1.4/s rc=0" in result.stdout, result.stdout + result.stderr
    so_far = tmp_path / "out" / f"fleet_crosscheck_{side}_r1.4_server_so_far.log.gz"
    assert gzip.decompress(so_far.read_bytes()) == logs[side].read_bytes()
