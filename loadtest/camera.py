"""Cameras and their windows: a clip cut once, up front, into consecutive W-second windows.

A camera replays a source clip in a loop as if it were recording it live:
window ``k`` is the source's ``[k·W, (k+1)·W)`` seconds (modulo the number of
whole windows in the clip; a tail shorter than W is dropped). The load tester
sends one request per window, so the windows are cut here, before the run,
and the client only ships bytes during the run.

How a window is cut (:func:`cut_windows`):

* **Remux (no re-encoding)** when the video is H.264 or HEVC with presentation
  timestamps and a keyframe at most ``max_preroll_s`` before the window start:
  the packets from that keyframe (decode order) up to the window end are copied
  into a fresh MP4 (PyAV stream copy, audio dropped), and the request carries
  ``start_s``/``end_s`` so the server samples exactly the window; the few
  frames of pre-roll before ``start_s`` are decoded by the server but not sampled.
* **Re-encode** otherwise (keyframes too sparse, e.g. one every 25 s; codecs
  an MP4 stream copy cannot carry reliably, e.g. MPEG-4 ASP/MS-MPEG4 in AVI;
  index-timed containers): the window's frames are decoded and re-encoded to
  H.264 (libx264, ``veryfast``, CRF 23, a keyframe every 2 s) and the request
  carries ``start_s=0, end_s=W``.

A camera may instead name a URL (``rtsp://``, ``http(s)://``): then nothing is
cut and each request names the URL with the window's ``start_s``/``end_s``.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import logging
import math
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import av

from serve_app.decode.timeline import (
    INDEX_TIMED_FORMATS,  # the server times these by frame index: windows are re-encoded
)
from serve_app.sources.rules import DEFAULT_PORTS

if TYPE_CHECKING:
    from av.container import OutputContainer
    from av.video.frame import VideoFrame
    from av.video.stream import VideoStream

    #: A window being re-encoded: (window index, its MP4 buffer, container, stream, last pts written).
    _Open = tuple[int, io.BytesIO, OutputContainer, VideoStream, int]

logger = logging.getLogger(__name__)

#: Source schemes a camera may name instead of a local file: the server's own list.
URL_SCHEMES = tuple(f"{scheme}://" for scheme in DEFAULT_PORTS)

#: Video codecs whose packets are copied into MP4 without re-encoding.
REMUX_CODECS = frozenset({"h264", "hevc"})

#: Re-encoding settings: x264 ``veryfast`` at CRF 23 (x264's default quality).
REENCODE_OPTIONS = {"preset": "veryfast", "crf": "23"}
#: Keyframe interval of re-encoded windows, in seconds.
REENCODE_GOP_S = 2.0


class WindowCutError(ValueError):
    """A source cannot be cut into windows (unreadable, too short, no video)."""


@dataclasses.dataclass(frozen=True)
class Window:
    """One window of a camera's source, ready to send.

    Attributes:
        index: window number within the source (0-based).
        source_start_s, source_end_s: the window in source seconds (from the first frame).
        start_s, end_s: what the request carries as ``start_s``/``end_s`` (seconds of
            ``data`` when cut; of the source for URL/path cameras).
        data: the cut clip (MP4 bytes), or None when the request names the source.
        method: ``"remux"``, ``"reencode"``, ``"url"`` or ``"path"``.
        preroll_s: seconds of ``data`` before ``start_s`` (remux only).
    """

    index: int
    source_start_s: float
    source_end_s: float
    start_s: float | None
    end_s: float | None
    data: bytes | None = None
    method: str = "remux"
    preroll_s: float = 0.0

    @property
    def size_bytes(self) -> int:
        """Bytes uploaded per request (0 when the request names the source)."""
        return len(self.data) if self.data is not None else 0


def is_url(source: str) -> bool:
    """True when ``source`` names a stream/URL instead of a local file."""
    return source.lower().startswith(URL_SCHEMES)


@dataclasses.dataclass(frozen=True)
class _Packet:
    data: bytes
    pts: int | None
    dts: int | None
    duration: int
    keyframe: bool

    @property
    def decode_ts(self) -> int:
        """Decode-order timestamp: dts, else pts (stream time base).

        Raises:
            WindowCutError: the packet has neither (only remuxed, i.e. timed, streams are asked).
        """
        ts = self.dts if self.dts is not None else self.pts
        if ts is None:
            raise WindowCutError("a packet without timestamps cannot be remuxed")
        return ts


@dataclasses.dataclass
class _Index:
    """Demux pass over a source's video stream (no decoding)."""

    format_name: str
    codec: str
    time_base: Fraction
    first_pts: int
    duration_s: float
    rate: float | None
    packets: list[_Packet]
    timed: bool  # True: real presentation timestamps

    def t(self, ts: int) -> float:
        """Stream timestamp → seconds from the first frame."""
        return float((ts - self.first_pts) * self.time_base)


