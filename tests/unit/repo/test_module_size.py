"""Every Python module of the repository stays at most 450 lines (the developers' guide: "modules ≲ 450
lines"): a longer one is split by feature, as ``tests/unit/http/guards/`` and ``tests/integration/k8s/`` were.

Walks the tree rather than asking git, so a source archive is checked too; the virtual environment, caches
and other ignored build folders are left out by name.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MAX_LINES = 450
#: Folders that hold no project code: environments, caches, the device bundle, generated checkpoints and data.
SKIPPED = {".venv", ".git", ".gpu-bundle", ".gpu-clips", ".mypy_cache", ".ruff_cache", ".pytest_cache",
           "__pycache__", "node_modules", "checkpoints", "build", "dist", "data"}


def modules(root: Path) -> list[Path]:
    """The ``.py`` files under ``root`` outside :data:`SKIPPED` folders (and outside any ``*.egg-info``)."""
    return sorted(p for p in root.rglob("*.py")
                  if not any(part in SKIPPED or part.endswith(".egg-info") for part in p.relative_to(root).parts))


def too_long(paths: list[Path], root: Path) -> dict[str, int]:
    """``{path relative to root: line count}`` of the files over :data:`MAX_LINES` lines."""
    counts = {str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    return {path: n for path, n in counts.items() if n > MAX_LINES}


def test_no_module_is_over_450_lines():
    found = modules(ROOT)
    assert any(p.name == "streams.py" for p in found) and len(found) > 300  # the walk reaches the packages
    assert too_long(found, ROOT) == {}


def test_a_module_over_the_limit_is_named(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "vendored.py").write_text("x = 1\n" * 1000)
    assert too_long(modules(tmp_path), tmp_path) == {"pkg/long.py": MAX_LINES + 1}
