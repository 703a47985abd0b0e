"""The test tree's layout (issue 28): test modules are imported by basename (``tests/`` has no
``__init__.py``), so each basename is used once; tests sit in a folder per package or feature; no test
module imports another (shared code lives in the helper modules of ``tests/``)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def all_test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts)


def test_every_test_basename_is_used_once():
    names = Counter(p.name for p in all_test_files())
    assert not {n: c for n, c in names.items() if c > 1}


def test_no_init_files_so_basenames_are_the_module_names():
    assert not list(TESTS.rglob("__init__.py"))


def test_unit_and_integration_tests_sit_in_a_package_or_feature_folder():
    flat = [p for p in all_test_files() if p.parent.name in ("unit", "integration")]
    assert not flat, flat


def test_no_test_module_imports_another():
    stems = {p.stem for p in all_test_files()}
    bad = []
    for p in all_test_files():
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])  # fmt: skip
            bad += [f"{p.relative_to(TESTS)}: {n}" for n in names if n.split(".")[0] in stems]
    assert not bad, bad
