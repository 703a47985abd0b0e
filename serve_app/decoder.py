"""Clip decoding with PyAV: sample by presentation timestamp, resize to the pixel budget.

:func:`decode_clip` turns clip bytes (or a file path) into a
:class:`DecodedClip`: one ``(T, H, W, 3) uint8`` RGB array plus metadata. It
makes two passes: a demux pass (packets only, no decoding) that finds the
clip's length and frame times so the sampling grid and frame size are known
up front, then a decode pass that converts only the kept frames, straight to
the target size (``VideoFrame.to_ndarray(width=, height=, format="rgb24")``
in one swscale call), so a 4K clip never materializes as full-size arrays.

Errors are :class:`serve_app.errors.ServeAppError` subclasses with the
HTTP status they map to.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import time
from pathlib import Path

import av
import numpy as np

from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.errors import (
    InvalidRequestError,
    PayloadTooLargeError,
    ServeAppError,
    UnprocessableClipError,
    UnsupportedMediaError,
    UpstreamTimeoutError,
)
from serve_app.sampling import FrameSelector, even_frame_count, frame_size, plan_grid

logger = logging.getLogger(__name__)

#: Container formats cameras and phones write (FFmpeg demuxer names). Others
#: (e.g. ``tty``, which "decodes" any text file as ANSI art) are refused.
VIDEO_FORMATS = frozenset(
    {
        "mov,mp4,m4a,3gp,3g2,mj2",
        "matroska,webm",
        "avi",
        "mpegts",
        "mpeg",
        "flv",
        "asf",
        "h264",
        "hevc",
        "m4v",
        "mjpeg",
        "rtsp",
        "ivf",
        "nut",
    }
)

#: Containers with no real presentation timestamps: frame i shows at i / rate.
INDEX_TIMED_FORMATS = frozenset({"avi"})


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
            positions come from it).
        source_width, source_height: displayed source size in pixels.
        source_fps: average source frame rate (frames/s), if known.
        duration_s: clip length in seconds (end of the last frame).
        rotation_deg: display rotation applied (0, 90, 180 or 270).
        padded_frames: frames appended to reach an even count.
        warnings: human-readable notes (e.g. where decoding stopped).
        decode_ms: wall time spent decoding, in milliseconds.
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

    @property
    def num_frames(self) -> int:
        """Frames sent to the model (T, even)."""
        return int(self.frames.shape[0])


def _open(source: bytes | str | Path) -> av.container.InputContainer:
    src = io.BytesIO(source) if isinstance(source, (bytes, bytearray, memoryview)) else str(source)
    try:
        container = av.open(src, mode="r", metadata_errors="ignore")
    except av.error.FileNotFoundError as e:
        raise InvalidRequestError(f"video file not found: {source}", param="video_path") from e
    except (av.error.FFmpegError, ValueError, OSError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise UnsupportedMediaError(f"not a readable video container ({reason})", param="video") from e
    if container.format.name not in VIDEO_FORMATS:
        container.close()
        raise UnsupportedMediaError(
            f"container format '{container.format.name}' is not a supported video format "
            f"(supported: MP4/MOV, Matroska/WebM, AVI, MPEG-TS, FLV, raw H.264/HEVC, MJPEG)",
            param="video",
        )
    return container


def _video_stream(container: av.container.InputContainer) -> av.video.stream.VideoStream:
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise UnsupportedMediaError(
            f"the file has no video stream (streams: {', '.join(kinds)})", param="video"
        )
    stream = container.streams.video[0]
    if stream.codec_context is None:
        raise UnsupportedMediaError(f"no decoder for video codec '{stream.codec.name}'", param="video")
    return stream


def _rotation(stream: av.video.stream.VideoStream) -> int:
    """Display rotation in degrees clockwise (0/90/180/270) from the stream's display matrix."""
    try:
        sd = stream.side_data
        matrix = sd.get("DISPLAYMATRIX") if hasattr(sd, "get") else None
    except Exception:  # noqa: BLE001 - older PyAV: no side data access
        matrix = None
    if matrix is None:
        return 0
    deg = float(matrix) if not hasattr(matrix, "rotation") else float(matrix.rotation)
    return int(round(-deg / 90.0)) % 4 * 90


