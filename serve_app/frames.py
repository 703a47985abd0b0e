"""Kept frames into the model's array: resize to the pixel budget, RGB24, upright.

:class:`FrameStore` receives decoded ``av.VideoFrame`` objects one at a time
and writes each straight into one preallocated ``(T, H, W, 3) uint8`` array,
so a clip never exists as full-resolution RGB, let alone as float arrays.
The target size follows the Qwen2.5-VL pixel budget
(:func:`serve_app.sampling.frame_size`) of the *displayed* frame: the
container's display matrix (phones record portrait video as rotated
landscape) is read from the first frame and applied after resizing.

Conversion runs in two libswscale calls: scale in the source's planar YUV,
then YUV→RGB24 at the target size. With FFmpeg 8's swscale this costs about a
third of one scale-and-convert call to packed RGB24 (``resize_filters`` in
``results/decode_bench.json``): the unscaled YUV→RGB path is SIMD, the
scaled packed-RGB output path is not.
"""

from __future__ import annotations

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from serve_app.config import PixelBudget
from serve_app.sampling import even_frame_count, frame_size

#: Planar YUV layouts whose scaled copy feeds swscale's fast unscaled YUV→RGB path.
_TWO_STEP_FORMATS = frozenset({"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "nv12"})


def display_rotation_cw(frame: av.VideoFrame) -> int:
    """Clockwise rotation in degrees (0/90/180/270) that shows ``frame`` upright.

    FFmpeg reports the display matrix as a counter-clockwise angle
    (``av_display_rotation_get``); phones' ``rotate=90`` tag reads back as
    -90, i.e. 90° clockwise.
    """
    try:
        ccw = float(frame.rotation or 0.0)
    except Exception:  # noqa: BLE001 - no or malformed display matrix
        return 0
    return int(round(-ccw / 90.0)) % 4 * 90


class FrameStore:
    """Resizes, converts and stacks the kept frames of one clip.

    Args:
        capacity: most frames that will be added (the planned pick count).
        budget: the pixel budget; the per-frame size is computed for
            ``even_frame_count(capacity)`` frames.
        interpolation: libswscale filter name (``BILINEAR``, ``BICUBIC``, ``AREA``, …).

    Attributes:
        frames: ``(even_frame_count(capacity), H, W, 3) uint8``, allocated at the
            first :meth:`add` (the display rotation is known from then on), or None.
        times_s: presentation time (s) of each added frame.
        rotation_cw: display rotation applied, in degrees clockwise.
        source_size: ``(width, height)`` of the displayed source frame in pixels.
    """

    def __init__(self, capacity: int, budget: PixelBudget, interpolation: str = "AREA"):
        self.capacity = max(1, capacity)
        self.budget = budget
        self.interpolation = interpolation
        self.frames: np.ndarray | None = None
        self.times_s: list[float] = []
        self.rotation_cw = 0
        self.source_size: tuple[int, int] | None = None
        self._conv_size: tuple[int, int] = (0, 0)
        # One swscale context per step, reused for every frame (a fresh one costs ~0.5 ms to set up).
        self._scaler = VideoReformatter()
        self._converter = VideoReformatter()

    def _allocate(self, frame: av.VideoFrame) -> None:
        self.rotation_cw = display_rotation_cw(frame)
        w, h = frame.width, frame.height
        disp_w, disp_h = (h, w) if self.rotation_cw in (90, 270) else (w, h)
        self.source_size = (disp_w, disp_h)
        n_out = even_frame_count(self.capacity)
        out_h, out_w = frame_size(disp_h, disp_w, n_out, self.budget)
        # Resize in the stored orientation, rotate the small result.
        self._conv_size = (out_h, out_w) if self.rotation_cw in (90, 270) else (out_w, out_h)
        self.frames = np.empty((n_out, out_h, out_w, 3), dtype=np.uint8)

    def to_rgb(self, frame: av.VideoFrame) -> np.ndarray:
        """One frame as ``(h, w, 3) uint8`` RGB at the stored-orientation target size (not rotated)."""
        cw, ch = self._conv_size
        if (frame.width, frame.height) != (cw, ch) and frame.format.name in _TWO_STEP_FORMATS:
            frame = self._scaler.reformat(frame, width=cw, height=ch, interpolation=self.interpolation, threads=1)
        rgb = self._converter.reformat(
            frame, width=cw, height=ch, format="rgb24", interpolation=self.interpolation, threads=1
        )
        return rgb.to_ndarray()

    def add(self, frame: av.VideoFrame, t_s: float) -> None:
        """Converts ``frame`` (shown at ``t_s`` seconds) into the next slot.

        Raises:
            IndexError: more than ``capacity`` frames added.
            UnprocessableClipError: the displayed size breaks the pixel budget's aspect limit.
        """
        if self.frames is None:
            self._allocate(frame)
        n = len(self.times_s)
        if n >= self.capacity:
            raise IndexError(f"FrameStore holds at most {self.capacity} frames")
        rgb = self.to_rgb(frame)
        if self.rotation_cw:
            rgb = np.rot90(rgb, k=-(self.rotation_cw // 90))
        self.frames[n] = rgb
        self.times_s.append(t_s)

    def __len__(self) -> int:
        return len(self.times_s)

    def finish(self) -> tuple[np.ndarray, np.ndarray, int]:
        """The stacked clip: an even number (≥ 2) of frames, the last repeated as padding.

        Returns:
            ``(frames (T, H, W, 3) uint8, timestamps_s (T_real,) float64, padded_frames)``.

        Raises:
            ValueError: no frame was added.
        """
        n_real = len(self.times_s)
        if n_real == 0 or self.frames is None:
            raise ValueError("no frame was added")
        # Fewer frames than planned keep the planned size: the per-frame cap only loosens as the count drops.
        n_final = even_frame_count(n_real)
        frames = self.frames[:n_final]
        frames[n_real:] = frames[n_real - 1]
        return frames, np.asarray(self.times_s, dtype=np.float64), n_final - n_real
