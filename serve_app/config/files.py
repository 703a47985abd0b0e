"""Serve config files: read one, load an application's :class:`~serve_app.config.app.AppConfig`, derive one
with ``dotted.key=value`` overrides."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from serve_app.config.app import AppConfig


def load_serve_config(path: str | Path) -> dict[str, Any]:
    """Reads a Serve config file (YAML) into a dict."""
    doc: dict[str, Any] = yaml.safe_load(Path(path).read_text())
    return doc


def app_config_from_file(path: str | Path, app_index: int = 0) -> AppConfig:
    """The :class:`AppConfig` of one application in a Serve config file.

    Raises:
        pydantic.ValidationError: the ``args`` do not match the config model.
        KeyError, IndexError: the file has no such application.
    """
    doc = load_serve_config(path)
    return AppConfig.model_validate(doc["applications"][app_index].get("args") or {})


def override(doc: dict[str, Any], assignments: list[str], app_index: int = 0) -> dict[str, Any]:
    """Applies ``dotted.key=value`` assignments to one application's ``args`` (values parsed as YAML).

    Example: ``model.engine_args.load_format=dummy``. The result is validated
    against :class:`AppConfig`.

    Raises:
        ValueError: an assignment without ``=``.
        pydantic.ValidationError: the result is not a valid config.
    """
    out = copy.deepcopy(doc)
    args = out["applications"][app_index].setdefault("args", {})
    for a in assignments:
        key, sep, raw = a.partition("=")
        if not sep:
            raise ValueError(f"expected key=value, got {a!r}")
        node = args
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(raw)
    AppConfig.model_validate(args)
    return out


def validation_message(e: Any) -> str:
    """A pydantic ``ValidationError`` of an application's ``args`` as one line: ``args.<field>: <why>``
    (the first error; the input's values are not repeated)."""
    err = e.errors()[0]
    where = ".".join(str(x) for x in err.get("loc", ()))
    return f"args.{where}: {err.get('msg')}" if where else f"args: {err.get('msg')}"
