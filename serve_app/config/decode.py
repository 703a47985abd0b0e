"""Clip decoding and frame sampling (``decode:``): frame rate, frame count, pixel budget, FFmpeg settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.config.base import _Model
from serve_app.model_facts import COSMOS_FPS, COSMOS_MAX_FRAME_PIXELS, COSMOS_TOTAL_PIXELS, VIDEO_MIN_PIXELS


class PixelBudget(_Model):
    """How big sampled frames may be (pixels), per the Cosmos-Reason1 recipe."""

    total_pixels: int = Field(
        COSMOS_TOTAL_PIXELS,
        gt=0,
        description="Pixel budget of a whole clip (= 8192·28², i.e. 8192 vision tokens; Cosmos-Reason1 recipe).",
    )
    max_frame_pixels: int = Field(
        COSMOS_MAX_FRAME_PIXELS,
        gt=0,
        description="Per-frame cap before the clip share is applied (768·28² = 602,112; Cosmos-Reason1 recipe).",
    )
    min_frame_pixels: int = Field(
        VIDEO_MIN_PIXELS,
        gt=0,
        description="Smallest frame area (128·28² = 100,352; qwen-vl-utils VIDEO_MIN_PIXELS, also the "
        "transformers Qwen2-VL video processor default).",
    )
    max_aspect_ratio: float = Field(200.0, gt=1, description="Largest long/short side ratio Qwen2.5-VL accepts.")


class DecodeConfig(_Model):
    """Clip decoding and frame sampling."""

    fps: float = Field(
        COSMOS_FPS, gt=0, le=30, description="Default sampling rate in frames per second (Cosmos recipe: 4)."
    )
    max_frames: int = Field(128, ge=2, description="Default cap on sampled frames per clip.")
    budget: PixelBudget = Field(default_factory=PixelBudget, description="Frame size limits.")
    threads: int = Field(1, ge=0, description="FFmpeg decoder threads per clip (0 = FFmpeg's automatic choice).")
    timeout_s: float = Field(60.0, gt=0, description="Wall-clock limit for decoding one clip, in seconds.")
    interpolation: Literal["FAST_BILINEAR", "BILINEAR", "BICUBIC", "AREA", "LANCZOS"] = Field(
        "AREA",
        description="libswscale filter that resizes kept frames to the pixel budget. AREA: closest to the "
        "antialiased bicubic resize of qwen-vl-utils of the cheap filters, and no slower than BILINEAR "
        "(results/decode_bench.json, resize_filters).",
    )