def _frame_times(container, stream, index_timed: bool) -> tuple[list[float], float | None, int | None]:
    """Demux pass: presentation times (s, from the first frame) of every video packet.

    Returns the sorted times, the duration (s) of the last frame if the
    container states it, and the first frame's pts (stream time base; None
    for index-timed containers).
    """
    tb = float(stream.time_base) if stream.time_base else None
    pts: list[int] = []
    last_duration = None
    n = 0
    for packet in container.demux(stream):
        if packet.size == 0:
            continue
        n += 1
        ts = packet.pts if packet.pts is not None else packet.dts
        if ts is not None:
            pts.append(ts)
        if packet.duration:
            last_duration = packet.duration
    rate = float(stream.average_rate or stream.guessed_rate or 0) or None
    if index_timed or tb is None or len(pts) < n:
        step = 1.0 / rate if rate else 0.04
        return [i * step for i in range(n)], step, None
    if not pts:
        return [], None, None
    pts.sort()
    t0 = pts[0]
    times = [(p - t0) * tb for p in pts]
    return times, (last_duration * tb if last_duration else None), t0


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
        A :class:`DecodedClip` with ``(T, H, W, 3) uint8`` frames.

    Raises:
        InvalidRequestError (400): empty input.
        PayloadTooLargeError (413): source frame or clip length over the limits.
        UnsupportedMediaError (415): not a video container, no video stream, unknown codec.
        UnprocessableClipError (422): fewer than one usable frame, bad window, extreme aspect.
        UpstreamTimeoutError (504): decoding exceeded ``decode.timeout_s``.
    """
    t_start = time.perf_counter()
    if isinstance(source, (bytes, bytearray, memoryview)) and len(source) == 0:
        raise InvalidRequestError("the uploaded video is empty (0 bytes)", param="video")
    deadline = t_start + decode.timeout_s

    container = _open(source)
    try:
        stream = _video_stream(container)
        cc = stream.codec_context
        src_w, src_h = cc.width, cc.height
        if src_w > limits.max_source_width or src_h > limits.max_source_height:
            raise PayloadTooLargeError(
                f"source frames are {src_w}x{src_h}; the limit is "
                f"{limits.max_source_width}x{limits.max_source_height}",
                param="video",
            )
        if container.duration and container.duration / 1e6 > limits.max_clip_duration_s * 1.01 + 1:
            raise PayloadTooLargeError(
                f"clip lasts {container.duration / 1e6:.1f} s; the limit is {limits.max_clip_duration_s:.0f} s",
                param="video",
            )
        rotation = _rotation(stream)
        index_timed = container.format.name in INDEX_TIMED_FORMATS
        try:
            times, last_dur, first_pts = _frame_times(container, stream, index_timed)
        except av.error.FFmpegError as e:
            raise UnprocessableClipError(f"cannot read the clip's packets ({e})", param="video") from e
    finally:
        container.close()

    if not times:
        raise UnprocessableClipError("the clip contains no video frames", param="video")
    rate = float(stream.average_rate or stream.guessed_rate or 0) or None
    diffs = np.diff(times)
    typical = float(np.median(diffs)) if len(diffs) else (1.0 / rate if rate else 0.04)
    clip_end = times[-1] + (last_dur if last_dur and last_dur > 0 else typical)
    if clip_end > limits.max_clip_duration_s * 1.01:
        raise PayloadTooLargeError(
            f"clip lasts {clip_end:.1f} s; the limit is {limits.max_clip_duration_s:.0f} s", param="video"
        )
    source_fps = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else rate
    grid = plan_grid(
        clip_end,
        fps=request.fps,
        max_frames=request.max_frames,
        start_s=request.start_s,
        end_s=request.end_s,
        source_fps=source_fps,
    )
    disp_w, disp_h = (src_h, src_w) if rotation in (90, 270) else (src_w, src_h)
    n_out = even_frame_count(grid.count)
    out_h, out_w = frame_size(disp_h, disp_w, n_out, decode.budget)
    # Resize before rotating: the decoder's orientation is the stored one.
    conv_w, conv_h = (out_h, out_w) if rotation in (90, 270) else (out_w, out_h)

    frames = np.empty((n_out, out_h, out_w, 3), dtype=np.uint8)
    kept_t: list[float] = []
    warnings: list[str] = []
    selector = FrameSelector(grid)

    def store(settled) -> None:
        for _k, t, vf in settled:
            arr = vf.to_ndarray(width=conv_w, height=conv_h, format="rgb24", interpolation="BILINEAR")
            if rotation:
                arr = np.rot90(arr, k=-(rotation // 90))
            frames[len(kept_t)] = arr
            kept_t.append(t)

    container = _open(source)
    try:
        stream = container.streams.video[0]
        stream.codec_context.thread_count = decode.threads
        stream.codec_context.thread_type = "AUTO" if decode.threads != 1 else "SLICE"
        tb = float(stream.time_base) if stream.time_base else None
        if request.start_s and request.start_s > 1.0 and first_pts is not None and tb:
            # Jump to the keyframe before the window instead of decoding from 0.
            container.seek(first_pts + int((request.start_s - 1.0) / tb), stream=stream, backward=True)
        i = 0
        try:
            for vf in container.decode(stream):
                if first_pts is None or vf.pts is None or tb is None:
                    t = i / rate if rate else i * typical
                else:
                    t = (vf.pts - first_pts) * tb
                i += 1
                if selector.wants(t):
                    store(selector.push(t, vf))
                if selector.done:
                    break
                if time.perf_counter() > deadline:
                    raise UpstreamTimeoutError(
                        f"decoding took longer than the limit of {decode.timeout_s:.0f} s", param="video"
                    )
        except av.error.FFmpegError as e:
            where = kept_t[-1] if kept_t else 0.0
            warnings.append(f"decoding stopped at {where:.2f} s of {clip_end:.2f} s: {e.strerror or e}")
            logger.info("partial decode: %s", warnings[-1])
        store(selector.finish())
    finally:
        container.close()

    n_real = len(kept_t)
    if n_real == 0 or (warnings and n_real < 2):
        raise UnprocessableClipError(
            "no frame could be decoded" + (f" ({warnings[-1]})" if warnings else ""), param="video"
        )
    # Fewer frames than planned (broken or sparse clip) keep the planned size:
    # the per-frame cap only loosens as the frame count drops.
    n_final = even_frame_count(n_real)
    frames = frames[:n_final]
    frames[n_real:] = frames[n_real - 1]
    return DecodedClip(
        frames=frames,
        timestamps_s=np.asarray(kept_t, dtype=np.float64),
        fps=grid.fps,
        source_width=disp_w,
        source_height=disp_h,
        source_fps=source_fps,
        duration_s=clip_end,
        rotation_deg=rotation,
        padded_frames=n_final - n_real,
        warnings=warnings,
        decode_ms=(time.perf_counter() - t_start) * 1000,
    )


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


