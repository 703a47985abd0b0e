"""Frame sampling math: which frames of a clip to keep, and at what size (token sampling is elsewhere:
:mod:`serve_app.protocol` ``SamplingOptions``).

Pure functions, no decoding (the request's value is :class:`serve_app.protocol.FrameSampling`).
Times are seconds; sizes are pixels.

Frame size follows Qwen2.5-VL's ``smart_resize`` (transformers
``image_processing_qwen2_vl.smart_resize``, the same as qwen-vl-utils) with
the Cosmos-Reason1 per-frame cap ``min(768·28², total_pixels / frames · 2)``
(model-facts.md). Frames of this size pass the HF processor unchanged. The model family's pixel
factor (28 for Qwen2.5-VL, 32 for Qwen3-VL: :class:`serve_app.protocol.FrameGeometry`) is a
parameter: qwen-vl-utils applies the same rule with ``image_patch_size=16`` for Qwen3-VL.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Generic, TypeVar

import numpy as np

from serve_app.config import PIXEL_FACTOR, PixelBudget
from serve_app.errors import UnprocessableClipError

#: Qwen2.5-VL's temporal patch: frames enter the vision tower in pairs.
TEMPORAL_PATCH = 2


def _round_by(x: float, f: int) -> int:
    return round(x / f) * f


def _floor_by(x: float, f: int) -> int:
    return math.floor(x / f) * f


def _ceil_by(x: float, f: int) -> int:
    return math.ceil(x / f) * f


def smart_resize(
    height: int, width: int, *, min_pixels: int, max_pixels: int, factor: int = PIXEL_FACTOR, max_aspect: float = 200
) -> tuple[int, int]:
    """Qwen2-VL ``smart_resize``: the nearest size with sides divisible by ``factor``.

    Args:
        height, width: displayed source size in pixels.
        min_pixels, max_pixels: bounds on the result's area in pixels.

    Returns:
        ``(height, width)`` in pixels, both multiples of ``factor`` and ≥ ``factor``.

    Raises:
        UnprocessableClipError: the aspect ratio exceeds ``max_aspect`` (Qwen2.5-VL's 200).
    """
    if height <= 0 or width <= 0:
        raise UnprocessableClipError(f"frame size {width}x{height} is empty")
    aspect = max(height, width) / min(height, width)
    if aspect > max_aspect:
        raise UnprocessableClipError(
            f"frame aspect ratio {aspect:.0f}:1 ({width}x{height}) exceeds the limit of {max_aspect:.0f}:1"
        )
    h_bar = max(factor, _round_by(height, factor))
    w_bar = max(factor, _round_by(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, _floor_by(height / beta, factor))
        w_bar = max(factor, _floor_by(width / beta, factor))
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = _ceil_by(height * beta, factor)
        w_bar = _ceil_by(width * beta, factor)
    return h_bar, w_bar


def frame_pixel_cap(n_frames: int, budget: PixelBudget) -> int:
    """Per-frame pixel cap for a clip of ``n_frames`` frames (pixels).

    ``max(min(max_frame_pixels, total_pixels / n_frames · 2), 1.05 · min_frame_pixels)``,
    the Cosmos-Reason1 / qwen-vl-utils rule (the factor 2 is the temporal patch).
    """
    share = budget.total_pixels / max(n_frames, 1) * TEMPORAL_PATCH
    return int(max(min(budget.max_frame_pixels, share), budget.min_frame_pixels * 1.05))


def frame_size(
    height: int, width: int, n_frames: int, budget: PixelBudget, factor: int = PIXEL_FACTOR
) -> tuple[int, int]:
    """Target ``(height, width)`` in pixels of each sampled frame.

    Args:
        height, width: displayed (rotation applied) source frame size in pixels.
        n_frames: number of frames the clip will carry (after even padding).
        factor: the family's pixel factor (:attr:`serve_app.protocol.FrameGeometry.pixel_factor`).

    Raises:
        UnprocessableClipError: aspect ratio over the budget's limit.
    """
    return smart_resize(
        height,
        width,
        min_pixels=budget.min_frame_pixels,
        max_pixels=frame_pixel_cap(n_frames, budget),
        factor=factor,
        max_aspect=budget.max_aspect_ratio,
    )


def video_tokens(n_frames: int, height: int, width: int, factor: int = PIXEL_FACTOR) -> int:
    """LLM tokens of a clip: ``T/2 · (H/factor) · (W/factor)``, one per ``factor``² pixels of a frame pair
    (``factor`` = patch × merge: Qwen2.5-VL 28, Qwen3-VL 32; model-facts.md).

    Example: 40 frames of 420×756 at factor 28 → grid (20, 30, 54) → 8,100 tokens.
    """
    t = math.ceil(n_frames / TEMPORAL_PATCH)
    return t * (height // factor) * (width // factor)


def even_frame_count(n: int) -> int:
    """Frames after padding to the temporal patch: the next even number, at least 2."""
    return max(TEMPORAL_PATCH, n + (n % TEMPORAL_PATCH))


@dataclasses.dataclass(frozen=True)
class FrameGrid:
    """Target timestamps of a clip window.

    Attributes:
        start_s: first target time in seconds (clip time, 0 = first frame).
        step_s: spacing of targets in seconds (``1 / fps``).
        count: number of targets.
        fps: effective sampling rate in frames per second, passed to the model
            (Qwen2.5-VL derives temporal positions from it).
    """

    start_s: float
    step_s: float
    count: int
    fps: float

    def target(self, k: int) -> float:
        """The k-th target time in seconds."""
        return self.start_s + k * self.step_s

    @property
    def tolerance_s(self) -> float:
        """Largest distance (s) between a target and the frame picked for it: half a step."""
        return self.step_s / 2


def plan_grid(
    clip_end_s: float,
    *,
    fps: float,
    max_frames: int,
    start_s: float | None = None,
    end_s: float | None = None,
    source_fps: float | None = None,
) -> FrameGrid:
    """The sampling grid of a window ``[start_s, end_s)`` of a clip lasting ``clip_end_s``.

    Targets are ``start + k/fps`` for every target strictly before the window's
    end (the end of the last frame), so a 10-s clip at 4 fps gives 40 targets
    (0 … 9.75 s). If that exceeds ``max_frames`` (rounded down to even), the
    rate is lowered evenly to ``max_frames / duration``. A source slower than
    ``fps`` is sampled at its own rate.

    Raises:
        UnprocessableClipError: the window is empty.
    """
    a = max(0.0, start_s or 0.0)
    b = clip_end_s if end_s is None else min(end_s, clip_end_s)
    duration = b - a
    if duration <= 0:
        if start_s and a >= clip_end_s:
            message = f"start_s {a:.6g} s is at or past the clip's end ({clip_end_s:.3f} s): the window is empty"
        else:
            message = f"the window from {a:.6g} s to {b:.6g} s is empty (the clip lasts {clip_end_s:.3f} s)"
        raise UnprocessableClipError(message, param="start_s" if start_s else None)
    cap = max(TEMPORAL_PATCH, max_frames - max_frames % TEMPORAL_PATCH)
    rate = fps if source_fps is None else min(fps, source_fps)
    count = max(1, math.ceil(duration * rate - 1e-9))
    if count > cap:
        rate = cap / duration
        count = cap
    return FrameGrid(start_s=a, step_s=1.0 / rate, count=count, fps=rate)


#: The frame payload a :class:`FrameSelector` holds (``av.VideoFrame`` in the decoder).
F = TypeVar("F")


class FrameSelector(Generic[F]):
    """Streams decoded frame times and picks, for each grid target, the nearest frame.

    Frames must arrive in presentation order. A frame is kept for at most one
    target, only if within ``grid.tolerance_s`` of it, so kept times are
    strictly increasing and never invented. Only the frames within one
    tolerance window are held. Generic over the frame payload.

    Usage::

        sel = FrameSelector(grid)
        for t, frame in decoded:                 # t: seconds
            for k, t_kept, kept in sel.push(t, frame):
                ...                              # target k got frame `kept`
        for k, t_kept, kept in sel.finish(): ...
    """

    def __init__(self, grid: FrameGrid):
        self.grid = grid
        self._k = 0
        self._cands: list[tuple[float, F]] = []
        self._last_t = -math.inf

    @property
    def done(self) -> bool:
        """True once every target is settled (later frames cannot be picked)."""
        return self._k >= self.grid.count

    def wants(self, t: float) -> bool:
        """Whether a frame at ``t`` (s) could still be picked (before decoding it)."""
        return not self.done and t > self._last_t and t >= self.grid.target(self._k) - self.grid.tolerance_s

    def push(self, t: float, frame: F) -> list[tuple[int, float, F]]:
        """Offers one frame at time ``t`` (s); returns the targets settled as ``(k, t, frame)``."""
        out: list[tuple[int, float, F]] = []
        if t <= self._last_t or self.done:  # duplicate/out-of-order timestamp, or nothing left to fill
            return out
        self._last_t = t
        while self._k < self.grid.count and t > self.grid.target(self._k) + self.grid.tolerance_s:
            self._settle(out)
        if self._k < self.grid.count and t >= self.grid.target(self._k) - self.grid.tolerance_s:
            self._cands.append((t, frame))
        return out

    def _settle(self, out: list[tuple[int, float, F]]) -> None:
        g, tol = self.grid.target(self._k), self.grid.tolerance_s
        near = [c for c in self._cands if abs(c[0] - g) <= tol]
        if near:
            t_best, f_best = min(near, key=lambda c: abs(c[0] - g))
            out.append((self._k, t_best, f_best))
            self._cands = [c for c in self._cands if c[0] > t_best]
        self._k += 1
        if self._k < self.grid.count:
            lo = self.grid.target(self._k) - tol
            self._cands = [c for c in self._cands if c[0] >= lo]

    def finish(self) -> list[tuple[int, float, F]]:
        """Settles the remaining targets once the stream has ended."""
        out: list[tuple[int, float, F]] = []
        while self._k < self.grid.count:
            self._settle(out)
        self._cands = []
        return out


def plan_picks(times_s: np.ndarray, grid: FrameGrid, is_reference: np.ndarray | None = None) -> np.ndarray:
    """Chooses, for each grid target, one frame of a clip whose frame times are known up front.

    Each target takes a frame within ``grid.tolerance_s`` of it, later than the
    frame picked for the previous target (so picks strictly increase and no
    frame is used twice). Among those candidates a reference frame (one other
    frames are predicted from, so decoded anyway) is preferred to a
    non-reference one, then the nearest; a target with no candidate is left
    out (a gap in a variable-rate or sparse clip is not filled with a copy).

    Args:
        times_s: ``(N,) float`` presentation times in seconds, sorted ascending.
        grid: the targets.
        is_reference: ``(N,) bool`` per frame, or None when unknown (nearest wins).

    Returns:
        ``(K,) int64`` indices into ``times_s``, strictly increasing, ``K ≤ grid.count``.
    """
    times = np.asarray(times_s, dtype=np.float64)
    tol = grid.tolerance_s + 1e-9
    targets = grid.start_s + np.arange(grid.count) * grid.step_s
    lo_idx = np.searchsorted(times, targets - tol, side="left")
    hi_idx = np.searchsorted(times, targets + tol, side="right")
    picks: list[int] = []
    nxt = 0
    for k in range(grid.count):
        lo, hi = max(int(lo_idx[k]), nxt), int(hi_idx[k])
        if lo >= hi:
            continue
        dist = np.abs(times[lo:hi] - targets[k])
        if is_reference is not None:
            refs = is_reference[lo:hi]
            if refs.any() and not refs.all():
                dist = np.where(refs, dist, dist + 1e6)  # any reference frame beats every non-reference one
        best = lo + int(np.argmin(dist))
        picks.append(best)
        nxt = best + 1
    return np.asarray(picks, dtype=np.int64)
