"""Captures a window of a live ``rtsp://`` camera stream into a :class:`DecodedClip`.

The camera's host is checked like every URL source and FFmpeg connects to
the checked address (:func:`serve_app.sources.rules.check_url`). RTSP runs over
TCP (interleaved RTP: one connection, firewall-friendly, no packet loss to
reorder). Three limits keep a broken camera from holding a decoder replica:

* open: ``sources.rtsp_open_timeout_s`` for connect, DESCRIBE, SETUP, PLAY and
  the first packets (PyAV's interrupt callback, ``av.open(timeout=(open, read))``);
* read: ``sources.rtsp_read_timeout_s`` between packets, enforced twice: by
  PyAV's interrupt callback and by FFmpeg's own socket timeout (the RTSP
  demuxer's ``timeout`` option, in microseconds, in FFmpeg ≥ 5; FFmpeg 4's
  ``stimeout`` no longer exists);
* total: the capture length plus the open and read limits, wall clock.

A camera that accepts the connection and never answers, or stops sending
mid-stream, fails with 504. Frames are sampled on the grid of the capture
window as they arrive (one pass: a live stream cannot be read twice).
"""

from __future__ import annotations

import logging
import time

import av

from serve_app.config import DecodeConfig, LimitsConfig, SourcesConfig
from serve_app.decode.clip import clip_from_store
from serve_app.decode.container import check_frame_limits, configure_decoder, video_stream
from serve_app.decode.frames import FrameStore
from serve_app.decode.sampling import FrameSelector, plan_grid
from serve_app.errors import (
    ForbiddenSourceError,
    PayloadTooLargeError,
    UnprocessableClipError,
    UnsupportedMediaError,
    UpstreamTimeoutError,
)
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.protocol import DecodedClip, FrameSampling
from serve_app.sources.rtsp_relay import RtspRelay
from serve_app.sources.rules import check_url
from serve_app.text import log_safe

logger = get_logger(__name__)

PARAM = "video_url"


def _open(url: str, host: str, sources: SourcesConfig, relay: RtspRelay) -> av.container.InputContainer:
    options = {
        # security: the RTSP demuxer over plain TCP only (FFmpeg connects to the relay on loopback)
        "format_whitelist": "rtsp",
        "protocol_whitelist": "tcp",
        "rtsp_transport": "tcp",
        "timeout": str(int(sources.rtsp_read_timeout_s * 1e6)),  # socket I/O timeout, microseconds
        # Stream probing reads at most 1 s of video (FFmpeg's default is 5 s): the packets are kept, only
        # the start is quicker, and a camera that stalls early fails on the read limit, not the open one.
        "analyzeduration": "1000000",
    }
    t0 = time.monotonic()
    try:
        container = av.open(
            url,
            mode="r",
            options=options,
            timeout=(sources.rtsp_open_timeout_s, sources.rtsp_read_timeout_s),
        )
    except (av.error.FFmpegError, OSError) as e:
        if relay.redirect is not None:
            raise ForbiddenSourceError(
                f"the camera at {host} answered with a redirect to another address; RTSP redirects are not "
                "followed (point video_url at the address that serves the stream)",
                param=PARAM,
            ) from e
        if isinstance(e, ConnectionRefusedError) or isinstance(relay.upstream_error, ConnectionRefusedError):
            raise UnprocessableClipError(f"the camera at {host} refused the connection", param=PARAM) from e
        elapsed = time.monotonic() - t0
        reason = getattr(e, "strerror", None) or str(e)
        if elapsed >= 0.9 * min(sources.rtsp_open_timeout_s, sources.rtsp_read_timeout_s):
            raise UpstreamTimeoutError(
                f"the camera at {host} did not deliver a stream within {elapsed:.1f} s "
                f"(sources.rtsp_open_timeout_s = {sources.rtsp_open_timeout_s:g} s)",
                param=PARAM,
            ) from e
        raise UnprocessableClipError(f"cannot open the RTSP stream at {host} ({reason})", param=PARAM) from e
    if container.format.name != "rtsp":
        container.close()
        raise UnsupportedMediaError(f"the URL did not serve an RTSP stream ({container.format.name})", param=PARAM)
    return container


