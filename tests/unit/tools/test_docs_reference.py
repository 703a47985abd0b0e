"""The generated references (docs/reference/config.md, docs/reference/api.md) are current.

They are made from the pydantic models' fields and descriptions by ``python -m cosmos_tools.docs``;
a field added, renamed or redescribed in ``serve_app`` without regenerating them fails here.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cosmos_tools import docs
from serve_app.config import AppConfig

ROOT = Path(__file__).resolve().parents[3]


def test_the_committed_reference_pages_are_what_the_generator_makes_now():
    for rel, text in docs.pages().items():
        path = ROOT / rel
        assert path.exists(), f"{rel} is missing: run `{docs.REGENERATE}` and commit it"
        assert path.read_text(encoding="utf-8") == text, (
            f"{rel} is stale (a model's fields or descriptions changed): run `{docs.REGENERATE}` and commit it"
        )


def config_keys(model: type[BaseModel], instance: BaseModel, prefix: str = "") -> set[str]:
    out = set()
    for name in model.model_fields:
        value = getattr(instance, name)
        key = f"{prefix}.{name}" if prefix else name
        if isinstance(value, BaseModel):
            out |= config_keys(type(value), value, key)
        else:
            out.add(key)
    return out


def test_every_config_field_is_on_the_config_page_with_its_description():
    page = docs.config_page()
    for key in config_keys(AppConfig, AppConfig()):
        section, _, field = key.rpartition(".")
        heading = f"## `{section}`" if section else "## Top level"
        start = page.index(heading + "\n")
        body = page[start : page.find("\n## ", start + 1)]
        assert f"| `{field}` |" in body, key


def test_every_request_model_field_is_on_the_api_page():
    page = docs.api_page()
    for _title, models in docs.API_MODELS:
        for model in models:
            assert f"### `{model.__name__}`" in page
            for name, info in model.model_fields.items():
                assert f"| `{name}` |" in page, (model.__name__, name)
                if info.description:
                    assert docs.cell(info.description) in page, (model.__name__, name)


def listed_models() -> list[type[BaseModel]]:
    return [model for _title, models in docs.API_MODELS for model in models]


def test_every_api_field_has_a_description():
    missing = [f"{m.__name__}.{name}" for m in listed_models() for name, info in m.model_fields.items()
               if not (info.description or "").strip()]  # fmt: skip
    assert missing == [], f"API fields without a description (the reference shows '—'): {missing}"


def models_named_by(annotation: Any) -> set[type[BaseModel]]:
    """The pydantic models an annotation names, through unions, lists, tuples and dicts."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return set().union(*(models_named_by(a) for a in typing.get_args(annotation)))


def test_the_walk_finds_models_inside_unions_and_lists():
    from serve_app.cameras import protocol as p

    assert models_named_by(list[p.AnswerEvent | p.StateEvent] | None) == {p.AnswerEvent, p.StateEvent}
    assert models_named_by(dict[str, int]) == set()


def test_every_model_a_listed_model_names_is_listed_too():
    listed = set(listed_models())
    named = {(m.__name__, n.__name__) for m in listed for info in m.model_fields.values()
             for n in models_named_by(info.annotation) if n not in listed}  # fmt: skip
    assert named == set(), f"models named by API fields but not on the reference page: {sorted(named)}"


def test_check_mode_names_a_stale_page(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    assert docs.main(["--check"]) == 1
    assert "python -m cosmos_tools.docs" in capsys.readouterr().err
    assert docs.main([]) == 0
    assert docs.main(["--check"]) == 0
