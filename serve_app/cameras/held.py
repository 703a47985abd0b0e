"""A stream's frames from decode to the model: held compactly while a window fills and waits, unpacked
into the model's clip only when the model takes it.

The reader (:mod:`serve_app.cameras.reader`) passes each frame the
:class:`~serve_app.cameras.windows.WindowCutter` keeps to :class:`HeldFrames`, which scales it to the model's
pixel budget and holds it in planar YUV 4:2:0; each completed window is handed on as a :class:`ReadyWindow`,
which becomes the model's RGB clip (upright, the display matrix applied) only in :meth:`ReadyWindow.clip`.
Nothing is decoded twice. :func:`jpeg_thumbnail` makes the per-window thumbnail.
"""

from __future__ import annotations

import dataclasses
import time
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from serve_app.cameras.opening import PermanentSourceError
from serve_app.cameras.rules import frame_area_bound
from serve_app.cameras.windows import Window
from serve_app.config import AppConfig
from serve_app.decode.frames import FrameStore, apply_display
from serve_app.decode.sampling import even_frame_count
from serve_app.decode.vision_patches import as_patches
from serve_app.protocol import DecodedClip


class HeldFrames:
    """A stream's kept frames from decode to the model: held compactly, unpacked when the model takes them.

    Each kept ``av.VideoFrame`` is scaled at once to the window's model size (the pixel budget of
    :class:`serve_app.decode.frames.FrameStore`, the same two libswscale steps as one-off clips) and held as
    planar YUV 4:2:0, ``(H·3/2, W) uint8``: 1.5 bytes per pixel, half of RGB
    (:data:`serve_app.cameras.rules.COMPACT_BYTES_PER_PIXEL`). :meth:`rgb` makes the displayed RGB
    picture (display matrix applied) when the window is handed to the model.

    Args:
        capacity: most frames per window (sets the per-frame pixel budget).
        config: the application config (``decode.budget``, ``decode.interpolation``).

    Raises (from :meth:`__call__`):
        PermanentSourceError: the camera's frames come out larger than the stream reserved
            (:func:`serve_app.cameras.rules.frame_area_bound`).
    """

    def __init__(self, capacity: int, config: AppConfig):
        budget = config.decode.budget
        self.store = FrameStore(capacity, budget, config.decode.interpolation, config.model.geometry.pixel_factor)
        self.interpolation = config.decode.interpolation
        self.area_limit = frame_area_bound(capacity, budget)
        self.spent_s = 0.0
        self.format = "yuv420p"
        self.colorspace: int | None = None
        self._scaler = VideoReformatter()  # the reader thread's

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` of a held frame in its stored orientation, pixels ((0, 0) before the first frame)."""
        return self.store._conv_size

    def __call__(self, frame: av.VideoFrame) -> np.ndarray:
        t0 = time.perf_counter()
        if self.store.source_size is None:
            self.store._allocate(frame)  # the target size (needs the first frame's display matrix)
            self.store.frames = None  # nothing preallocated: windows hold their own frames
            cw, ch = self.size
            if cw * ch > self.area_limit:
                sw, sh = self.store.source_size or (0, 0)
                raise PermanentSourceError(
                    f"the camera's {sw}x{sh} frames become {cw}x{ch} pixels at the model's minimum frame area, "
                    f"more than the {self.area_limit} pixels per frame this stream reserved of "
                    "streams.max_frame_memory_bytes (a picture this small and elongated); use a larger picture"
                )
            self.format = "yuvj420p" if frame.format.name == "yuvj420p" else "yuv420p"
            self.colorspace = int(frame.colorspace)
        cw, ch = self.size
        small = self._scaler.reformat(
            frame, width=cw, height=ch, format=self.format, interpolation=self.interpolation, threads=1
        )
        held = small.to_ndarray()
        self.spent_s += time.perf_counter() - t0
        return held

    def rgb(self, held: np.ndarray, reformatter: VideoReformatter | None = None) -> np.ndarray:
        """One held frame as the displayed ``(h, w, 3) uint8`` RGB picture."""
        frame = av.VideoFrame.from_ndarray(held, format=self.format)
        if self.colorspace is not None:
            frame.colorspace = self.colorspace
        rgb = (reformatter or VideoReformatter()).reformat(frame, format="rgb24", threads=1).to_ndarray()
        return apply_display(rgb, self.store._transform)

    def shape(self) -> tuple[int, int]:
        """``(height, width)`` of the displayed RGB picture, pixels."""
        cw, ch = self.size
        return (cw, ch) if self.store._transform[0] else (ch, cw)


@dataclasses.dataclass
class ReadyWindow:
    """A completed window, its frames still held compactly until :meth:`clip`.

    Attributes:
        window: the cut window (times; ``frames``: the held YUV frames, emptied by :meth:`clip`).
        thumbnail: JPEG of the window's last frame (``streams.thumbnail_width`` wide), or None.
        decode_ms: CPU time spent scaling and converting the window's frames, ms.
        held: the stream's :class:`HeldFrames` (unpacks the frames).
        fps: the stream's sampling rate.
        source: ``(width, height)`` of the displayed source.
        source_fps: the source's frame rate, if known.
        patches: make the vision tower's bf16 patches (``model.vision_input: patches``).
        grids: the frames as change-measure grids (:func:`serve_app.cameras.scene_change.luma_grid`,
            ``(gh, gw) float32`` each) when the stream skips unchanged windows, else None.
    """

    window: Window[np.ndarray]
    thumbnail: bytes | None
    decode_ms: float
    held: HeldFrames
    fps: float
    source: tuple[int, int]
    source_fps: float | None
    patches: bool = False
    grids: list[np.ndarray] | None = None

    @property
    def held_bytes(self) -> int:
        """Bytes of the frames this window still holds."""
        return sum(f.nbytes for f in self.window.frames)

    def clip(self) -> DecodedClip:
        """The window as the model's input (RGB frames, or patches), padded to an even frame count;
        the held frames are released. Blocking (CPU): run it off the event loop."""
        held, self.window.frames = self.window.frames, []
        if not held:
            raise ValueError("the window's frames were handed to the model already")
        n = len(held)
        n_even = even_frame_count(n)
        out = np.empty((n_even, *self.held.shape(), 3), dtype=np.uint8)
        reformatter = VideoReformatter()
        for i in range(n):
            out[i] = self.held.rgb(held[i], reformatter)
            held[i] = None  # type: ignore[call-overload]  # each held frame goes as soon as it is unpacked
        out[n:] = out[n - 1]
        w = self.window
        clip = DecodedClip(
            frames=out,
            timestamps_s=np.maximum(np.asarray(w.times_s, dtype=np.float64) - w.start_s, 0.0),
            fps=self.fps,
            source_width=self.source[0],
            source_height=self.source[1],
            source_fps=self.source_fps,
            duration_s=w.end_s - w.start_s,
            padded_frames=n_even - n,
            decode_ms=self.decode_ms,
            decoded_frames=n,
        )
        return as_patches(clip) if self.patches else clip


def jpeg_thumbnail(rgb: np.ndarray, width: int) -> bytes:
    """A JPEG of ``rgb`` ``(H, W, 3) uint8`` scaled down to ``width`` pixels (FFmpeg's mjpeg encoder, q≈5)."""
    h, w = rgb.shape[:2]
    out_w = min(width, w) // 2 * 2
    out_h = max(2, round(h * out_w / w) // 2 * 2)
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
    frame = frame.reformat(width=out_w, height=out_h, format="yuvj420p")
    cc = av.CodecContext.create("mjpeg", "w")
    cc.width, cc.height, cc.pix_fmt = out_w, out_h, "yuvj420p"
    cc.time_base = Fraction(1, 25)
    cc.options = {"qmin": "2", "qmax": "8"}
    packets = cc.encode(frame) + cc.encode(None)
    return b"".join(bytes(p) for p in packets)
