"""One logger rule (serve_app.log_limit.get_logger): every serve_app logger is a child of Ray Serve's."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

from serve_app.log_limit import get_logger

ROOT = Path(__file__).resolve().parents[3]


def test_a_modules_logger_is_a_child_of_ray_serves():
    log = get_logger("serve_app.cameras.registry")
    assert log.name == "ray.serve.serve_app.cameras.registry"
    assert log.parent is logging.getLogger("ray.serve") or log.parent.name.startswith("ray.serve")


def test_no_module_makes_its_logger_another_way():
    offenders = []
    for path in sorted((ROOT / "serve_app").rglob("*.py")):
        if path == ROOT / "serve_app" / "log_limit.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_records_reach_ray_serves_handlers(caplog):
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        get_logger("serve_app.some.module").info("hello %s", "there")
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("ray.serve.serve_app.some.module", "hello there")]
