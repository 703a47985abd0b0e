"""Prompt building for Qwen2.5-VL / Cosmos-Reason1 video questions.

The rendered text is the model's own chat template
(:data:`serve_app.model_facts.CHAT_TEMPLATE`, ``<|im_start|>role\\n…<|im_end|>\\n``) over one
system turn and one user turn holding the video placeholder
``<|vision_start|><|video_pad|><|vision_end|>`` before the question, as in NVIDIA's
Cosmos-Reason1 inference example. The processor (HF or vLLM) expands the single
``<|video_pad|>`` into one token per merged patch.
"""

from __future__ import annotations

from serve_app.model_facts import render_chat_template


def build_messages(question: str, system_prompt: str) -> list[dict]:
    """Chat messages in the HF/OpenAI multimodal shape: system text, then user video + text."""
    return [
        {"role": "system", "content": [{"type": "text", "text": system_prompt}]},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]},
    ]


def render_prompt(question: str, system_prompt: str) -> str:
    """The prompt text the chat template yields for :func:`build_messages` (with generation prompt).

    Example::

        <|im_start|>system
        You are a helpful assistant.<|im_end|>
        <|im_start|>user
        <|vision_start|><|video_pad|><|vision_end|>Is anyone in danger?<|im_end|>
        <|im_start|>assistant
    """
    return render_chat_template(build_messages(question, system_prompt), add_generation_prompt=True)
