"""benchmarks/gpu_bundle_parts.sh: the staged bundle cut again into parts that fit one device call."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_bundle_parts.sh"
MIB = 1048576

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("git", "split", "sha256sum")),
                                reason="needs git, split and sha256sum")


def _bundle(root: Path, data: bytes, part_bytes: int) -> None:
    """A bundle as make-bundle.sh leaves it: .gpu-bundle/pK/{part.KK, SHA256, stage.sh}."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text(".gpu-bundle/\n")  # as in the project: the device does not carry it
    digest = hashlib.sha256(data).hexdigest()
    for k in range(0, -(-len(data) // part_bytes)):
        d = root / ".gpu-bundle" / f"p{k}"
        d.mkdir(parents=True)
        (d / f"part.{k:02d}").write_bytes(data[k * part_bytes:(k + 1) * part_bytes])
        (d / "SHA256").write_text(digest + "\n")
        (d / "stage.sh").write_text("echo stage\n")


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=root, capture_output=True, text=True, check=False,
                          env={**os.environ, "LC_ALL": "C"})


def _joined(root: Path) -> bytes:
    """The parts in the order stage.sh joins them (by file name)."""
    parts = sorted((root / ".gpu-bundle").glob("p*/part.*"), key=lambda p: p.name)
    return b"".join(p.read_bytes() for p in parts)


def test_twelve_parts_are_cut_again_in_number_order_and_still_make_the_bundle(tmp_path):
    data = os.urandom(11 * MIB + 12345)
    _bundle(tmp_path, data, MIB)  # p0 ... p11: the folders p10 and p11 sort before p2 by name
    r = _run(tmp_path, "3")
    assert r.returncode == 0, r.stderr
    assert "4 parts of 3 MiB" in r.stdout and "stage.sh 4" in r.stdout
    dirs = sorted(p.name for p in (tmp_path / ".gpu-bundle").iterdir())
    assert dirs == ["p0", "p1", "p2", "p3"]
    for d in dirs:
        assert {p.name for p in (tmp_path / ".gpu-bundle" / d).iterdir()} == {f"part.{int(d[1:]):02d}", "SHA256",
                                                                                "stage.sh"}
    assert _joined(tmp_path) == data


def test_the_part_size_leaves_room_for_the_tracked_tree(tmp_path):
    _bundle(tmp_path, os.urandom(2 * MIB), MIB)
    (tmp_path / "big.bin").write_bytes(b"\0" * (20 * MIB - 1024))  # with .gitignore, just under 20 MiB
    subprocess.run(["git", "add", "big.bin"], cwd=tmp_path, check=True)
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "of 41 MiB" in r.stdout  # 64 MiB - 20 MiB tracked - 3 MiB margin (the ignored bundle not counted)
    (tmp_path / "untracked.bin").write_bytes(b"\0" * (2 * MIB))  # untracked, not ignored: the device carries it
    r = _run(tmp_path)
    assert "of 39 MiB" in r.stdout


def test_parts_that_do_not_make_the_bundle_are_refused_and_left_as_they_were(tmp_path):
    data = os.urandom(3 * MIB)
    _bundle(tmp_path, data, MIB)
    with (tmp_path / ".gpu-bundle" / "p1" / "part.01").open("ab") as f:
        f.write(b"x")
    before = _joined(tmp_path)
    r = _run(tmp_path, "2")
    assert r.returncode == 4
    assert "checksum" in r.stdout
    assert _joined(tmp_path) == before
    assert sorted(p.name for p in (tmp_path / ".gpu-bundle").iterdir()) == ["p0", "p1", "p2"]


def test_no_bundle_says_so(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    r = _run(tmp_path)
    assert r.returncode == 2
    assert "no bundle" in r.stdout
