"""Qwen2.5-VL (NVIDIA Cosmos-Reason1-7B): 28-px frames, temporal positions from the fps,
``<think>``/``<answer>`` output (facts: :mod:`serve_app.model_facts`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from serve_app import model_facts
from serve_app.model.family.base import ModelFamily


class Qwen25VL(ModelFamily):
    """Qwen2.5-VL / Cosmos-Reason1.

    The processor derives the temporal positions (``second_per_grid_ts``) from the metadata's fps;
    vLLM 0.24's Qwen2-VL data parser drops per-item metadata, so it goes in the processor kwargs
    (vLLM forwards them to the HF processor call).
    """

    name = "qwen2_5_vl"
    reasoning_format = "think_answer"
    hf_model_class = "Qwen2_5_VLForConditionalGeneration"
    chat_template = model_facts.CHAT_TEMPLATE

    def processor_kwargs(self, frames: np.ndarray, fps: float) -> dict[str, Any]:
        """No resampling (frames are sampled by timestamp in the decode tier) and no per-frame cap
        (they are sized to the pixel budget already)."""
        return {"do_sample_frames": False, "cap_pixels_per_frame": False}

    def vllm_video(
        self, frames: np.ndarray, fps: float, extra: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """The frames as they are; the metadata (true fps) in the processor kwargs."""
        kwargs: dict[str, Any] = {
            "video_metadata": [self.video_metadata(frames, fps)],
            **self.processor_kwargs(frames, fps),
        }
        kwargs.update(extra or {})
        return frames, kwargs

    def write_checkpoint(self, out: Path, variant: str) -> None:
        """Cosmos-Reason1-7B's architecture (:mod:`serve_app.model.checkpoint_qwen2_5_vl`)."""
        from serve_app.model.checkpoint_qwen2_5_vl import write_checkpoint

        write_checkpoint(out, variant)
