"""The project's trees import each other one way: runtime <- load tester <- benches (and dev tools).

Every module under ``serve_app/``, ``loadtest/``, ``benchmarks/`` and ``cosmos_tools/`` is parsed
with :mod:`ast`; every ``import`` and ``from … import`` counts, the ones inside functions too
(a lazy import is still a dependency). The allowed arrows between the top-level trees:

* ``serve_app`` (the runtime, what the images carry): nothing of the others, nor of ``tests/``;
* ``loadtest``: ``serve_app`` only;
* ``benchmarks``: ``serve_app`` and ``loadtest``;
* ``cosmos_tools``: ``serve_app`` only.

None of them imports ``tests/`` (its helper modules are imported by basename, e.g. ``clipgen``).
The benches' modules import each other without a cycle either.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TREES = ("serve_app", "loadtest", "benchmarks", "cosmos_tools")
#: ``tests/`` is not a package: its helpers are imported by their module names.
TEST_HELPERS = frozenset({"tests"} | {p.stem for p in (ROOT / "tests").glob("*.py")})
ALLOWED: dict[str, set[str]] = {
    "serve_app": set(),
    "loadtest": {"serve_app"},
    "benchmarks": {"serve_app", "loadtest"},
    "cosmos_tools": {"serve_app"},
}


def module_name(path: Path) -> str:
    """``serve_app/testing/ports.py`` -> ``serve_app.testing.ports``; a package's ``__init__`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module ``source`` imports, anywhere in it (functions included), as absolute dotted names.

    ``from a import b`` yields ``a`` and ``a.b`` (``b`` may be a submodule); relative imports are
    resolved against ``module``.
    """
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def project_imports() -> dict[str, set[str]]:
    """Module -> the modules it imports, for every module of the four trees."""
    graph = {}
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            name = module_name(path)
            graph[name] = imported_modules(path.read_text(), name, path.name == "__init__.py")
    return graph


def top(name: str) -> str:
    """The tree a module belongs to (``tests`` for the test helpers), or its top-level package."""
    head = name.split(".")[0]
    return "tests" if head in TEST_HELPERS else head


def package_edges(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Tree -> the other project trees (and ``tests``) its modules import."""
    known = set(TREES) | {"tests"}
    edges: dict[str, set[str]] = {}
    for module, imports in graph.items():
        src = top(module)
        edges.setdefault(src, set()).update(t for t in map(top, imports) if t in known and t != src)
    return edges


