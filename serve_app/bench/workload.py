"""The reference GPU workload shared by every GPU figure of the project.

A 10-s window of a real clip, sampled at 4 fps to 40 frames of 420×756
(8,100 video tokens), the plain system prompt "You are a helpful assistant."
and the question below: 8,133 prompt tokens; 256 output tokens with
``ignore_eos``. Every request uses a different window (start offsets
``k · step_s``), so no multimodal or prefix cache can serve one request from
another's work.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from loadtest import statistics as stats
from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decoder import DecodedClip, FrameSampling, decode_clip
from serve_app.model_facts import DEFAULT_SYSTEM_PROMPT

QUESTION = "Is anyone in this scene in danger? Answer with reasoning."
SYSTEM_PROMPT = DEFAULT_SYSTEM_PROMPT
WINDOW_S = 10.0
OUTPUT_TOKENS = 256


@dataclasses.dataclass(frozen=True)
class Window:
    """One request's clip window: ``[start_s, start_s + WINDOW_S)`` of ``clip``."""

    clip: Path
    start_s: float

    @property
    def end_s(self) -> float:
        """Window end in clip seconds."""
        return self.start_s + WINDOW_S


def windows(clip: Path, n: int, clip_duration_s: float) -> list[Window]:
    """``n`` distinct 10-s windows spread evenly over a clip of ``clip_duration_s`` seconds.

    Raises:
        ValueError: the clip is shorter than one window.
    """
    span = clip_duration_s - WINDOW_S - 0.2
    if span < 0:
        raise ValueError(f"clip lasts {clip_duration_s:.1f} s; a window needs {WINDOW_S:.0f} s")
    step = span / max(n - 1, 1)
    return [Window(clip, round(k * step, 3)) for k in range(n)]


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """What one bench side sends, in order: ``warmup`` (one clip, untimed), ``warm_burst`` (untimed,
    all at once), ``single`` (one at a time, timed), ``batch`` (all at once, timed)."""

    warmup: list
    warm_burst: list
    single: list
    batch: list


def split_run(files: list, single: int, inflight: int, warm_burst: int = 0) -> RunFiles:
    """Splits a side's distinct window files: ``[0]`` warm-up, then ``single``, then ``inflight``;
    the warm burst takes the last ``warm_burst`` files, so it never reuses a timed window.

    Raises:
        ValueError: fewer files than ``1 + single + inflight + warm_burst``.
    """
    need = 1 + single + inflight + warm_burst
    if len(files) < need:
        raise ValueError(f"{len(files)} window files; this side needs {need}")
    return RunFiles(
        warmup=files[:1],
        warm_burst=files[len(files) - warm_burst :] if warm_burst else [],
        single=files[1 : 1 + single],
        batch=files[1 + single : 1 + single + inflight],
    )


def decode_window(w: Window) -> DecodedClip:
    """Decodes one window with the project's decoder (4 fps, Cosmos pixel budget)."""
    return decode_clip(w.clip, FrameSampling(fps=4.0, max_frames=128, start_s=w.start_s, end_s=w.end_s),
                       DecodeConfig(), LimitsConfig())


def summary(latencies_s: list[float]) -> dict:
    """Mean, p50 and p95 of a list of seconds, 4 decimals (:func:`loadtest.statistics.percentiles`)."""
    return {"mean": round(statistics.fmean(latencies_s), 4) if latencies_s else None,
            **stats.percentiles(latencies_s, (50, 95), digits=4)}
