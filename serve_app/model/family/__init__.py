"""The model families behind one interface (:class:`~serve_app.model.family.base.ModelFamily`):
``qwen2_5_vl`` (Cosmos-Reason1) and ``qwen3_vl`` (Cosmos-Reason2, the Cosmos 3 reasoners)."""

from __future__ import annotations

from serve_app.config.families import FamilyName
from serve_app.model.family.base import ModelFamily, checkpoint_chat_template, render_chat
from serve_app.model.family.qwen2_5_vl import Qwen25VL
from serve_app.model.family.qwen3_vl import Qwen3VL

_FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (Qwen25VL(), Qwen3VL())}


def family_for(name: FamilyName | str) -> ModelFamily:
    """The family named ``name`` (``model.family`` after validation).

    Raises:
        ValueError: not a family (``auto`` is resolved by the config, never passed here).
    """
    try:
        return _FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}; known: {', '.join(sorted(_FAMILIES))}") from None


__all__ = ["ModelFamily", "Qwen3VL", "Qwen25VL", "checkpoint_chat_template", "family_for", "render_chat"]
