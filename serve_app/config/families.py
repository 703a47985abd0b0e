"""The model families the config knows (``model.family``), as values: which checkpoints belong to
which family, and each family's defaults for the settings that differ between them.

A family is an architecture line with one vision processor, chat format and recipe: ``qwen2_5_vl``
(NVIDIA Cosmos-Reason1-7B, Qwen2.5-VL) and ``qwen3_vl`` (NVIDIA Cosmos-Reason2-2B/8B, post-trained
from Qwen3-VL; the Cosmos 3 reasoners, ``Cosmos3ForConditionalGeneration`` in vLLM 0.24, a subclass
of ``Qwen3VLForConditionalGeneration``). The behaviour behind the name (prompt, reasoning split,
engine input, checkpoints) is :mod:`serve_app.model.family`; this module holds only what the config
needs to fill its defaults, so that the config stays below the model code.

``model.family: auto`` is resolved once, when the config is validated (:func:`resolve_family`):
from the ``architectures`` of a local checkpoint's ``config.json``, else from a known hub id.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Literal

from serve_app import model_facts as q25
from serve_app import model_facts_qwen3_vl as q3
from serve_app.protocol import FrameGeometry

FamilyName = Literal["qwen2_5_vl", "qwen3_vl"]
FAMILIES: tuple[FamilyName, ...] = ("qwen2_5_vl", "qwen3_vl")

#: ``config.json`` ``architectures`` of each family (transformers' and vLLM's class names).
ARCHITECTURES: dict[str, FamilyName] = {
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
    "Qwen3VLForConditionalGeneration": "qwen3_vl",
    # vLLM 0.24 models/cosmos3.py: the Cosmos 3 reasoners, a Qwen3-VL subclass without the generator.
    "Cosmos3ForConditionalGeneration": "qwen3_vl",
}

#: Hub id prefixes (case-insensitive) whose family is known without reading the checkpoint.
HUB_PREFIXES: tuple[tuple[str, FamilyName], ...] = (
    ("nvidia/cosmos-reason1", "qwen2_5_vl"),
    ("qwen/qwen2.5-vl", "qwen2_5_vl"),
    ("nvidia/cosmos-reason2", "qwen3_vl"),
    ("nvidia/cosmos3", "qwen3_vl"),
    ("nvidia/cosmos-3", "qwen3_vl"),
    ("qwen/qwen3-vl", "qwen3_vl"),
)


@dataclasses.dataclass(frozen=True)
class FamilyDefaults:
    """What differs by family in the config's defaults (sources in the facts modules).

    Attributes:
        geometry: the frame sizes the family's processor keeps (28- or 32-px multiples).
        total_pixels, max_frame_pixels, min_frame_pixels: the recipe's pixel budget (``decode.budget``).
        frame_pixels: ``(min, max)`` frame area in pixels the family's processor accepts unresized
            (bounds the warm-up clip).
        system_prompt: the recipe's system prompt.
        temperature, top_p, repetition_penalty, max_tokens, top_k, presence_penalty: the recipe's
            sampling settings.
        warmup_clip_shape: ``(frames, height, width)`` of the default warm-up clip.
    """

    geometry: FrameGeometry
    total_pixels: int
    max_frame_pixels: int
    min_frame_pixels: int
    frame_pixels: tuple[int, int]
    system_prompt: str
    temperature: float
    top_p: float
    repetition_penalty: float
    max_tokens: int
    top_k: int
    presence_penalty: float
    warmup_clip_shape: tuple[int, int, int]


DEFAULTS: dict[FamilyName, FamilyDefaults] = {
    "qwen2_5_vl": FamilyDefaults(
        geometry=FrameGeometry(pixel_factor=q25.PIXEL_FACTOR, temporal_patch=q25.TEMPORAL_PATCH_SIZE),
        total_pixels=q25.COSMOS_TOTAL_PIXELS,
        max_frame_pixels=q25.COSMOS_MAX_FRAME_PIXELS,
        min_frame_pixels=q25.VIDEO_MIN_PIXELS,
        frame_pixels=(q25.MIN_PIXELS, q25.MAX_PIXELS),
        system_prompt=q25.COSMOS_SYSTEM_PROMPT,
        temperature=q25.COSMOS_TEMPERATURE,
        top_p=q25.COSMOS_TOP_P,
        repetition_penalty=q25.COSMOS_REPETITION_PENALTY,
        max_tokens=q25.COSMOS_MAX_TOKENS,
        top_k=0,
        presence_penalty=0.0,
        warmup_clip_shape=(2, 336, 336),
    ),
    "qwen3_vl": FamilyDefaults(
        geometry=FrameGeometry(pixel_factor=q3.PIXEL_FACTOR, temporal_patch=q3.TEMPORAL_PATCH_SIZE),
        # The recipe bounds the clip's t·h·w by 8192·32² (inference_sample.py's processor size); this
        # budget counts frame pairs (qwen-vl-utils' rule: share = total / frames · 2), hence the half.
        total_pixels=q3.COSMOS_TOTAL_PIXELS // q3.TEMPORAL_PATCH_SIZE,
        # qwen-vl-utils for Qwen3-VL and transformers' Qwen3VLVideoProcessor (max_video_tokens 768, the
        # 128·32² class default shortest_edge): 768 and 128 tokens of 32² px per frame.
        max_frame_pixels=768 * q3.PIXELS_PER_TOKEN,
        min_frame_pixels=128 * q3.PIXELS_PER_TOKEN,
        frame_pixels=(4 * q3.PIXELS_PER_TOKEN, q3.IMAGE_MAX_PIXELS),
        system_prompt=q3.COSMOS_SYSTEM_PROMPT,
        # the recipe's settings without reasoning (its system prompt asks for none; reasoning is asked
        # for in the question: q3.COSMOS_REASONING_PROMPT)
        temperature=float(q3.COSMOS_ANSWER_SAMPLING["temperature"]),
        top_p=float(q3.COSMOS_ANSWER_SAMPLING["top_p"]),
        repetition_penalty=float(q3.COSMOS_ANSWER_SAMPLING["repetition_penalty"]),
        max_tokens=q3.COSMOS_MAX_TOKENS,
        top_k=int(q3.COSMOS_ANSWER_SAMPLING["top_k"]),
        presence_penalty=float(q3.COSMOS_ANSWER_SAMPLING["presence_penalty"]),
        warmup_clip_shape=(2, 320, 320),
    ),
}


def family_of_architectures(architectures: list[str], where: str) -> FamilyName:
    """The family of a checkpoint's ``config.json`` ``architectures``.

    Raises:
        ValueError: none of them is a supported architecture (names them and the supported ones).
    """
    for arch in architectures:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    raise ValueError(
        f"{where} declares architectures {architectures}, none of which this server supports; supported: "
        f"{', '.join(sorted(ARCHITECTURES))} (set model.family only for a checkpoint of one of them)"
    )


#: A hub id (``org/name``), as opposed to a local path.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def check_family(architectures: list[str] | None, family: str, where: str) -> None:
    """Checks that a loaded checkpoint's ``architectures`` belong to the configured ``family``.

    Raises:
        ValueError: an unsupported architecture, or one of the other family (names the setting to change).
    """
    if not architectures:
        return
    actual = family_of_architectures(list(architectures), where)
    if actual != family:
        raise ValueError(
            f"{where} declares {architectures} (model family {actual}) but the config's model.family is "
            f"{family}: set model.family: {actual}, or point model.model_id at a {family} checkpoint"
        )


def resolve_family(family: str, model_id: str, generated: bool) -> FamilyName:
    """``model.family`` as a concrete family.

    Args:
        family: ``auto`` or a family name (returned as is).
        model_id: a local checkpoint directory or a hub id.
        generated: ``model.checkpoint`` is set (a generated checkpoint, built at ``model_id`` if missing).

    ``auto``: a local ``config.json``'s ``architectures`` decide; else a known hub id
    (:data:`HUB_PREFIXES`); else a generated checkpoint, or a local path this machine cannot read,
    is Cosmos-Reason1's (``qwen2_5_vl``), which the model replica checks when it loads the checkpoint
    (:func:`check_family`).

    A family given explicitly is checked against a readable local ``config.json``.

    Raises:
        ValueError: an unsupported architecture, a family the checkpoint contradicts, or a hub id of no
            known family (set ``model.family``).
    """
    where = "model.model_id's config.json"
    config_json = Path(model_id).expanduser() / "config.json"
    architectures: list[str] | None = None
    if config_json.is_file():
        try:
            architectures = list(json.loads(config_json.read_text()).get("architectures") or [])
        except (OSError, ValueError, AttributeError) as e:
            raise ValueError(f"{where} cannot be read as a JSON object ({type(e).__name__})") from None
    if family != "auto":
        check_family(architectures, family, where)  # a family the checkpoint contradicts is refused here
        return family  # type: ignore[return-value]  # the field's Literal admits only FAMILIES besides auto
    if architectures is not None:
        return family_of_architectures(architectures, where)
    lowered = model_id.lower()
    for prefix, name in HUB_PREFIXES:
        if lowered.startswith(prefix):
            return name
    if generated or not HUB_ID.fullmatch(model_id):
        # a generated checkpoint, or a local path not on this machine (e.g. a volume of the model pods):
        # the default family; the model replica checks it against the checkpoint it loads (check_family)
        return "qwen2_5_vl"
    raise ValueError(
        f"cannot tell the model family of {model_id!r} (no local config.json, not a known hub id): set "
        f"model.family to one of {', '.join(FAMILIES)}"
    )
