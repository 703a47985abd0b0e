"""Qwen3-VL (NVIDIA Cosmos-Reason2-2B/8B; the Cosmos 3 reasoners): 32-px frames, timestamps as
text before each frame pair, reasoning in an optional ``<think>`` block (facts:
:mod:`serve_app.model_facts_qwen3_vl`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from serve_app import model_facts_qwen3_vl as facts
from serve_app.model.family.base import ModelFamily


class Qwen3VL(ModelFamily):
    """Qwen3-VL / Cosmos-Reason2.

    Its processor writes each frame pair as ``<t seconds><|vision_start|><|video_pad|>…<|vision_end|>``
    (transformers ``Qwen3VLProcessor.replace_video_token``; vLLM ``Qwen3VLMultiModalProcessor``), the
    times computed from the metadata's ``frames_indices`` and ``fps`` (the mean of the pair's two
    frames). vLLM 0.24 reads that metadata from the video item itself (``(frames, metadata)``;
    ``video_needs_metadata``). Its video processor bounds the whole clip's ``t·h·w`` by
    ``size={shortest_edge, longest_edge}``: the clip's own area is given as both bounds, so the
    frames the decode tier sized under the pixel budget pass unresized (``smart_resize`` returns a
    size that is already a multiple of 32 unchanged when ``t·h·w`` lies within the bounds).
    """

    name = "qwen3_vl"
    reasoning_format = "think_then_answer"
    hf_model_class = "Qwen3VLForConditionalGeneration"
    chat_template = facts.CHAT_TEMPLATE
    #: ``<12.3 seconds>`` (≤ 8 tokens with Qwen's one-digit-per-token pre-tokenizer) + vision start/end.
    text_tokens_per_group = 10

    def video_metadata(self, frames: np.ndarray, fps: float) -> dict[str, Any]:
        """Adds ``frames_indices`` 0…T-1 (frame k at k/fps s: times from the window's start)."""
        n = int(frames.shape[0])
        return {"total_num_frames": n, "fps": float(fps), "frames_indices": list(range(n))}

    def processor_kwargs(self, frames: np.ndarray, fps: float) -> dict[str, Any]:
        """No resampling, no per-frame cap, and the clip's own ``t·h·w`` as the size bounds (no resize)."""
        t, h, w = (int(x) for x in frames.shape[:3])
        area = t * h * w
        return {
            "do_sample_frames": False,
            "cap_pixels_per_frame": False,
            "size": {"shortest_edge": area, "longest_edge": area},
        }

    def vllm_video(
        self, frames: np.ndarray, fps: float, extra: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """``(frames, metadata)`` as the item (``do_sample_frames`` False in it too, as vLLM reads it there)."""
        item = (frames, {**self.video_metadata(frames, fps), "do_sample_frames": False})
        kwargs = self.processor_kwargs(frames, fps)
        kwargs.update(extra or {})
        return item, kwargs

    def write_checkpoint(self, out: Path, variant: str) -> None:
        """Cosmos-Reason2-8B's architecture (:mod:`serve_app.model.checkpoint_qwen3_vl`)."""
        from serve_app.model.checkpoint_qwen3_vl import write_checkpoint

        write_checkpoint(out, variant)
