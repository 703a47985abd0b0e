"""Kept frames into the model's array: resize to the pixel budget, RGB24, upright.

:class:`FrameStore` receives decoded ``av.VideoFrame`` objects one at a time
and writes each straight into one preallocated ``(T, H, W, 3) uint8`` array,
so a clip never exists as full-resolution RGB, let alone as float arrays.
The target size follows the Qwen2.5-VL pixel budget
(:func:`serve_app.decode.sampling.frame_size`) of the *displayed* frame, as a player
shows it: the codec's cropping window (applied by FFmpeg's decoder), the
sample aspect ratio (anamorphic pixels are stretched to square ones), and the
display matrix (phones record portrait video as rotated landscape; mirrored
cameras write flips), read from the first frame and applied after resizing.
A stream whose frame size changes mid-clip keeps one output size: later
pictures are scaled to fit inside it with their own shape kept (letterbox or
pillarbox, black bars), and :attr:`FrameStore.size_changes` says when.

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
from serve_app.decode.sampling import even_frame_count, frame_size

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
    return round(-ccw / 90.0) % 4 * 90


def display_transform(frame: av.VideoFrame) -> tuple[bool, bool, bool]:
    """``(transpose, flip_rows, flip_cols)`` that turn ``frame``'s stored picture into the displayed one.

    Reads the display matrix side data (ISO/IEC 14496-12 ``tkhd`` matrix, FFmpeg
    ``AV_FRAME_DATA_DISPLAYMATRIX``: ``(x', y') = (a·x + c·y, b·x + d·y)`` with
    ``[a b u; c d v; …]`` in 16.16 fixed point). Rotations by multiples of 90° and
    horizontal/vertical flips are exact; other matrices (rare shears) fall back to the
    nearest rotation. Apply as: transpose first, then flip rows, then flip columns.
    """
    sd = None
    try:
        sd = frame.side_data.get("DISPLAYMATRIX")
    except Exception:  # noqa: BLE001 - no side data
        sd = None
    if sd is None:
        return False, False, False
    try:
        # PyAV's stub types side_data as a TypedDict without this key; at run time sd is a SideData buffer.
        m = np.frombuffer(bytes(sd), dtype="<i4")  # type: ignore[call-overload]
    except Exception:  # noqa: BLE001 - malformed
        return False, False, False
    if len(m) < 5:
        return False, False, False
    a, b, c, d = (int(np.sign(round(int(v) / 65536.0))) for v in (m[0], m[1], m[3], m[4]))
    if a == 0 and d == 0 and b != 0 and c != 0:
        return True, b < 0, c < 0
    if b == 0 and c == 0 and a != 0 and d != 0:
        return False, d < 0, a < 0
    rot = display_rotation_cw(frame)  # not an axis-aligned matrix: nearest rotation
    return {0: (False, False, False), 90: (True, False, True), 180: (False, True, True), 270: (True, True, False)}[rot]


def apply_display(rgb: np.ndarray, transform: tuple[bool, bool, bool]) -> np.ndarray:
    """``(h, w, 3)`` stored-orientation picture → displayed orientation (see :func:`display_transform`)."""
    transpose, flip_rows, flip_cols = transform
    if transpose:
        rgb = rgb.transpose(1, 0, 2)
    if flip_rows:
        rgb = rgb[::-1]
    if flip_cols:
        rgb = rgb[:, ::-1]
    return rgb


class FrameStore:
    """Resizes, converts and stacks the kept frames of one clip.

    Args:
        capacity: most frames that will be added (the planned pick count).
        budget: the pixel budget; the per-frame size is computed for
            ``even_frame_count(capacity)`` frames.
        interpolation: libswscale filter name (``BILINEAR``, ``BICUBIC``, ``AREA``, …).
        pixel_factor: frame sides are multiples of this (the family's
            :attr:`serve_app.protocol.FrameGeometry.pixel_factor`: 28 or 32 pixels).

    Attributes:
        frames: ``(even_frame_count(capacity), H, W, 3) uint8``, allocated at the
            first :meth:`add` (the display rotation is known from then on), or None.
        times_s: presentation time (s) of each added frame.
        rotation_cw: display rotation applied, in degrees clockwise.
        source_size: ``(width, height)`` of the displayed source frame in pixels.
        sample_aspect: the source's sample (pixel) aspect ratio, width/height of one
            pixel; set it before the first :meth:`add` (None or 1.0: square pixels).
        size_changes: ``(t_s, (width, height))`` for each picture whose stored size
            differs from the previous one (a mid-stream resolution change).
    """

    def __init__(self, capacity: int, budget: PixelBudget, interpolation: str = "AREA", pixel_factor: int = 28):
        self.capacity = max(1, capacity)
        self.budget = budget
        self.pixel_factor = pixel_factor
        self.interpolation = interpolation
        self.frames: np.ndarray | None = None
        self.times_s: list[float] = []
        self.rotation_cw = 0
        self.source_size: tuple[int, int] | None = None
        self.sample_aspect: float | None = None
        self.size_changes: list[tuple[float, tuple[int, int]]] = []
        self._conv_size: tuple[int, int] = (0, 0)
        self._stored_size: tuple[int, int] = (0, 0)
        self._transform: tuple[bool, bool, bool] = (False, False, False)
        # One swscale context per step, reused for every frame (a fresh one costs ~0.5 ms to set up).
        self._scaler = VideoReformatter()
        self._converter = VideoReformatter()

    def _square_width(self, w: int) -> int:
        sar = self.sample_aspect
        return max(1, round(w * sar)) if sar and sar > 0 and abs(sar - 1.0) > 1e-3 else w

    def _allocate(self, frame: av.VideoFrame) -> None:
        self.rotation_cw = display_rotation_cw(frame)
        self._transform = display_transform(frame)
        swap = self._transform[0]
        self._stored_size = (frame.width, frame.height)
        w, h = self._square_width(frame.width), frame.height
        disp_w, disp_h = (h, w) if swap else (w, h)
        self.source_size = (disp_w, disp_h)
        n_out = even_frame_count(self.capacity)
        out_h, out_w = frame_size(disp_h, disp_w, n_out, self.budget, self.pixel_factor)
        # Resize in the stored orientation, rotate the small result.
        self._conv_size = (out_h, out_w) if swap else (out_w, out_h)
        self.frames = np.empty((n_out, out_h, out_w, 3), dtype=np.uint8)

    def _fit(self, frame: av.VideoFrame) -> np.ndarray:
        """A picture whose size differs from the first one, scaled to fit the output with its shape kept."""
        cw, ch = self._conv_size
        w, h = self._square_width(frame.width), frame.height
        scale = min(cw / w, ch / h)
        fw, fh = max(2, min(cw, round(w * scale))), max(2, min(ch, round(h * scale)))
        rgb = frame.reformat(width=fw, height=fh, format="rgb24", interpolation=self.interpolation).to_ndarray()
        canvas = np.zeros((ch, cw, 3), dtype=np.uint8)
        y0, x0 = (ch - fh) // 2, (cw - fw) // 2
        canvas[y0 : y0 + fh, x0 : x0 + fw] = rgb
        return canvas

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
            self._first_size = (frame.width, frame.height)
        n = len(self.times_s)
        if n >= self.capacity:
            raise IndexError(f"FrameStore holds at most {self.capacity} frames")
        size = (frame.width, frame.height)
        if size != self._stored_size:
            self.size_changes.append((t_s, size))
            self._stored_size = size
        rgb = self.to_rgb(frame) if size == self._first_size else self._fit(frame)
        assert self.frames is not None  # allocated by the first add
        self.frames[n] = apply_display(rgb, self._transform)
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
