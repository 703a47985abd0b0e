"""Clip decoding with PyAV: sample by presentation timestamp, resize to the pixel budget.

:func:`decode_clip` turns clip bytes (or a file path) into a
:class:`DecodedClip`: one ``(T, H, W, 3) uint8`` RGB array plus metadata.

1. **Open** (:mod:`serve_app.container`): video container formats only; a
   known container that will not open is 422 (truncated/damaged), anything
   else 415; frame size and aspect limits are checked before decoding.
2. **Demux pass** (packets only, no decoding): the frame times, which
   pictures are references (:mod:`serve_app.bitstream`), the clip's end,
   and the packets of the requested window, kept in memory.
3. **Plan**: the sampling grid and, per target, the frame to keep
   (:func:`serve_app.sampling.plan_picks`, reference frames preferred).
4. **Decode pass** over the kept packets: a non-reference picture that is not
   kept is never sent to the decoder (H.264/HEVC), or is skipped by FFmpeg
   (``skip_frame=NONREF`` for that packet, other codecs); decoding stops
   after the last kept frame. Only kept frames are converted, straight to the
   target size (:class:`serve_app.frames.FrameStore`).

AVI and raw elementary streams have no trustworthy presentation timestamps
(packed B-frames scramble them): they are timed by frame index and decoded
in full, choosing frames with :class:`serve_app.sampling.FrameSelector`.

A clip that breaks mid-stream keeps the frames it could decode, with a
warning saying where decoding stopped: a truncated file up to its end,
damaged data up to the damage and again from the next keyframe. Fewer than
two frames after a break is a 422. Errors are
:class:`serve_app.errors.ServeAppError` subclasses with their HTTP status.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import av
import numpy as np

from serve_app.bitstream import ReferenceParser
from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.container import check_frame_limits, configure_decoder, open_container, video_stream
from serve_app.errors import PayloadTooLargeError, UnprocessableClipError, UpstreamTimeoutError
from serve_app.frames import FrameStore
from serve_app.sampling import FrameSelector, SamplingGrid, plan_grid, plan_picks

logger = logging.getLogger(__name__)

#: Containers with no trustworthy presentation timestamps: frame i shows at i / rate.
INDEX_TIMED_FORMATS = frozenset({"avi", "h264", "hevc", "m4v", "mjpeg"})

#: Raw elementary streams: the container knows no rate (FFmpeg assumes 25 fps); the bitstream's may.
_RAW_FORMATS = frozenset({"h264", "hevc", "m4v", "mjpeg"})
#: Seconds demuxed past a window's end (B-frames show after later-decoded frames).
_POSTROLL_S = 2.0
#: A header duration this much (s) longer than the frames found means a truncated file.
_TRUNCATION_SLACK_S = 0.5


@dataclasses.dataclass(frozen=True)
class SampleRequest:
    """What to sample from a clip.

    Attributes:
        fps: target sampling rate, frames per second.
        max_frames: cap on frames (the rate is lowered evenly to respect it).
        start_s, end_s: optional window in clip seconds (0 = first frame).
    """

    fps: float
    max_frames: int
    start_s: float | None = None
    end_s: float | None = None


@dataclasses.dataclass
class DecodedClip:
    """Sampled frames of one clip, ready for the model.

    Attributes:
        frames: ``(T, H, W, 3) uint8`` RGB, T even ≥ 2, H and W multiples of 28.
        timestamps_s: ``(T_real,) float64`` presentation time of each decoded
            frame in seconds from the clip's first frame, strictly increasing;
            ``T - T_real`` trailing frames repeat the last one (``padded_frames``).
        fps: effective sampling rate in frames per second (the model's temporal
            positions come from it: Qwen2.5-VL spaces frame pairs 2/fps s apart).
        source_width, source_height: displayed source size in pixels.
        source_fps: average source frame rate (frames/s), if known.
        duration_s: clip length in seconds (end of the last frame).
        rotation_deg: display rotation applied, degrees clockwise (0, 90, 180 or 270).
        padded_frames: frames appended to reach an even count.
        warnings: human-readable notes (e.g. where decoding stopped).
        decode_ms: wall time spent decoding, in milliseconds.
        decoded_frames: pictures the decoder actually decoded (≤ the clip's frames).
    """

    frames: np.ndarray
    timestamps_s: np.ndarray
    fps: float
    source_width: int
    source_height: int
    source_fps: float | None
    duration_s: float
    rotation_deg: int = 0
    padded_frames: int = 0
    warnings: list[str] = dataclasses.field(default_factory=list)
    decode_ms: float = 0.0
    decoded_frames: int = 0

    @property
    def num_frames(self) -> int:
        """Frames sent to the model (T, even)."""
        return int(self.frames.shape[0])

    @classmethod
    def from_store(cls, store: FrameStore, *, fps: float, source_fps: float | None, duration_s: float,
                   warnings: list[str], t_start: float, **extra) -> "DecodedClip":
        """The clip a :class:`FrameStore` holds (padded to an even count), timed from ``t_start``
        (``time.perf_counter()`` when decoding began); ``extra`` sets further fields."""
        frames, timestamps, padded = store.finish()
        return cls(
            frames=frames,
            timestamps_s=timestamps,
            fps=fps,
            source_width=store.source_size[0],
            source_height=store.source_size[1],
            source_fps=source_fps,
            duration_s=duration_s,
            rotation_deg=store.rotation_cw,
            padded_frames=padded,
            warnings=warnings,
            decode_ms=(time.perf_counter() - t_start) * 1000,
            **extra,
        )


# --------------------------------------------------------------------------- demux pass


@dataclasses.dataclass
class _PacketIndex:
    """What the demux pass learned. Times are seconds from the clip's first frame."""

    pts: list[int]  # every frame's pts (stream time base), decode order
    refs: list[bool | None]  # per frame, aligned with pts
    kept: list[av.Packet]  # packets of the window, decode order, starting at a keyframe
    kept_first: int  # index (into pts) of kept[0]
    count: int  # non-empty video packets seen
    last_duration: int | None  # duration of the last packet, stream time base
    eof: bool  # demuxed to the end of the file (not stopped early)
    error: str | None  # demuxer error that ended the pass early


def _demux(
    container, stream, request: SampleRequest, index_timed: bool, limits: LimitsConfig, deadline: float
) -> _PacketIndex:
    tb = float(stream.time_base) if stream.time_base else 0.0
    rate = _frame_rate(container, stream) or 25.0
    cc = stream.codec_context
    parser = None if index_timed else ReferenceParser.for_stream(cc.name, cc.extradata)
    start_s = request.start_s or 0.0
    earliest_pick_s = 0.5 / request.fps  # the first target may take a frame this much before the window
    stop_s = (request.end_s + _POSTROLL_S) if request.end_s is not None else None
    max_s = limits.max_clip_duration_s * 1.01 + 1.0
    idx = _PacketIndex([], [], [], 0, 0, None, True, None)
    t0: int | None = None
    try:
        for packet in container.demux(stream):
            if packet.size == 0:
                continue
            if idx.count % 64 == 0 and time.perf_counter() > deadline:
                raise UpstreamTimeoutError("reading the clip took longer than the decode time limit", param="video")
            n = idx.count
            idx.count += 1
            ts = packet.pts if packet.pts is not None else packet.dts
            if index_timed or ts is None or tb == 0.0:
                t = n / rate
                idx.pts.append(n)
            else:
                t0 = ts if t0 is None else min(t0, ts)
                t = (ts - t0) * tb
                idx.pts.append(ts)
            idx.refs.append(parser.is_reference(packet) if parser is not None else None)
            if packet.duration:
                idx.last_duration = packet.duration
            if t > max_s:
                raise PayloadTooLargeError(
                    f"clip lasts more than {limits.max_clip_duration_s:.0f} s (the limit)", param="video"
                )
            if packet.is_keyframe and t <= start_s - earliest_pick_s:
                idx.kept.clear()  # decoding can start here: earlier packets are not needed
                idx.kept_first = n
            idx.kept.append(packet)
            if stop_s is not None and t > stop_s:
                idx.eof = False
                break
    except av.error.FFmpegError as e:
        idx.error = e.strerror or str(e)
    return idx


# --------------------------------------------------------------------------- decode pass


def _decode_error(e: av.error.FFmpegError) -> str:
    return (e.strerror or str(e)).split(":")[0]


def _decode_planned(
    stream, idx: _PacketIndex, wanted: dict[int, float], store: FrameStore, deadline: float, decode: DecodeConfig
) -> tuple[int, list[str]]:
    """Decodes the kept packets, converting the frames whose pts is in ``wanted`` (pts → seconds).

    Returns the number of pictures decoded and warnings about damaged data.
    """
    cc = stream.codec_context
    refs = idx.refs
    toggle = decode.threads == 1  # per-packet skip_frame needs a single decoding thread
    skipping = False
    n_decoded = 0
    remaining = len(wanted)
    last_pts = None
    warnings: list[str] = []
    resync = False  # after damaged data: wait for the next keyframe
    tb = float(stream.time_base)
    t0 = min(idx.pts)

    def take(frames) -> None:
        nonlocal n_decoded, remaining, last_pts
        for f in frames:
            n_decoded += 1
            t = wanted.get(f.pts)
            if t is not None and (last_pts is None or f.pts > last_pts):
                store.add(f, t)
                last_pts = f.pts
                remaining -= 1

    for i, packet in enumerate(idx.kept):
        if remaining <= 0:
            break
        if i % 32 == 0 and time.perf_counter() > deadline:
            raise UpstreamTimeoutError(
                f"decoding took longer than the limit of {decode.timeout_s:.0f} s", param="video"
            )
        if resync:
            if not packet.is_keyframe:
                continue
            resync = False
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
            where = ((packet.pts if packet.pts is not None else t0) - t0) * tb
            nxt = next((p for p in idx.kept[i + 1 :] if p.is_keyframe), None)
            if nxt is None:
                warnings.append(f"decoding stopped at {where:.2f} s: damaged data ({_decode_error(e)})")
                break
            warnings.append(
                f"damaged data at {where:.2f} s ({_decode_error(e)}): frames up to the next keyframe at "
                f"{(nxt.pts - t0) * tb:.2f} s were skipped"
            )
            resync = True
    else:
        if remaining > 0:
            try:
                take(cc.decode(None))
            except av.error.FFmpegError as e:
                warnings.append(f"decoding stopped at the end of the stream: {_decode_error(e)}")
    return n_decoded, warnings


def _decode_indexed(
    stream, idx: _PacketIndex, grid: SamplingGrid, rate: float, store: FrameStore, deadline: float, decode: DecodeConfig
) -> tuple[int, list[str]]:
    """Decodes every kept packet; frame i shows at i / rate (s). Returns pictures decoded and warnings."""
    cc = stream.codec_context
    selector = FrameSelector(grid)
    warnings: list[str] = []
    n = idx.kept_first  # keyframe-aligned start: frame numbering continues from there

    def push(frames) -> None:
        nonlocal n
        for f in frames:
            t = n / rate
            n += 1
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
            warnings.append(f"decoding stopped at {n / rate:.2f} s: damaged data ({_decode_error(e)})")
            break
    else:
        try:
            push(cc.decode(None))
        except av.error.FFmpegError:
            pass
    for _k, t_kept, kept in selector.finish():
        store.add(kept, t_kept)
    return n - idx.kept_first, warnings


# --------------------------------------------------------------------------- entry point


def decode_clip(
    source: bytes | str | Path,
    request: SampleRequest,
    decode: DecodeConfig,
    limits: LimitsConfig,
) -> DecodedClip:
    """Decodes and samples one clip.

    Args:
        source: the clip's bytes, or a path to a local file.
        request: sampling rate, frame cap and optional window.
        decode: decoder settings (pixel budget, threads, time limit).
        limits: size and duration limits.

    Returns:
        A :class:`DecodedClip` with ``(T, H, W, 3) uint8`` frames; timestamps within
        half a grid step (0.125 s at 4 fps) of ``start + k / fps``.

    Raises:
        UnprocessableClipError (422): empty input, truncated/damaged container, fewer than
            two frames decoded before a break (or none at all), empty window, extreme aspect.
        PayloadTooLargeError (413): source frame size or clip length over the limits.
        UnsupportedMediaError (415): not a video container, no video stream, unknown codec.
        NotFoundError (404): a local path that does not exist.
        UpstreamTimeoutError (504): decoding exceeded ``decode.timeout_s``.
    """
    t_start = time.perf_counter()
    deadline = t_start + decode.timeout_s

    container = open_container(Path(source) if isinstance(source, str) else source)
    try:
        stream = video_stream(container)
        cc = stream.codec_context
        check_frame_limits(cc.width, cc.height, decode, limits, "video")
        declared_s = _declared_duration(container, stream)
        if declared_s is not None and declared_s > limits.max_clip_duration_s * 1.01 + 1:
            raise PayloadTooLargeError(
                f"clip lasts {declared_s:.1f} s; the limit is {limits.max_clip_duration_s:.0f} s", param="video"
            )
        configure_decoder(stream, decode.threads)
        index_timed = container.format.name in INDEX_TIMED_FORMATS
        idx = _demux(container, stream, request, index_timed, limits, deadline)
        if idx.count == 0:
            detail = f" ({idx.error})" if idx.error else ""
            raise UnprocessableClipError(f"the clip contains no video frames{detail}", param="video")
        index_timed = index_timed or len(idx.pts) < idx.count or not stream.time_base
        rate = _frame_rate(container, stream)
        tb = float(stream.time_base) if stream.time_base else 0.0
        if index_timed:
            step = 1.0 / (rate or 25.0)
            times = np.arange(idx.count) * step
            last_dur = step
        else:
            pts = np.asarray(idx.pts, dtype=np.int64)
            times = (np.sort(pts) - pts.min()) * tb
            last_dur = idx.last_duration * tb if idx.last_duration else None
        typical = float(np.median(np.diff(times))) if len(times) > 1 else (1.0 / rate if rate else 0.04)
        clip_end = float(times[-1]) + (last_dur if last_dur and 0 < last_dur < 10 * typical + 1 else typical)
        if clip_end > limits.max_clip_duration_s * 1.01:
            raise PayloadTooLargeError(
                f"clip lasts {clip_end:.1f} s; the limit is {limits.max_clip_duration_s:.0f} s", param="video"
            )
        span = float(times[-1] - times[0])
        source_fps = (len(times) - 1) / span if len(times) > 1 and span > 0 else rate
        grid = plan_grid(
            clip_end,
            fps=request.fps,
            max_frames=request.max_frames,
            start_s=request.start_s,
            end_s=request.end_s,
            source_fps=source_fps,
        )
        warnings: list[str] = []
        if idx.eof and declared_s is not None and declared_s - clip_end > max(_TRUNCATION_SLACK_S, 2 * typical):
            warnings.append(
                f"the file is cut off: its frames end at {clip_end:.2f} s but its header says the clip lasts "
                f"{declared_s:.2f} s"
            )
        if idx.error:
            warnings.append(f"reading stopped at {clip_end:.2f} s: {idx.error}")

        if index_timed:
            store = FrameStore(grid.count, decode.budget, decode.interpolation)
            n_decoded, more = _decode_indexed(stream, idx, grid, 1.0 / step, store, deadline, decode)
        else:
            wanted = _plan_wanted(idx, tb, grid)
            store = FrameStore(max(1, len(wanted)), decode.budget, decode.interpolation)
            n_decoded, more = _decode_planned(stream, idx, wanted, store, deadline, decode)
        warnings += more
    finally:
        container.close()

    n_real = len(store)
    if n_real == 0 or (warnings and n_real < 2):
        why = f": {warnings[-1]}" if warnings else ""
        raise UnprocessableClipError(f"fewer than 2 frames could be decoded{why}", param="video")
    for w in warnings:
        logger.info("partial clip: %s", w)
    return DecodedClip.from_store(
        store,
        fps=grid.fps,
        source_fps=source_fps,
        duration_s=clip_end if idx.eof else max(clip_end, declared_s or 0.0),
        warnings=warnings,
        t_start=t_start,
        decoded_frames=n_decoded,
    )


def _frame_rate(container, stream) -> float | None:
    """Nominal frame rate (frames/s): the container's, or for raw streams the bitstream's (H.264 VUI timing)."""
    candidates = [stream.average_rate, stream.guessed_rate]
    if container.format.name in _RAW_FORMATS:
        candidates = [stream.codec_context.framerate, stream.guessed_rate, stream.average_rate]
    for rate in candidates:
        if rate and float(rate) > 0:
            return float(rate)
    return None


def _declared_duration(container, stream) -> float | None:
    """Clip length in seconds that the header claims for the video stream (or the container)."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration:
        return container.duration / 1e6
    return None


def _plan_wanted(idx: _PacketIndex, tb: float, grid: SamplingGrid) -> dict[int, float]:
    """The pts (stream time base) of the frames to keep → their time in seconds.

    Only frames whose packets were kept (at or after the first kept keyframe, in
    display order) are candidates.
    """
    all_pts = np.asarray(idx.pts, dtype=np.int64)
    t0 = int(all_pts.min())
    cand = all_pts[idx.kept_first : idx.kept_first + len(idx.kept)]
    cand_refs = idx.refs[idx.kept_first : idx.kept_first + len(idx.kept)]
    first_key = int(cand[0])
    order = np.argsort(cand, kind="stable")
    pts_sorted = cand[order]
    keep = pts_sorted >= first_key  # leading pictures of an open GOP need frames before the keyframe
    pts_sorted = pts_sorted[keep]
    if len(pts_sorted) == 0:
        return {}
    refs_sorted = None
    if all(r is not None for r in cand_refs):
        refs_sorted = np.asarray(cand_refs, dtype=bool)[order][keep]
    times = (pts_sorted - t0) * tb
    picks = plan_picks(times, grid, refs_sorted)
    return {int(pts_sorted[i]): float(times[i]) for i in picks}


def describe(clip: DecodedClip) -> dict:
    """JSON-ready metadata of a decoded clip (no pixels)."""
    return {
        "num_frames": clip.num_frames,
        "frame_width": int(clip.frames.shape[2]),
        "frame_height": int(clip.frames.shape[1]),
        "timestamps_s": [round(float(t), 4) for t in clip.timestamps_s],
        "padded_frames": clip.padded_frames,
        "fps": round(clip.fps, 6),
        "source_width": clip.source_width,
        "source_height": clip.source_height,
        "source_fps": None if clip.source_fps is None else round(clip.source_fps, 4),
        "duration_s": round(clip.duration_s, 4),
        "rotation_deg": clip.rotation_deg,
    }
