"""No file that the repository's own ``.gitignore`` names as a run output is committed.

A stream store (``streams-reason2.sqlite`` and its ``-wal`` / ``-shm``, written by ``serve run`` of a
config whose ``streams.db_path`` is relative) was once committed with other work; git keeps tracking a
file that was added before or despite its ignore rule, so only this check catches it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60, check=False)


def tracked_but_ignored(root: Path) -> list[str]:
    """The committed (indexed) files under ``root`` that its ``.gitignore`` files ignore."""
    listed = git(root, "ls-files", "--cached", "--ignored", "--exclude-standard")
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def test_no_tracked_file_is_one_the_gitignore_ignores():
    if git(ROOT, "rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout (a source archive): nothing is tracked")
    assert tracked_but_ignored(ROOT) == [], "committed run outputs that .gitignore names: git rm --cached them"


def test_a_tracked_file_the_gitignore_names_is_found(tmp_path):
    assert git(tmp_path, "init", "-q").returncode == 0
    (tmp_path / ".gitignore").write_text("/streams.sqlite*\n")
    (tmp_path / "streams.sqlite").write_bytes(b"SQLite format 3\0")
    (tmp_path / "kept.txt").write_text("kept\n")
    assert git(tmp_path, "add", ".gitignore", "kept.txt").returncode == 0
    assert tracked_but_ignored(tmp_path) == []
    assert git(tmp_path, "add", "-f", "streams.sqlite").returncode == 0
    assert tracked_but_ignored(tmp_path) == ["streams.sqlite"]
