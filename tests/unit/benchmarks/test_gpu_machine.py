"""benchmarks/gpu_machine.sh on the CPU: ``pack-out``, the one phase that needs no staged bundle.

A device call returns at most 8 files from ``$OUT`` and drops the rest (2026-12-07: a loop step's
``lifecycle.json`` was lost that way), so a call that writes more ends with ``pack-out``, which puts every file
under ``$OUT`` into one ``out.tgz``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "gpu_machine.sh"

pytestmark = pytest.mark.skipif(not shutil.which("tar"), reason="needs tar")


def _pack_out(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out)}
    return subprocess.run(["bash", str(SCRIPT), "pack-out", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def _write(out: Path, names: list[str]) -> dict[str, str]:
    contents = {}
    for name in names:
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"contents of {name}\n")
        contents[name] = path.read_text()
    return contents


def test_more_than_eight_files_become_one_archive_holding_each(tmp_path: Path) -> None:
    out = tmp_path / "out"
    names = [f"s8/sustain{i}/lifecycle.json" for i in range(5)] + ["s8.log", "a.json", "a.tgz", "serve.log.gz"]
    contents = _write(out, names)
    result = _pack_out(out)
    assert result.returncode == 0, result.stderr
    assert "9 files" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["out.tgz"]
    with tarfile.open(out / "out.tgz") as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}
        assert sorted(members) == sorted(names)
        for name, text in contents.items():
            extracted = tar.extractfile(members[name])
            assert extracted is not None and extracted.read().decode() == text


def test_eight_files_or_fewer_are_left_as_they_are(tmp_path: Path) -> None:
    out = tmp_path / "out"
    names = [f"level{i}.json" for i in range(8)]
    _write(out, names)
    result = _pack_out(out)
    assert result.returncode == 0, result.stderr
    assert "left as they are" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == sorted(names)


def test_the_limit_is_an_argument(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write(out, ["a.json", "b.json", "c.json"])
    assert _pack_out(out, "2").returncode == 0
    assert [p.name for p in out.iterdir()] == ["out.tgz"]


def test_other_phases_still_refuse_without_a_staged_bundle(tmp_path: Path) -> None:
    if Path("/root/site/.done").exists():
        pytest.skip("a staged bundle is on this machine")
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    result = subprocess.run(["bash", str(SCRIPT), "freeze"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 3
    assert "not staged" in result.stdout