def _index(path: Path) -> _Index:
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError) as e:
        raise WindowCutError(f"cannot open {path}: {e}") from e
    with container:
        if not container.streams.video:
            raise WindowCutError(f"{path} has no video stream")
        stream = container.streams.video[0]
        packets: list[_Packet] = []
        for p in container.demux(stream):
            if p.size == 0:
                continue
            packets.append(_Packet(bytes(p), p.pts, p.dts, int(p.duration or 0), bool(p.is_keyframe)))
        rate = float(stream.average_rate or stream.guessed_rate or 0) or None
        tb = stream.time_base or Fraction(1, 90000)
        fmt = container.format.name
        codec = stream.codec_context.name
    if not packets:
        raise WindowCutError(f"{path} contains no video frames")
    timed = fmt not in INDEX_TIMED_FORMATS and all(p.pts is not None for p in packets)
    if timed:
        pts = sorted(p.pts for p in packets if p.pts is not None)  # all of them, when timed
        first = pts[0]
        step = packets[-1].duration or (round(1 / (rate * tb)) if rate else 0)
        duration = float((pts[-1] + step - first) * tb)
    else:
        first = 0
        duration = len(packets) / rate if rate else len(packets) * 0.04
    return _Index(fmt, codec, Fraction(tb), first, duration, rate, packets, timed)


def probe_duration_s(path: str | Path) -> float:
    """Length of a local clip in seconds (end of its last frame), from a demux pass.

    Raises:
        WindowCutError: unreadable file or no video stream.
    """
    return _index(Path(path)).duration_s


def _remux(src: Path, idx: _Index, first: int, end_ts: int) -> bytes:
    """MP4 bytes holding packets ``first…`` (decode order) whose dts is before ``end_ts``."""
    chosen = []
    for p in idx.packets[first:]:
        if p.decode_ts >= end_ts:
            break
        chosen.append(p)
    shift = min(p.decode_ts for p in chosen)
    buf = io.BytesIO()
    with av.open(str(src)) as inp:
        template = inp.streams.video[0]
        with av.open(buf, mode="w", format="mp4", options={"use_editlist": "0"}) as out:
            ostream = out.add_stream_from_template(template)
            for p in chosen:
                pkt = av.Packet(p.data)
                pkt.stream = ostream
                pkt.time_base = idx.time_base
                pkt.pts = (p.pts - shift) if p.pts is not None else None
                pkt.dts = (p.dts - shift) if p.dts is not None else None
                pkt.duration = p.duration
                pkt.is_keyframe = p.keyframe
                out.mux(pkt)
    return buf.getvalue()


def _reencode(src: Path, idx: _Index, ranges: dict[int, tuple[float, float]]) -> dict[int, bytes]:  # noqa: C901 - one encode loop over windows; branches open/close a window's encoder
    """Re-encodes several windows in one decoding pass.

    Args:
        ranges: window index → ``(start_s, end_s)`` in source seconds (non-overlapping).

    Returns:
        window index → H.264 MP4 bytes whose times start at 0.
    """
    rate = idx.rate or 25.0
    tb_out = Fraction(1, 1000)
    order = sorted(ranges, key=lambda k: ranges[k][0])
    out_bytes: dict[int, bytes] = {}
    cur: _Open | None = None  # (k, buffer, container, stream, last_pts)

    def close(state: _Open) -> None:
        k, buf, out, ostream, last_pts = state
        if last_pts < 0:
            raise WindowCutError(f"{src}: no frame decoded in window {k} {ranges[k]}")
        for pkt in ostream.encode(None):
            out.mux(pkt)
        out.close()
        out_bytes[k] = buf.getvalue()

    def open_window(k: int, frame: VideoFrame) -> _Open:
        buf = io.BytesIO()
        out = av.open(buf, mode="w", format="mp4")
        ostream = out.add_stream("libx264", rate=Fraction(rate).limit_denominator(1001), options=REENCODE_OPTIONS)
        ostream.codec_context.time_base = tb_out
        ostream.codec_context.gop_size = max(1, round(REENCODE_GOP_S * rate))
        ostream.pix_fmt = "yuv420p"
        ostream.width, ostream.height = frame.width - frame.width % 2, frame.height - frame.height % 2
        return (k, buf, out, ostream, -1)

    with av.open(str(src)) as inp:
        stream = inp.streams.video[0]
        i = 0
        for frame in inp.decode(stream):
            t = idx.t(frame.pts) if idx.timed and frame.pts is not None else i / rate
            i += 1
            while order and t >= ranges[order[0]][1] - 1e-6:
                if cur is not None and cur[0] == order[0]:
                    close(cur)
                    cur = None
                order.pop(0)
            if not order:
                break
            k = order[0]
            a = ranges[k][0]
            if t < a - 1e-6:
                continue
            if cur is None:
                cur = open_window(k, frame)
            _, buf, out, ostream, last_pts = cur
            pts = max(last_pts + 1, round((t - a) / tb_out))
            cur = (k, buf, out, ostream, pts)
            f = frame.reformat(width=ostream.width, height=ostream.height, format="yuv420p")
            f.pts, f.time_base = pts, tb_out
            for pkt in ostream.encode(f):
                out.mux(pkt)
        if cur is not None:
            close(cur)
    missing = sorted(set(ranges) - set(out_bytes))
    if missing:
        raise WindowCutError(f"{src}: no frames decoded for windows {missing}")
    return out_bytes


