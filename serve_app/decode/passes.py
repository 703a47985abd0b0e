"""The two passes over a clip's packets: the demux pass and the decode passes (fast and plain).

Used by :func:`serve_app.decode.clip.decode_clip` (see its module docstring for the
flow). The **demux pass** (:func:`demux`) reads packets without decoding:
timestamps, discard and keyframe flags, which pictures are references, and
keeps the packets of the requested window. The **fast decode**
(:func:`decode_planned`) decodes only what the planned picks need and stops
at the first sign of trouble; the **plain decode** (:func:`decode_plain`)
decodes every kept packet past errors, as a player does.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import av
import numpy as np

from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.bitstream import ReferenceParser
from serve_app.decode.container import check_frame_limits
from serve_app.decode.frames import FrameStore
from serve_app.decode.sampling import FrameGrid, FrameSelector
from serve_app.decode.timeline import DISCONTINUITY_S, Timeline
from serve_app.errors import PayloadTooLargeError, UpstreamTimeoutError
from serve_app.protocol import FrameSampling

if TYPE_CHECKING:
    from av.container import InputContainer
    from av.video.stream import VideoStream


#: Containers whose raw elementary streams know no rate (FFmpeg assumes 25 fps); the bitstream's may.
_RAW_FORMATS = frozenset({"h264", "hevc", "m4v", "mjpeg"})
#: Seconds demuxed past a window's end (B-frames show after later-decoded frames).
_POSTROLL_S = 2.0


@dataclasses.dataclass
class PacketIndex:
    """What the demux pass learned, per non-empty video packet in decode order (lists aligned by packet)."""

    pts: list[int | None]  # pts, else dts (stream time base); the packet number when index-timed
    dts: list[int | None]
    discard: list[bool]  # the container discards the picture (before an edit list's start)
    keys: list[bool]  # keyframe packets
    refs: list[bool | None]  # reference picture (bitstream), None when unknown
    kept: list[av.Packet[VideoStream]]  # packets of the window, decode order, from a keyframe (or the first packet)
    kept_first: int  # index of kept[0]
    count: int  # non-empty video packets seen
    last_duration: int | None  # duration of the last packet, stream time base
    eof: bool  # demuxed to the end of the file (not stopped early)
    error: str | None  # demuxer error that ended the pass early


def demux(
    container: InputContainer, stream: VideoStream, request: FrameSampling, index_timed: bool, limits: LimitsConfig,
    deadline: float,
) -> PacketIndex:
    """Reads every video packet (to the window's end plus a post-roll) without decoding.

    Args:
        request: a :class:`serve_app.protocol.FrameSampling` (fps, window in seconds).
        index_timed: time packets by their number (the container's timestamps are not trusted).
        deadline: ``time.perf_counter()`` value past which reading is a 504.

    Raises:
        PayloadTooLargeError (413): packets past the clip-length limit.
        UpstreamTimeoutError (504): the deadline passed.
    """
    tb = float(stream.time_base) if stream.time_base else 0.0
    rate = frame_rate(container, stream) or 25.0
    cc = stream.codec_context
    parser = None if index_timed else ReferenceParser.for_stream(cc.name, cc.extradata)
    start_s = request.start_s or 0.0
    earliest_pick_s = 0.5 / request.fps  # the first target may take a frame this much before the window
    stop_s = (request.end_s + _POSTROLL_S) if request.end_s is not None else None
    max_s = limits.max_clip_duration_s * 1.01 + 1.0
    idx = PacketIndex([], [], [], [], [], [], 0, 0, None, True, None)
    t0: int | None = None
    try:
        for packet in container.demux(stream):
            if packet.size == 0:
                continue
            if idx.count % 64 == 0 and time.perf_counter() > deadline:
                raise UpstreamTimeoutError("reading the clip took longer than the decode time limit", param="video")
            n = idx.count
            idx.count += 1
            pts, dts = packet.pts, packet.dts
            ts = pts if pts is not None else dts
            discard, key = packet.is_discard, packet.is_keyframe
            idx.pts.append(n if index_timed else ts)
            idx.dts.append(dts)
            idx.discard.append(discard)
            idx.keys.append(key)
            if index_timed or ts is None or tb == 0.0:
                t = n / rate
            elif discard:
                t = -1.0  # before the edit list's start: never shown
            else:
                t0 = ts if t0 is None else min(t0, ts)
                t = (ts - t0) * tb
            idx.refs.append(parser.is_reference(packet) if parser is not None else None)
            if packet.duration:
                idx.last_duration = packet.duration
            if t > max_s:
                raise PayloadTooLargeError(
                    f"clip lasts more than {limits.max_clip_duration_s:.0f} s (the limit)", param="video"
                )
            if key and not index_timed and t <= start_s - earliest_pick_s:
                idx.kept.clear()  # decoding can start here: earlier packets are not needed
                idx.kept_first = n
            idx.kept.append(packet)
            if stop_s is not None and t > stop_s:
                idx.eof = False
                break
    except av.error.FFmpegError as e:
        idx.error = e.strerror or str(e)
    return idx


# --------------------------------------------------------------------------- decode passes


@dataclasses.dataclass
class Decoded:
    """What a decode pass did: pictures decoded, errors ``(time_s, message)``, trouble seen, first picture time."""

    decoded: int = 0
    errors: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    trouble: str | None = None
    first_s: float | None = None


def _decode_error(e: av.error.FFmpegError) -> str:
    return (e.strerror or str(e)).split(":")[0]


def _packet_time(idx: PacketIndex, timeline: Timeline, i: int) -> float:
    """Timeline time (s) of kept packet ``i`` (the nearest earlier shown one for a discarded picture)."""
    times = timeline.times_s[idx.kept_first : idx.kept_first + i + 1]
    shown = times[~np.isnan(times)]
    return float(shown[-1]) if len(shown) else 0.0


def decode_planned(  # noqa: C901 - one demux/decode loop; each branch a documented edge case (tests/unit/decode/test_decoder_*)
    stream: VideoStream, idx: PacketIndex, timeline: Timeline, wanted: dict[int, float], store: FrameStore,
    deadline: float, decode: DecodeConfig,
) -> Decoded:  # fmt: skip
    """The fast path: decodes the kept packets, skipping non-reference pictures nobody keeps, converting
    the frames whose pts is in ``wanted`` (pts → seconds). Stops at the first sign of trouble (a decode
    error, a frame flagged corrupt, a planned picture the decoder never output) and says which in ``trouble``.
    """
    cc = stream.codec_context
    refs = idx.refs
    toggle = decode.threads == 1  # per-packet skip_frame needs a single decoding thread
    skipping = False
    out = Decoded()
    remaining = len(wanted)
    last_pts: int | None = None

    def take(frames: Iterable[av.VideoFrame]) -> None:
        nonlocal remaining, last_pts
        for f in frames:
            out.decoded += 1
            t = wanted.get(f.pts) if f.pts is not None else None  # wanted holds no None key
            if t is not None and f.pts is not None and (last_pts is None or f.pts > last_pts):
                if f.is_corrupt:
                    out.trouble = f"the decoder flagged the picture at {t:.2f} s as corrupt"
                    return
                if out.first_s is None:
                    out.first_s = t
                store.add(f, t)
                last_pts = f.pts
                remaining -= 1

    for i, packet in enumerate(idx.kept):
        if remaining <= 0 or out.trouble:
            break
        if i % 32 == 0 and time.perf_counter() > deadline:
            raise UpstreamTimeoutError(
                f"decoding took longer than the limit of {decode.timeout_s:.0f} s", param="video"
            )
        is_wanted = packet.pts in wanted
        ref = refs[idx.kept_first + i]
        if ref is False and not is_wanted:
            continue  # a non-reference picture nobody keeps: never decode it
        if toggle and ref is None and skipping == is_wanted:
            skipping = not is_wanted
            cc.skip_frame = "NONREF" if skipping else "DEFAULT"
        try:
            take(cc.decode(packet))
        except av.error.FFmpegError as e:
            where = _packet_time(idx, timeline, i)
            out.errors.append((where, _decode_error(e)))
            out.trouble = f"a decode error at {where:.2f} s ({_decode_error(e)})"
    else:
        if remaining > 0 and not out.trouble:
            try:
                take(cc.decode(None))
            except av.error.FFmpegError as e:
                out.errors.append((_packet_time(idx, timeline, len(idx.kept) - 1), _decode_error(e)))
                out.trouble = f"a decode error at the end of the stream ({_decode_error(e)})"
    if remaining > 0 and not out.trouble:
        out.trouble = f"{remaining} planned pictures never came out of the decoder"
    cc.skip_frame = "DEFAULT"
    return out


def decode_plain(  # noqa: C901 - one demux/decode loop; each branch a documented edge case (tests/unit/decode/test_decoder_*)
    stream: VideoStream, idx: PacketIndex, timeline: Timeline, grid: FrameGrid, rate: float, store: FrameStore,
    deadline: float, decode: DecodeConfig, limits: LimitsConfig,
) -> Decoded:  # fmt: skip
    """The plain path: decodes every kept packet, as a player does, past errors; picks the frame nearest
    each grid target from the decoder's output (:class:`FrameSelector`).

    Frame times: the frame's pts on the timeline (backwards jumps unwrapped as in
    :func:`serve_app.decode.timeline.build_timeline`), or its order at ``rate`` for index-timed clips.
    Checks the frame-size limits on the first decoded picture (the probe may not have found them).
    """
    cc = stream.codec_context
    cc.skip_frame = "DEFAULT"
    tb = float(stream.time_base) if stream.time_base else 0.0
    step = 1.0 / rate
    selector: FrameSelector[av.VideoFrame] = FrameSelector(grid)
    out = Decoded()
    n = 0  # frames output
    off, last_t = 0.0, -math.inf

    def when(f: av.VideoFrame) -> float:
        nonlocal off, last_t
        if timeline.index_timed or f.pts is None:
            t = (idx.kept_first + n) * step if timeline.index_timed else last_t + step
        else:
            assert timeline.origin is not None  # set when not index-timed
            t = (f.pts - timeline.origin) * tb + off
            if t < last_t - DISCONTINUITY_S:  # a new recording starts: continue after the last frame
                off += last_t + step - t
                t = last_t + step
        last_t = max(last_t, t)
        return t

    def push(frames: Iterable[av.VideoFrame]) -> None:
        nonlocal n
        for f in frames:
            if n == 0:
                check_frame_limits(f.width, f.height, decode, limits, "video")
            t = when(f)
            n += 1
            out.decoded += 1
            if out.first_s is None:
                out.first_s = t
            if selector.wants(t):
                for _k, t_kept, kept in selector.push(t, f):
                    store.add(kept, t_kept)

    for i, packet in enumerate(idx.kept):
        if selector.done:
            break
        if i % 32 == 0 and time.perf_counter() > deadline:
            raise UpstreamTimeoutError(
                f"decoding took longer than the limit of {decode.timeout_s:.0f} s", param="video"
            )
        try:
            push(cc.decode(packet))
        except av.error.FFmpegError as e:
            out.errors.append((_packet_time(idx, timeline, i), _decode_error(e)))
            if timeline.index_timed:
                n += 1  # the picture of this packet is missing: later ones keep their place
    else:
        try:
            push(cc.decode(None))
        except av.error.FFmpegError as e:
            out.errors.append((_packet_time(idx, timeline, len(idx.kept) - 1), _decode_error(e)))
    for _k, t_kept, kept in selector.finish():
        store.add(kept, t_kept)
    return out


def error_warning(errors: list[tuple[float, str]]) -> str:
    """One warning for the decode errors ``(time_s, message)``: the first, and how many more up to when."""
    (t, msg), more = errors[0], len(errors) - 1
    tail = f"; {more} more packets up to {errors[-1][0]:.2f} s did not decode" if more else ""
    return f"damaged data at {t:.2f} s ({msg}){tail}"


def frame_rate(container: InputContainer, stream: VideoStream) -> float | None:
    """Nominal frame rate (frames/s): the container's, or for raw streams the bitstream's (H.264 VUI timing)."""
    candidates = [stream.average_rate, stream.guessed_rate]
    if container.format.name in _RAW_FORMATS:
        candidates = [stream.codec_context.framerate, stream.guessed_rate, stream.average_rate]
    for rate in candidates:
        if rate and float(rate) > 0:
            return float(rate)
    return None
