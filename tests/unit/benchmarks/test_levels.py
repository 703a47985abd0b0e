"""benchmarks/levels.sh through the two scripts that sweep camera levels on the GPU machine.

``fleet_gpu.sh graph Q LEVELS`` and ``quiet_scenes_gpu.sh real-off LEVELS`` run here against a stand-in
``python3``: ``-m loadtest.distinct`` lists N copies, ``-m loadtest`` records its ``--sweep`` level and exits 0
(kept up) at ``keeps_up_at_most`` cameras or fewer, 1 above (as the load tester does when no level keeps up);
``-c`` runs this interpreter (the scripts read the questions and the sampling from the project).
Ascending levels stop after the first that does not keep up; descending ones after the first that keeps up
(2026-12-07: bf16 failed at 20 cameras in one device call and at 12 in the next).
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
FLEET = ("fleet_gpu.sh", "graph", "1")
QUIET = ("quiet_scenes_gpu.sh", "real-off")

pytestmark = pytest.mark.skipif(not shutil.which("top"), reason="quiet_scenes_gpu.sh records top per level")


def _levels(tmp_path: Path, script: tuple[str, ...], levels: str, keeps_up_at_most: int,
            serve_log: Path | None = None) -> list[int]:
    """Runs ``script`` with ``levels`` against the stand-in; returns the levels the load tester ran, in order.

    ``serve_log``: the running graph's log as ``fleet_gpu.sh`` reads it (``SERVE_LOG_FILE``); none by default.
    """
    bin_dir, ran = tmp_path / "bin", tmp_path / "levels.txt"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(f"""#!/bin/bash
if [ "$1" = -c ]; then exec {sys.executable} "$@"; fi
if [ "$1 $2" = "-m loadtest.distinct" ]; then
  while [ $# -gt 0 ]; do [ "$1" = --cameras ] && n=$2; shift; done
  for i in $(seq 1 "$n"); do echo "distinct/cam$i.mp4"; done; exit 0
fi
if [ "$1 $2" = "-m loadtest" ]; then
  while [ $# -gt 0 ]; do [ "$1" = --sweep ] && n=$2; shift; done
  echo "$n" >> {ran}; [ "$n" -le {keeps_up_at_most} ]; exit $?
fi
exit 9
""")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "OUT": str(tmp_path / "out"),
           "LEVEL_PAUSE_S": "0", "DISTINCT_NEXT_FILE": str(tmp_path / "distinct.next"),
           "SERVE_LOG_FILE": str(serve_log or tmp_path / "no-server.log"),
           "PLAIN_LOG_FILE": str(tmp_path / "no-plain-server.log")}
    name, *args = script
    result = subprocess.run(["bash", str(ROOT / "benchmarks" / name), *args, levels], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [int(line) for line in ran.read_text().split()] if ran.exists() else []


@pytest.mark.parametrize("script", [FLEET, QUIET], ids=["fleet_gpu", "quiet_scenes_gpu"])
def test_ascending_levels_stop_after_the_first_that_does_not_keep_up(tmp_path: Path, script: tuple[str, ...]) -> None:
    assert _levels(tmp_path, script, "12,16,20,24", keeps_up_at_most=17) == [12, 16, 20]


@pytest.mark.parametrize("script", [FLEET, QUIET], ids=["fleet_gpu", "quiet_scenes_gpu"])
def test_descending_levels_stop_after_the_first_that_keeps_up(tmp_path: Path, script: tuple[str, ...]) -> None:
    assert _levels(tmp_path, script, "20,16,12,8", keeps_up_at_most=13) == [20, 16, 12]


def test_descending_levels_run_all_when_none_keeps_up(tmp_path: Path) -> None:
    assert _levels(tmp_path, FLEET, "20,16", keeps_up_at_most=4) == [20, 16]


def test_ascending_levels_run_all_when_each_keeps_up(tmp_path: Path) -> None:
    assert _levels(tmp_path, FLEET, "8,12", keeps_up_at_most=40) == [8, 12]


def test_one_level_runs_alone(tmp_path: Path) -> None:
    assert _levels(tmp_path, FLEET, "12", keeps_up_at_most=4) == [12]


def test_quiet_scenes_keeps_the_next_copy_index_where_it_is_told(tmp_path: Path) -> None:
    _levels(tmp_path, QUIET, "6,4", keeps_up_at_most=5)  # 6 fails, 4 keeps up: 10 copies made
    assert (tmp_path / "distinct.next").read_text().strip() == "10"


@pytest.mark.parametrize(("script", "so_far"), [(FLEET, "fleet_graph_serve_so_far.log.gz"),
                                                (QUIET, "serve_so_far.log.gz")], ids=["fleet_gpu", "quiet_scenes_gpu"])
def test_a_sweep_leaves_the_servers_log_so_far(tmp_path: Path, script: tuple[str, ...], so_far: str) -> None:
    # 2026-12-07: the machine was given back while the graph ran, before `stop` brought its log back.
    log = tmp_path / "serve.log"
    log.write_text("Running: 4 reqs, Waiting: 0 reqs\n")
    assert _levels(tmp_path, script, "12", keeps_up_at_most=12, serve_log=log) == [12]
    assert gzip.decompress((tmp_path / "out" / so_far).read_bytes()) == log.read_bytes()
    assert log.exists()  # the server's log stays for `stop`


@pytest.mark.parametrize("script", [FLEET, QUIET], ids=["fleet_gpu", "quiet_scenes_gpu"])
def test_a_sweep_without_a_server_log_leaves_none(tmp_path: Path, script: tuple[str, ...]) -> None:
    _levels(tmp_path, script, "12", keeps_up_at_most=12)
    assert not list((tmp_path / "out").glob("*so_far*"))
