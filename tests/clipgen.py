"""Builds test clips with PyAV (and Debian's ffmpeg where only it can): the field's odd cases.

Every frame can carry its own index as a row of black/white blocks
(:func:`coded_frame`, read back by :func:`read_code`), so a test can check
that the frame kept for a timestamp really is the frame shown at that time,
after compression and resizing.
"""

from __future__ import annotations

import io
import subprocess
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from serve_app.testing.fake_camera import CODE_BITS, coded_frame


def read_code(img: np.ndarray) -> int:
    """The index :func:`coded_frame` wrote into ``img`` (any size, RGB)."""
    h, w = img.shape[:2]
    band = max(1, h // 4)
    block = w // CODE_BITS
    value = 0
    for b in range(CODE_BITS):
        x0, x1 = b * block + block // 4, (b + 1) * block - block // 4
        patch = img[band // 4 : band - band // 4, x0:x1]
        if patch.mean() > 128:
            value |= 1 << b
    return value


class NonSeekable(io.RawIOBase):
    """A write-only sink without ``seek``: muxers behave as when writing to a pipe."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, b) -> int:
        self.data += bytes(b)
        return len(b)


def write_video(  # noqa: C901 - a test-clip writer: one branch per clip property the tests ask for
    target: str | Path | NonSeekable,
    *,
    size: tuple[int, int] = (320, 240),
    times_s: Sequence[float] | None = None,
    fps: float | Fraction = 30,
    frames: int = 60,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    fmt: str | None = None,
    time_base: Fraction | None = None,
    codec_options: dict[str, str] | None = None,
    container_options: dict[str, str] | None = None,
    rotation_ccw: int | None = None,
    audio_s: float | None = None,
    content: Callable[[int, int, int], np.ndarray] = coded_frame,
    input_format: str = "rgb24",
) -> None:
    """Encodes a clip.

    Args:
        target: output path, or a :class:`NonSeekable` sink (then ``fmt`` is required).
        size: ``(width, height)`` in pixels.
        times_s: presentation time of each frame in seconds (variable frame rate);
            default: ``frames`` frames at ``fps``.
        time_base: stream time base (default ``1/fps`` for constant rate, 1/90000 for ``times_s``).
        rotation_ccw: display-matrix rotation, degrees counter-clockwise (FFmpeg's sign).
        audio_s: also write a sine AAC track of this many seconds.
        content: ``(index, width, height) -> (h, w, 3) uint8`` picture of frame ``index``.
    """
    w, h = size
    rate = Fraction(fps).limit_denominator(1 << 30) if not isinstance(fps, Fraction) else fps
    tb = time_base or (Fraction(1, 90000) if times_s is not None else 1 / rate)
    if times_s is None:
        times_s = [i / float(rate) for i in range(frames)]
    sink = target if isinstance(target, NonSeekable) else str(target)
    out = av.open(sink, "w", format=fmt, options=container_options or {})
    stream = out.add_stream(codec, rate=rate)
    stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
    stream.time_base = tb
    stream.codec_context.time_base = tb
    opts = {"preset": "ultrafast"} if codec in ("libx264", "libx265") else {}
    if codec == "libvpx":
        opts = {"deadline": "realtime", "cpu-used": "16", "lag-in-frames": "0"}
    if codec == "libx265":
        opts["x265-params"] = "log-level=error"
    opts.update(codec_options or {})
    stream.options = opts
    if rotation_ccw:
        stream.set_display_rotation(rotation_ccw)
    audio = None
    if audio_s:
        audio = out.add_stream("aac", rate=48000)
        audio.layout = "mono"
    for i, t in enumerate(times_s):
        frame = av.VideoFrame.from_ndarray(content(i, w, h), format=input_format)
        frame.pts = round(t / tb)
        frame.time_base = tb
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    if audio is not None:
        n = int(audio_s * 48000)
        chunk = 1024
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            samples = (0.2 * np.sin(2 * np.pi * 440 * (start + np.arange(m)) / 48000)).astype(np.float32)
            af = av.AudioFrame.from_ndarray(samples[None, :], format="fltp", layout="mono")
            af.sample_rate = 48000
            af.pts = start
            af.time_base = Fraction(1, 48000)
            for packet in audio.encode(af):
                out.mux(packet)
        for packet in audio.encode():
            out.mux(packet)
    out.close()


def write_audio_only(path: str | Path, seconds: float = 2.0) -> None:
    """An M4A file with one AAC track and no video."""
    out = av.open(str(path), "w", format="mp4")
    audio = out.add_stream("aac", rate=48000)
    audio.layout = "mono"
    n = int(seconds * 48000)
    for start in range(0, n, 1024):
        m = min(1024, n - start)
        af = av.AudioFrame.from_ndarray(np.zeros((1, m), np.float32), format="fltp", layout="mono")
        af.sample_rate, af.pts, af.time_base = 48000, start, Fraction(1, 48000)
        for packet in audio.encode(af):
            out.mux(packet)
    for packet in audio.encode():
        out.mux(packet)
    out.close()


def ffmpeg_frame(path: str | Path, width: int, height: int, at_s: float = 0.0) -> np.ndarray:
    """One frame as Debian's ffmpeg shows it (auto-rotated), scaled to ``width``×``height``: ``(h, w, 3) uint8``."""
    cmd = [
        "ffmpeg", "-nostdin", "-v", "error", "-ss", f"{at_s}", "-i", str(path),
        "-frames:v", "1", "-vf", f"scale={width}:{height}", "-f", "rawvideo", "-pix_fmt", "rgb24", "-",
    ]  # fmt: skip
    raw = subprocess.run(cmd, check=True, capture_output=True).stdout
    return np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 3)
