"""The model-family seam: what differs between Qwen2.5-VL (Cosmos-Reason1) and Qwen3-VL
(Cosmos-Reason2, the Cosmos 3 reasoners), behind one small interface (Ray-free).

A :class:`ModelFamily` says how a clip question becomes the engine's input and how the output
is read back: the chat format (the checkpoint's own chat template, rendered as transformers
renders it), the per-frame text the processor adds, the frame input handed to vLLM and to the
transformers processor, the reasoning split, the transformers model class and the generated
checkpoints. The values the config needs (geometry, recipe defaults, which architectures belong to
which family) are :mod:`serve_app.config.families`; :func:`serve_app.model.family.family_for` picks
the implementation by ``model.family``.
"""

from __future__ import annotations

import abc
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from serve_app.config.families import DEFAULTS, FamilyName
from serve_app.protocol import FrameGeometry, ReasoningFormat, Turn

if TYPE_CHECKING:
    import jinja2


@functools.cache
def _compiled(template: str) -> jinja2.Template:
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # transformers' chat_template_utils environment: sandboxed, trim_blocks/lstrip_blocks, loopcontrols,
    # plus the raise_exception global and a tojson filter that checkpoints' templates use.
    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, **kwargs: Any) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, **kwargs)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def render_chat(template: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
    """Renders ``messages`` with a chat template, as ``processor.apply_chat_template(...,
    tokenize=False)`` does (transformers' sandboxed jinja2 environment).

    Args:
        template: the jinja chat template (the checkpoint's own, or a family's copy).
        messages: HF/OpenAI-shaped messages (``{"role": str, "content": str | list[dict]}``).
        add_generation_prompt: end with the opening of the assistant's turn.

    Raises:
        jinja2.TemplateError: the template refuses the messages (its ``raise_exception``).
    """
    return _compiled(template).render(messages=messages, add_generation_prompt=add_generation_prompt)


def checkpoint_chat_template(path: str | Path) -> str | None:
    """The chat template a local checkpoint ships, or None (a hub id, or no template file).

    Looked up as transformers does: ``chat_template.jinja``, then ``chat_template.json``, then
    ``tokenizer_config.json``'s ``chat_template`` (a string; a list of named templates: ``default``).
    """
    p = Path(path)
    if not p.is_dir():
        return None
    if (p / "chat_template.jinja").is_file():
        return (p / "chat_template.jinja").read_text()
    for name in ("chat_template.json", "tokenizer_config.json"):
        f = p / name
        if not f.is_file():
            continue
        value = json.loads(f.read_text()).get("chat_template")
        if isinstance(value, list):
            value = next((t.get("template") for t in value if t.get("name") == "default"), None)
        if isinstance(value, str):
            return value
    return None


class ModelFamily(abc.ABC):
    """One model family's behaviour (stateless; one instance per family).

    Attributes:
        name: the family (``model.family``).
        reasoning_format: how its output splits (:func:`serve_app.model.reasoning.split_reasoning`).
        hf_model_class: the transformers class that runs it on CPU (``transformers.<name>``).
        chat_template: the family's chat template as the generated checkpoints carry it; a real
            checkpoint's own template replaces it at run time (:func:`checkpoint_chat_template`).
        text_tokens_per_group: prompt tokens the processor adds per temporal patch besides the video
            tokens (Qwen3-VL's ``<t seconds>`` and vision start/end per frame pair; 0 for Qwen2.5-VL).
    """

    name: ClassVar[FamilyName]
    reasoning_format: ClassVar[ReasoningFormat]
    hf_model_class: ClassVar[str]
    chat_template: ClassVar[str]
    text_tokens_per_group: ClassVar[int] = 0

    @property
    def geometry(self) -> FrameGeometry:
        """The frame sizes the family's processor keeps (:mod:`serve_app.config.families`)."""
        return DEFAULTS[self.name].geometry

    def build_messages(self, question: str, system_prompt: str, history: Sequence[Turn] = ()) -> list[dict[str, Any]]:
        """Chat messages in the HF/OpenAI multimodal shape: system text, then user video + text (media
        before text, as both families' recipes put it), then the conversation's later turns (text).

        An empty ``system_prompt`` sends no system message, as a client that sends none to plain vLLM: the
        chat template's own default applies (Qwen2.5-VL's adds "You are a helpful assistant."; Qwen3-VL's none).
        """
        system = [{"role": "system", "content": [{"type": "text", "text": system_prompt}]}] if system_prompt else []
        return [
            *system,
            {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]},
            *({"role": t.role, "content": [{"type": "text", "text": t.text}]} for t in history),
        ]

    def render_prompt(
        self, question: str, system_prompt: str, history: Sequence[Turn] = (), template: str | None = None
    ) -> str:
        """The prompt text: ``template`` (the checkpoint's; default :attr:`chat_template`) over
        :meth:`build_messages`, with the generation prompt. It holds one video placeholder
        ``<|vision_start|><|video_pad|><|vision_end|>`` that the processor expands."""
        messages = self.build_messages(question, system_prompt, history)
        return render_chat(template or self.chat_template, messages, add_generation_prompt=True)

    def video_metadata(self, frames: np.ndarray, fps: float) -> dict[str, Any]:
        """``transformers.video_utils.VideoMetadata`` fields of a clip of ``(T, H, W, 3) uint8`` frames
        sampled at ``fps`` frames/s (frame k at k/fps s from the window's start)."""
        n = int(frames.shape[0])
        return {"total_num_frames": n, "fps": float(fps)}

    @abc.abstractmethod
    def processor_kwargs(self, frames: np.ndarray, fps: float) -> dict[str, Any]:
        """HF processor kwargs (besides the videos and their metadata) for a clip already at a size the
        processor keeps: it must neither resample nor resize it."""

    @abc.abstractmethod
    def vllm_video(
        self, frames: np.ndarray, fps: float, extra: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """``(item, mm_processor_kwargs)``: what vLLM's ``multi_modal_data["video"]`` takes for the clip and
        the request's processor kwargs (``extra``, e.g. ``{"device": "cuda"}``, merged in)."""

    @abc.abstractmethod
    def write_checkpoint(self, out: Path, variant: str) -> None:
        """Writes a generated checkpoint of ``variant`` (``tiny-random``, ``full-dummy``) into ``out``."""