def capture_rtsp(  # noqa: C901 - one live read loop: each branch is a documented camera failure (tests/integration/sources/test_sources_rtsp.py)
    url: str,
    request: FrameSampling,
    decode: DecodeConfig,
    limits: LimitsConfig,
    sources: SourcesConfig,
) -> DecodedClip:
    """Records ``[start_s, end_s)`` seconds of a live RTSP stream and samples it.

    The window is measured in stream time from the first frame received;
    without ``end_s`` it is ``sources.rtsp_capture_s`` long.

    Args:
        url: ``rtsp://[user:pass@]host[:port]/path``.
        request: sampling rate, frame cap and window.
        decode: pixel budget, threads.
        limits: frame-size limits.
        sources: URL rules and the rtsp timeouts.

    Returns:
        A :class:`DecodedClip` of ``(T, H, W, 3) uint8`` frames.

    Raises:
        InvalidRequestError (400) / ForbiddenSourceError (403): see :func:`serve_app.sources.rules.check_url`.
        PayloadTooLargeError (413): ``end_s`` over ``sources.rtsp_max_capture_s``, or frames over the size limit.
        UnsupportedMediaError (415): no video in the stream, or no decoder for it.
        UnprocessableClipError (422): connection refused, stream error, fewer than one frame.
        UpstreamTimeoutError (504): the camera did not answer, stalled, or the capture overran.
    """
    t_start = time.perf_counter()
    checked = check_url(url, sources)
    capture_s = request.end_s if request.end_s is not None else sources.rtsp_capture_s
    if capture_s > sources.rtsp_max_capture_s:
        raise PayloadTooLargeError(
            f"a capture of {capture_s:g} s was requested; the limit is {sources.rtsp_max_capture_s:g} s "
            "(sources.rtsp_max_capture_s)",
            param="end_s",
        )
    grid = plan_grid(
        capture_s, fps=request.fps, max_frames=request.max_frames, start_s=request.start_s, end_s=capture_s
    )
    wall_deadline = time.monotonic() + sources.rtsp_open_timeout_s + capture_s + 2 * sources.rtsp_read_timeout_s
    # security: FFmpeg reaches the camera only through a relay pinned to the checked address
    relay = RtspRelay(checked.addresses[0], checked.port, sources.rtsp_open_timeout_s).__enter__()
    try:
        container = _open(relay.url(checked.url), checked.host, sources, relay)
    except BaseException:
        relay.close()
        raise
    store = FrameStore(grid.count, decode.budget, decode.interpolation, request.geometry.pixel_factor)
    selector: FrameSelector[av.VideoFrame] = FrameSelector(grid)
    warnings: list[str] = []
    n_decoded = 0
    t0_pts = None
    last_t = 0.0
    try:
        stream = video_stream(container, param=PARAM)
        cc = stream.codec_context
        check_frame_limits(cc.width, cc.height, decode, limits, PARAM)
        configure_decoder(stream, decode.threads)
        tb = float(stream.time_base or 0)
        last_packet = time.monotonic()
        try:
            for packet in container.demux(stream):
                now = time.monotonic()
                if now > wall_deadline:
                    raise UpstreamTimeoutError(
                        f"capturing {capture_s:g} s from the camera at {checked.host} took longer than "
                        f"{wall_deadline - t_start:.0f} s",
                        param=PARAM,
                    )
                last_packet = now
                if packet.size == 0:
                    continue
                try:
                    frames = cc.decode(packet)
                except av.error.FFmpegError as e:
                    LOG_LIMIT.log(logger, logging.INFO, f"rtsp capture {checked.host}",
                                  "rtsp %s: undecodable packet skipped (%s)", log_safe(checked.host), e)
                    continue
                for f in frames:
                    n_decoded += 1
                    if f.pts is None:
                        continue
                    t0_pts = f.pts if t0_pts is None else t0_pts
                    t = (f.pts - t0_pts) * tb
                    last_t = max(last_t, t)
                    if selector.wants(t):
                        for _k, t_kept, kept in selector.push(t, f):
                            store.add(kept, t_kept)
                if selector.done or last_t >= capture_s:
                    break
        except av.error.FFmpegError as e:
            stalled = time.monotonic() - last_packet
            if stalled >= 0.9 * sources.rtsp_read_timeout_s:
                raise UpstreamTimeoutError(
                    f"the camera at {checked.host} stopped sending video for {stalled:.1f} s after "
                    f"{last_t:.1f} s of the {capture_s:g}-s capture (sources.rtsp_read_timeout_s = "
                    f"{sources.rtsp_read_timeout_s:g} s)",
                    param=PARAM,
                ) from e
            warnings.append(f"the stream ended at {last_t:.2f} s of the {capture_s:g}-s capture ({e.strerror or e})")
        for _k, t_kept, kept in selector.finish():
            store.add(kept, t_kept)
    finally:
        container.close()
        relay.close()
    if len(store) == 0:
        raise UnprocessableClipError(f"no frame arrived from the camera at {checked.host}", param=PARAM)
    if last_t + 1e-6 < capture_s - grid.step_s and not warnings:
        warnings.append(f"the stream ended at {last_t:.2f} s of the {capture_s:g}-s capture")
    return clip_from_store(
        store,
        fps=grid.fps,
        source_fps=float(stream.average_rate) if stream.average_rate else None,
        duration_s=last_t,
        warnings=warnings,
        t_start=t_start,
        decoded_frames=n_decoded,
    )