def find_cycle(edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle of a directed graph as ``[a, b, …, a]``, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


GRAPH = project_imports()


@pytest.mark.parametrize("tree", TREES)
def test_each_tree_imports_only_the_trees_below_it(tree):
    known = set(TREES) | {"tests"}
    wrong = sorted(
        (module, imported)
        for module, imports in GRAPH.items() if top(module) == tree
        for imported in imports if top(imported) in known - ALLOWED[tree] - {tree}
    )
    assert not wrong, f"{tree} may import only {sorted(ALLOWED[tree]) or 'none of the other trees'}: {wrong}"


def test_no_import_cycle_between_the_trees():
    assert find_cycle(package_edges(GRAPH)) is None


def test_no_import_cycle_between_the_benches():
    benches = {m for m in GRAPH if m.startswith("benchmarks.")}
    edges = {m: {i for i in GRAPH[m] if i in benches and i != m} for m in benches}
    assert find_cycle(edges) is None


def test_every_tree_was_read():
    assert {top(m) for m in GRAPH} == set(TREES)
    assert "serve_app.testing.local_serve" in GRAPH and "benchmarks.gpu" in GRAPH


# ----------------------------------------------------- the checker itself


def test_imports_inside_functions_count():
    source = "import os\n\ndef f():\n    from loadtest.double import running_double\n    import benchmarks.gpu\n"
    found = imported_modules(source, "serve_app.x")
    assert {"loadtest.double", "loadtest.double.running_double", "benchmarks.gpu"} <= found
    assert package_edges({"serve_app.x": found}) == {"serve_app": {"loadtest", "benchmarks"}}


def test_relative_imports_resolve_against_the_module():
    assert imported_modules("from . import workload\nfrom .gpu import x\n", "benchmarks.vllm_serve") >= {
        "benchmarks.workload", "benchmarks.gpu.x"
    }
    assert "serve_app.testing.ports" in imported_modules("from .ports import free_port\n", "serve_app.testing", True)
    assert "serve_app.errors" in imported_modules("from ..errors import ServeAppError\n", "serve_app.http.sse")


def test_test_helpers_count_as_the_tests_tree():
    assert package_edges({"serve_app.x": {"clipgen"}, "loadtest.y": {"tests.data"}}) == {
        "serve_app": {"tests"}, "loadtest": {"tests"}
    }


def test_a_cycle_is_found_and_a_chain_is_not():
    assert find_cycle({"serve_app": {"loadtest"}, "loadtest": {"benchmarks"}, "benchmarks": {"serve_app"}}) == [
        "benchmarks", "serve_app", "loadtest", "benchmarks"
    ]
    assert find_cycle({"benchmarks": {"loadtest", "serve_app"}, "loadtest": {"serve_app"}}) is None


# ----------------------------------------------------- inside the runtime: floors, no cycle

#: ``serve_app``'s parts (a subpackage or a top-level module), bottom floor first. A part imports only
#: parts on lower floors (or itself). ``protocol`` (the values that cross handles) imports only the error
#: base (issue 22's contract step): every part that uses those values stands above it.
FLOORS: list[set[str]] = [
    {"errors", "text", "model_facts", "metrics", "log_limit"},
    {"model_facts_qwen3_vl"},  # Qwen3 keeps Qwen2.5's added tokens: it imports them from model_facts
    {"protocol"},
    {"config"},
    {"sources"},
    {"decode"},
    {"model"},
    {"http"},
    {"cameras"},
    {"deployments"},
    {"app", "checkpoint", "preflight"},
    {"testing"},
]
FLOOR = {part: n for n, parts in enumerate(FLOORS) for part in parts}


def runtime_edges(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """``serve_app`` module -> the ``serve_app`` modules it imports (``from pkg import name`` resolved to
    the module ``pkg.name`` when that is one, else to ``pkg``)."""
    modules = {m for m in graph if m.startswith("serve_app.")}
    edges: dict[str, set[str]] = {}
    for module in modules:
        targets = set()
        for imported in graph[module]:
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != module:
                targets.add(imported)
        edges[module] = targets
    return edges


def part(module: str) -> str:
    """``serve_app.http.query.protocol`` -> ``http``; ``serve_app.config`` -> ``config``."""
    return module.split(".")[1]


RUNTIME = runtime_edges(GRAPH)


def test_every_runtime_part_has_a_floor():
    assert {part(m) for m in RUNTIME} <= set(FLOOR), sorted({part(m) for m in RUNTIME} - set(FLOOR))


def test_no_import_cycle_between_runtime_modules():
    assert find_cycle(RUNTIME) is None


def test_runtime_parts_import_only_lower_floors():
    upward = sorted(
        (module, imported)
        for module, imports in RUNTIME.items()
        for imported in imports
        if part(imported) != part(module) and FLOOR[part(imported)] >= FLOOR[part(module)]
    )
    assert not upward, upward


def test_at_most_ten_top_level_modules():
    top_level = sorted(p.stem for p in (ROOT / "serve_app").glob("*.py") if p.name != "__init__.py")
    assert len(top_level) <= 10, top_level


def test_a_lazy_cycle_inside_the_runtime_is_found():
    graph = {
        "serve_app.a": imported_modules("def f():\n    from serve_app.b import x\n", "serve_app.a"),
        "serve_app.b": imported_modules("from serve_app import a\n", "serve_app.b"),
    }
    assert find_cycle(runtime_edges(graph)) == ["serve_app.a", "serve_app.b", "serve_app.a"]


def test_the_contract_imports_only_the_error_base():
    """``serve_app.protocol`` (issue 22): the standard library, numpy, pydantic and ``serve_app.errors``."""
    import sys

    imported = GRAPH["serve_app.protocol"]
    assert {m for m in imported if top(m) == "serve_app"} <= {"serve_app.errors", "serve_app.errors.ErrorInfo"}
    outside = {m.split(".")[0] for m in imported} - {"serve_app", "__future__"}
    assert outside <= {"numpy", "pydantic"} | set(sys.stdlib_module_names), outside
