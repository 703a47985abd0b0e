"""Prompt building for video questions (Qwen2.5-VL / Cosmos-Reason1, Qwen3-VL / Cosmos-Reason2).

The rendered text is the model's own chat template (the checkpoint's; the family's copy,
:data:`serve_app.model_facts.CHAT_TEMPLATE` for Qwen2.5-VL, ``<|im_start|>role\\n…<|im_end|>\\n``) over one
system turn and one user turn holding the video placeholder
``<|vision_start|><|video_pad|><|vision_end|>`` before the question, as in NVIDIA's
Cosmos-Reason1 and Cosmos-Reason2 inference examples. The processor (HF or vLLM) expands the single
``<|video_pad|>`` into one token per merged patch (Qwen3-VL: per frame pair, each after its timestamp).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from serve_app.errors import InvalidRequestError
from serve_app.model.family import family_for
from serve_app.protocol import Turn


def build_messages(
    question: str, system_prompt: str, history: Sequence[Turn] = (), family: str = "qwen2_5_vl"
) -> list[dict[str, Any]]:
    """Chat messages in the HF/OpenAI multimodal shape: system text, then user video + text, then
    the conversation's later turns (text) (:meth:`serve_app.model.family.ModelFamily.build_messages`)."""
    return family_for(family).build_messages(question, system_prompt, history)


def render_prompt(
    question: str,
    system_prompt: str,
    history: Sequence[Turn] = (),
    family: str = "qwen2_5_vl",
    template: str | None = None,
) -> str:
    """The prompt text the chat template yields for :func:`build_messages` (with generation prompt).

    ``history`` (later assistant and user turns of a conversation about the clip) follows the first
    user turn, each as ``<|im_start|>role\\n…<|im_end|>\\n``; the clip stays in the first user turn.
    ``template`` is the checkpoint's own chat template (default: the family's copy, the one the
    generated checkpoints carry).

    Example (Qwen2.5-VL)::

        <|im_start|>system
        You are a helpful assistant.<|im_end|>
        <|im_start|>user
        <|vision_start|><|video_pad|><|vision_end|>Is anyone in danger?<|im_end|>
        <|im_start|>assistant
    """
    return family_for(family).render_prompt(question, system_prompt, history, template)


#: A chat-template control token: every special token of Qwen2.5-VL's tokenizer has this
#: form (``<|im_start|>``, ``<|im_end|>``, ``<|vision_start|>``, ``<|video_pad|>``, ``<|image_pad|>``,
#: ``<|endoftext|>`` …; tokenizer_config.json ``added_tokens_decoder``). The tokenizer turns such
#: text into the control token itself, so user text holding one could close its turn, open a
#: system turn or add a video placeholder.
SPECIAL_TOKEN_RE = re.compile(r"<\|[^<>|\s]{1,64}\|>")


def check_user_text(text: str, param: str) -> None:
    """Refuses user text that holds a chat-template control token (see :data:`SPECIAL_TOKEN_RE`).

    Refused rather than rewritten, so that what the model reads is what the client sent.

    Raises:
        InvalidRequestError (400): names ``param`` and the first token found.
    """
    m = SPECIAL_TOKEN_RE.search(text)
    if m is not None:
        raise InvalidRequestError(
            f"{param} contains {m.group(0)!r}, a control token of the model's chat template; user text may "
            "not contain '<|…|>' tokens (they would end the user's turn, start another or add a video)",
            param=param,
        )