@functools.lru_cache(maxsize=64)
def cut_windows(path: str, window_s: float, max_preroll_s: float | None = None) -> tuple[Window, ...]:
    """Cuts a local clip into consecutive windows of ``window_s`` seconds (cached per arguments).

    Args:
        path: a local video file.
        window_s: window length in seconds (> 0).
        max_preroll_s: largest keyframe-to-window-start gap (seconds) that is still
            remuxed; beyond it the window is re-encoded. Default: ``window_s / 2``.

    Returns:
        ``floor(duration / window_s)`` windows, in source order.

    Raises:
        WindowCutError: unreadable file, no video, or a clip shorter than one window.
    """
    if window_s <= 0:
        raise WindowCutError(f"window length must be > 0 s (got {window_s})")
    src = Path(path)
    idx = _index(src)
    n = math.floor(idx.duration_s / window_s + 1e-6)
    if n < 1:
        raise WindowCutError(
            f"{path} lasts {idx.duration_s:.2f} s, shorter than one {window_s:g}-s window; use a shorter --window-s"
        )
    max_pre = window_s / 2 if max_preroll_s is None else max_preroll_s
    remuxable = idx.timed and idx.codec in REMUX_CODECS
    keys = [(i, idx.t(p.pts)) for i, p in enumerate(idx.packets) if p.keyframe and p.pts is not None]
    windows: dict[int, Window] = {}
    to_encode: dict[int, tuple[float, float]] = {}
    for k in range(n):
        a, b = k * window_s, (k + 1) * window_s
        kf = [(i, t) for i, t in keys if t <= a + 1e-6]
        if remuxable and kf and a - kf[-1][1] <= max_pre + 1e-9:
            i, t_kf = kf[-1]
            data = _remux(src, idx, i, idx.first_pts + math.ceil(b / idx.time_base))
            pre = a - t_kf
            windows[k] = Window(k, a, b, round(pre, 6), round(pre + window_s, 6), data, "remux", pre)
        else:
            to_encode[k] = (a, b)
    encoded = _reencode(src, idx, to_encode) if to_encode else {}
    for k, data in encoded.items():
        windows[k] = Window(k, *to_encode[k], 0.0, float(window_s), data, "reencode", 0.0)
    ordered = tuple(windows[k] for k in range(n))
    logger.info(
        "cut %s into %d × %g-s windows (%s)", path, n, window_s, ", ".join(sorted({w.method for w in ordered}))
    )
    return ordered


def source_windows(
    source: str, window_s: float, *, transport: str = "upload", duration_s: float | None = None, count: int = 0,
    exact: bool = False,
) -> tuple[Window, ...]:
    """The windows a camera cycles through.

    Args:
        source: local file path or URL.
        window_s: window length in seconds.
        transport: ``"upload"`` (cut the file, send bytes) or ``"path"`` (send
            ``video_path`` of the local file with ``start_s``/``end_s``). URLs ignore it.
        duration_s: URL sources: loop length in seconds (the clip behind the URL);
            None: windows advance forever (a live stream).
        count: URL sources without ``duration_s``: how many windows to plan.
        exact: uploaded windows hold the window and nothing before it (remuxed only when a keyframe
            starts the window, else re-encoded), for servers that take no ``start_s``/``end_s``
            (an OpenAI chat request).

    Raises:
        WindowCutError: see :func:`cut_windows`.
    """
    if is_url(source):
        if duration_s:
            n = math.floor(duration_s / window_s + 1e-6)
            if n < 1:
                raise WindowCutError(f"{source}: duration_s {duration_s} is shorter than one window ({window_s} s)")
        else:
            n = max(1, count)
        return tuple(Window(k, k * window_s, (k + 1) * window_s, k * window_s, (k + 1) * window_s, None, "url")
                     for k in range(n))
    if transport == "path":
        n = math.floor(probe_duration_s(source) / window_s + 1e-6)
        if n < 1:
            raise WindowCutError(f"{source} is shorter than one {window_s:g}-s window")
        return tuple(Window(k, k * window_s, (k + 1) * window_s, k * window_s, (k + 1) * window_s, None, "path")
                     for k in range(n))
    if transport != "upload":
        raise ValueError(f"unknown transport {transport!r} (use 'upload' or 'path')")
    return cut_windows(str(Path(source)), float(window_s), 0.0 if exact else None)
