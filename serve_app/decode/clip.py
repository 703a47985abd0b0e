"""Clip decoding with PyAV: sample by presentation timestamp, resize to the pixel budget.

:func:`decode_clip` turns clip bytes (or a file path) into a
:class:`serve_app.protocol.DecodedClip`: one ``(T, H, W, 3) uint8`` RGB array plus metadata.

1. **Open** (:mod:`serve_app.decode.container`): video container formats only; a
   known container that will not open is 422 (truncated/damaged), anything
   else 415; frame size and aspect limits are checked before decoding (a
   stream whose size FFmpeg's probe did not find is checked at its first
   decoded picture instead).
2. **Demux pass** (packets only, no decoding): the frame times on the
   player's timeline (:mod:`serve_app.decode.timeline`: edit lists applied, 0 s =
   the first presented picture), which pictures are references
   (:mod:`serve_app.decode.bitstream`), the clip's end, and the packets of the
   requested window, kept in memory.
3. **Plan**: the sampling grid and, per target, the frame to keep
   (:func:`serve_app.decode.sampling.plan_picks`, reference frames preferred).
4. **Fast decode** over the kept packets: a non-reference picture that is not
   kept is never sent to the decoder (H.264/HEVC), or is skipped by FFmpeg
   (``skip_frame=NONREF`` for that packet, other codecs); decoding stops
   after the last kept frame. Only kept frames are converted, straight to the
   target size (:class:`serve_app.decode.frames.FrameStore`).
5. **No silent loss.** At the first sign of trouble in the fast decode (a
   decode error, a picture flagged corrupt, a planned picture the decoder
   never output) the window is decoded again the plain way: every packet, past
   errors, picking from what the decoder shows (the costs fall only on
   troubled clips). Streams that start before their first keyframe, with
   timestamps that jump back, or without a probed frame size go the plain way
   from the start. Every grid target still more than one step from a
   returned frame is reported in ``gaps`` and ``warnings`` with its time range
   and the reason (no pictures there, no keyframe yet, damaged data).

AVI and raw elementary streams have no trustworthy presentation timestamps
(packed B-frames scramble them): they are timed by frame index and decoded
from their first packet, choosing frames with
:class:`serve_app.decode.sampling.FrameSelector`; so are clips whose timestamps do
not advance (with a warning).

A clip that breaks mid-stream keeps the frames it could decode, with
warnings saying where and why. Fewer than two frames is a 422 that gives
the reason. Errors are :class:`serve_app.errors.ServeAppError` subclasses
with their HTTP status.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.container import check_frame_limits, configure_decoder, open_container, video_stream
from serve_app.decode.frames import FrameStore
from serve_app.decode.passes import PacketIndex, decode_plain, decode_planned, demux, error_warning, frame_rate
from serve_app.decode.sampling import FrameGrid, plan_grid, plan_picks
from serve_app.decode.timeline import INDEX_TIMED_FORMATS, Timeline, build_timeline, find_gaps, gap_message
from serve_app.errors import PayloadTooLargeError, UnprocessableClipError
from serve_app.log_limit import get_logger
from serve_app.protocol import DecodedClip, FrameSampling, Gap
from serve_app.text import log_safe

if TYPE_CHECKING:
    from av.container import InputContainer
    from av.video.stream import VideoStream

logger = get_logger(__name__)

#: A header duration this much (s) longer than the frames found means a truncated file.
_TRUNCATION_SLACK_S = 0.5


def clip_from_store(store: FrameStore, *, fps: float, source_fps: float | None, duration_s: float,
                    warnings: Sequence[str], t_start: float, decoded_frames: int = 0, gaps: Sequence[Gap] = (),
                    decode_path: str = "planned") -> DecodedClip:
    """The clip a :class:`FrameStore` holds (padded to an even count), timed from ``t_start``
    (``time.perf_counter()`` when decoding began)."""
    frames, timestamps, padded = store.finish()
    if store.source_size is None:
        raise ValueError("a FrameStore with no frames makes no clip")
    return DecodedClip(
        frames=frames,
        timestamps_s=timestamps,
        fps=fps,
        source_width=store.source_size[0],
        source_height=store.source_size[1],
        source_fps=source_fps,
        duration_s=duration_s,
        rotation_deg=store.rotation_cw,
        padded_frames=padded,
        warnings=tuple(warnings),
        decode_ms=(time.perf_counter() - t_start) * 1000,
        decoded_frames=decoded_frames,
        gaps=tuple(gaps),
        decode_path=decode_path,
    )


# --------------------------------------------------------------------------- entry point


def decode_clip(  # noqa: C901 - the decode pipeline in order: open, plan, two decode paths, checks; each step a call
    source: bytes | str | Path,
    request: FrameSampling,
    decode: DecodeConfig,
    limits: LimitsConfig,
) -> DecodedClip:
    """Decodes and samples one clip on the player's timeline, with no silent loss.

    Args:
        source: the clip's bytes, or a path to a local file.
        request: sampling rate, frame cap and optional window (player's timeline seconds).
        decode: decoder settings (pixel budget, threads, time limit).
        limits: size and duration limits (durations counted from the first presented picture).

    Returns:
        A :class:`DecodedClip` with ``(T, H, W, 3) uint8`` frames as displayed; timestamps within
        half a grid step (0.125 s at 4 fps) of ``start + k / fps``; every grid target left
        unfilled by more than one step is in ``gaps`` and ``warnings`` with its reason.

    Raises:
        UnprocessableClipError (422): empty input, truncated/damaged container, fewer than
            two frames decoded (the message gives the reason), empty window, extreme aspect.
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
        probed = cc.width > 0 and cc.height > 0  # else FFmpeg's probe gave up early: decode the plain way
        if probed:
            check_frame_limits(cc.width, cc.height, decode, limits, "video")
        declared_s = _declared_duration(container, stream) if probed else None  # a failed probe guesses
        if declared_s is not None and declared_s > limits.max_clip_duration_s * 1.01 + 1:
            raise PayloadTooLargeError(
                f"clip lasts {declared_s:.1f} s; the limit is {limits.max_clip_duration_s:.0f} s", param="video"
            )
        configure_decoder(stream, decode.threads)
        index_timed = container.format.name in INDEX_TIMED_FORMATS
        idx = demux(container, stream, request, index_timed, limits, deadline)
        if idx.count == 0:
            detail = f" ({idx.error})" if idx.error else ""
            raise UnprocessableClipError(f"the clip contains no video frames{detail}", param="video")
        rate = frame_rate(container, stream)
        tb = float(stream.time_base) if stream.time_base else 0.0
        timeline = build_timeline(idx.pts, idx.dts, idx.discard, tb, rate, index_timed)
        if timeline.index_timed and not index_timed and idx.kept_first > 0:
            # Timestamps that do not advance: frames are counted from the first packet, so read it all.
            container.close()
            container = open_container(Path(source) if isinstance(source, str) else source)
            stream = video_stream(container)
            configure_decoder(stream, decode.threads)
            idx = demux(container, stream, request, True, limits, deadline)
            warned = timeline.warnings
            timeline = build_timeline(idx.pts, idx.dts, idx.discard, tb, rate, True)
            timeline.warnings = warned
        times = timeline.presented
        if len(times) == 0:
            raise UnprocessableClipError("the clip's edit list shows none of its pictures", param="video")
        step = 1.0 / (rate or 25.0)
        last_dur = step if timeline.index_timed else (idx.last_duration * tb if idx.last_duration else None)
        typical = float(np.median(np.diff(times))) if len(times) > 1 else step
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
        warnings: list[str] = list(timeline.warnings)
        if idx.eof and declared_s is not None and declared_s - clip_end > max(_TRUNCATION_SLACK_S, 2 * typical):
            warnings.append(
                f"the file is cut off: its frames end at {clip_end:.2f} s but its header says the clip lasts "
                f"{declared_s:.2f} s"
            )
        if idx.error:
            warnings.append(f"reading stopped at {clip_end:.2f} s: {idx.error}")

        store, done, path = None, None, "plain"
        sar = _sample_aspect(stream)
        if probed and not timeline.index_timed and not timeline.discontinuous and idx.kept and idx.kept[0].is_keyframe:
            wanted = _plan_wanted(idx, timeline, grid)
            store = FrameStore(max(1, len(wanted)), decode.budget, decode.interpolation, request.geometry.pixel_factor)
            store.sample_aspect = sar
            done, path = decode_planned(stream, idx, timeline, wanted, store, deadline, decode), "planned"
            if done.trouble:
                logger.info("fast decode saw trouble (%s): decoding the window the plain way", done.trouble)
                path = f"planned, then plain ({done.trouble})"
                cc.flush_buffers()
                store = None
        if store is None:
            store = FrameStore(grid.count, decode.budget, decode.interpolation, request.geometry.pixel_factor)
            store.sample_aspect = sar
            done = decode_plain(stream, idx, timeline, grid, 1.0 / step, store, deadline, decode, limits)
    finally:
        container.close()
    assert store is not None and done is not None  # the plain pass runs whenever the planned one did not

    keys = timeline.times_s[np.asarray(idx.keys, dtype=bool)]
    keys = keys[~np.isnan(keys)]
    first_key = float(keys.min()) if len(keys) else math.inf
    damage = [e for e in done.errors if e[0] >= first_key - 1e-6]  # earlier ones: no keyframe yet (a gap says so)
    if damage:
        warnings.append(error_warning(damage))
    gaps = find_gaps(grid, np.asarray(store.times_s), times, done.first_s, keys, done.errors)
    warnings += [gap_message(g) for g in gaps]
    warnings += _size_change_warnings(store)
    n_real = len(store)
    if n_real == 0 or (warnings and n_real < 2):
        why = f": {gaps[0].reason}" if gaps else (f": {warnings[-1]}" if warnings else "")
        where = f" in [{grid.start_s:.2f}, {grid.start_s + grid.count * grid.step_s:.2f}) s"
        raise UnprocessableClipError(f"fewer than 2 frames could be decoded{where}{why}", param="video")
    for w in warnings:
        logger.info("partial clip: %s", log_safe(w, limit=500))
    return clip_from_store(
        store,
        fps=grid.fps,
        source_fps=source_fps,
        duration_s=clip_end if idx.eof else max(clip_end, declared_s or 0.0),
        warnings=warnings,
        t_start=t_start,
        decoded_frames=done.decoded,
        gaps=gaps,
        decode_path=path,
    )


def _size_change_warnings(store: FrameStore) -> list[str]:
    if not store.size_changes or store.source_size is None:
        return []
    t, (w, h) = store.size_changes[0]
    more = f" ({len(store.size_changes) - 1} more changes)" if len(store.size_changes) > 1 else ""
    return [
        f"the frame size changes at {t:.2f} s to {w}x{h}{more}: those pictures are scaled to fit the clip's "
        f"{store.source_size[0]}x{store.source_size[1]} frames with their shape kept (black bars)"
    ]


def _sample_aspect(stream: VideoStream) -> float | None:
    """Width/height of one source pixel: the container's value, else the codec's (FFmpeg's
    ``av_guess_sample_aspect_ratio`` order); None when square or unknown."""
    for sar in (stream.sample_aspect_ratio, stream.codec_context.sample_aspect_ratio):
        if sar is not None and sar.numerator > 0 and sar.denominator > 0:
            return float(sar)
    return None


def _declared_duration(container: InputContainer, stream: VideoStream) -> float | None:
    """Clip length in seconds that the header claims for the video stream (or the container),
    counted from the clip's start: some demuxers count durations from 0 (MP4 fragments,
    Matroska), others from the first timestamp (MPEG-TS), so the start time is taken off
    only where the duration reaches past it."""
    if stream.duration and stream.time_base:
        d = float(stream.duration * stream.time_base)
        start = float(stream.start_time * stream.time_base) if stream.start_time else 0.0
    elif container.duration:
        d, start = container.duration / 1e6, (container.start_time or 0) / 1e6
    else:
        return None
    return d - start if 0 < start < d else d


def _plan_wanted(idx: PacketIndex, timeline: Timeline, grid: FrameGrid) -> dict[int, float]:
    """The pts (stream time base) of the frames to keep → their time in seconds.

    Only pictures whose packets were kept (at or after the first kept keyframe, in
    display order) and that the container shows (not discarded by an edit list) are candidates.
    """
    lo, hi = idx.kept_first, idx.kept_first + len(idx.kept)
    cand = np.asarray(idx.pts[lo:hi], dtype=np.int64)
    cand_t = timeline.times_s[lo:hi]
    cand_refs = idx.refs[lo:hi]
    first_key = int(cand[0])
    order = np.argsort(cand, kind="stable")
    # Leading pictures of an open GOP need frames before the keyframe; discarded ones are never shown.
    keep = (cand[order] >= first_key) & ~np.isnan(cand_t[order])
    order = order[keep]
    if len(order) == 0:
        return {}
    refs_sorted = None
    if all(r is not None for r in cand_refs):
        refs_sorted = np.asarray(cand_refs, dtype=bool)[order]
    times = cand_t[order]
    picks = plan_picks(times, grid, refs_sorted)
    return {int(cand[order[i]]): float(times[i]) for i in picks}
