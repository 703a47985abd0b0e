"""Opening clip containers safely: a format allowlist, 415 vs 422, the video stream, frame limits.

FFmpeg opens far more than video (it "decodes" a text file as ANSI art,
format ``tty``), so only container formats cameras and phones write are
accepted. A file that will not open at all is told apart by its magic
bytes: a known video container that fails to open is truncated or damaged
(422); anything else is not a video (415).
"""

from __future__ import annotations

import io
from pathlib import Path

import av

from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.sampling import smart_resize
from serve_app.errors import NotFoundError, PayloadTooLargeError, UnprocessableClipError, UnsupportedMediaError

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


#: The supported containers, for messages.
SUPPORTED = "MP4/MOV, Matroska/WebM, AVI, MPEG-TS/PS, FLV, ASF, raw H.264/HEVC, MJPEG"
#: Demuxers FFmpeg may use on bytes and files (uploads, data: URLs, fetched clips, paths): the
#: video containers above, as FFmpeg's ``format_whitelist`` (checked when the input is opened,
#: before the demuxer runs), so a playlist or description format (``sdp`` opens UDP sockets,
#: ``concat``/``hls`` open other files or URLs) never starts.
FILE_FORMAT_WHITELIST = ",".join(sorted(f for f in VIDEO_FORMATS if f != "rtsp"))
#: FFmpeg ``protocol_whitelist`` per input kind: a path may use the ``file`` protocol only; bytes
#: (read through PyAV's own I/O) none at all ("none" names no protocol).
PROTOCOLS = {"bytes": "none", "path": "file"}


def _sniff_container(head: bytes) -> str | None:
    """The video container ``head`` (the first bytes of a file) looks like, by magic bytes."""
    if len(head) >= 8 and head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot"):
        return "MP4/MOV"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "Matroska/WebM"
    if head.startswith(b"RIFF") and head[8:12] == b"AVI ":
        return "AVI"
    if head.startswith(b"FLV\x01"):
        return "FLV"
    if head.startswith(b"\x30\x26\xb2\x75\x8e\x66\xcf\x11"):
        return "ASF/WMV"
    if head.startswith(b"\x00\x00\x01\xba"):
        return "MPEG-PS"
    if len(head) > 188 and head[0] == 0x47 and head[188] == 0x47:
        return "MPEG-TS"
    return None


def _head(source: bytes | str | Path, n: int = 512) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source[:n])
    try:
        with open(source, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def _is_empty_file(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def open_container(
    source: bytes | str | Path,
    *,
    param: str = "video",
    options: dict[str, str] | None = None,
    timeout: tuple[float, float] | None = None,
    label: str | None = None,
) -> av.container.InputContainer:
    """Opens a clip with FFmpeg, accepting only video container formats.

    Bytes and paths are opened with :data:`FILE_FORMAT_WHITELIST` and the protocol of
    :data:`PROTOCOLS` (no other protocol, no other demuxer, not even to probe further).
    Messages name the source by ``label`` (e.g. "the uploaded video"), never by its bytes
    or the server's path.

    Args:
        source: clip bytes, or a local path.
        param: request field named in errors.
        options: further FFmpeg demuxer/protocol options.
        timeout: PyAV's ``(open, read)`` timeouts in seconds.
        label: how messages name the source (default: "the video").

    Raises:
        NotFoundError (404): no such local file.
        UnprocessableClipError (422): a known container (by its magic bytes) that will not open:
            truncated or damaged.
        UnsupportedMediaError (415): not a video container this server reads.
    """
    src = io.BytesIO(source) if isinstance(source, (bytes, bytearray, memoryview)) else str(source)
    label = label or "the video"
    if (isinstance(src, io.BytesIO) and src.getbuffer().nbytes == 0) or (
        isinstance(source, Path) and _is_empty_file(source)
    ):
        raise UnprocessableClipError(f"{label} is empty (0 bytes)", param=param)
    opts = {
        "format_whitelist": FILE_FORMAT_WHITELIST,
        "protocol_whitelist": PROTOCOLS["bytes" if isinstance(src, io.BytesIO) else "path"],
        **(options or {}),
    }
    try:
        container = av.open(src, mode="r", options=opts, timeout=timeout)
    except av.error.FileNotFoundError as e:
        raise NotFoundError(f"{label} was not found", param=param) from e
    except (av.error.FFmpegError, ValueError, OSError) as e:
        # strerror only: str(e) carries the file name (a server path, or PyAV's '<none>')
        reason = getattr(e, "strerror", None) or type(e).__name__
        kind = _sniff_container(_head(source)) if not isinstance(src, str) or Path(src).exists() else None
        if kind is not None:
            hint = (
                " (an MP4 whose index, the 'moov' box, sits at the end of the file cannot be read "
                "from a partial upload)"
                if kind == "MP4/MOV"
                else ""
            )
            raise UnprocessableClipError(
                f"the file is a {kind} container but cannot be opened: it is truncated or damaged{hint}; "
                f"FFmpeg says: {reason}",
                param=param,
            ) from e
        raise UnsupportedMediaError(
            f"not a readable video container (supported: {SUPPORTED}; FFmpeg says: {reason})", param=param
        ) from e
    if container.format.name not in VIDEO_FORMATS:
        name = container.format.name
        container.close()
        raise UnsupportedMediaError(
            f"container format '{name}' is not a supported video format "
            f"(supported: {SUPPORTED})",
            param=param,
        )
    return container


def video_stream(container: av.container.InputContainer, *, param: str = "video") -> av.video.stream.VideoStream:
    """The clip's first real video stream (cover art is not video).

    Raises:
        UnsupportedMediaError (415): no video stream, or no decoder for its codec.
    """
    streams = [s for s in container.streams.video if not (s.disposition & av.stream.Disposition.attached_pic)]
    if not streams:
        kinds: list[str] = sorted({s.type for s in container.streams}) or ["none"]
        raise UnsupportedMediaError(f"the file has no video stream (streams: {', '.join(kinds)})", param=param)
    stream = streams[0]
    if stream.codec_context is None:
        raise UnsupportedMediaError(
            "the video codec is not supported: FFmpeg has no decoder for it "
            "(supported include H.264, HEVC, VP8, VP9, AV1, MPEG-4, MJPEG)",
            param=param,
        )
    return stream


def check_frame_limits(width: int, height: int, decode: DecodeConfig, limits: LimitsConfig, param: str) -> None:
    """Rejects source frames over the size limits or of an unusable shape, before decoding.

    Raises:
        PayloadTooLargeError (413): wider or taller than ``limits.max_source_width/height``.
        UnprocessableClipError (422): empty, or an aspect ratio over the budget's limit.
    """
    if width <= 0 or height <= 0:
        raise UnprocessableClipError(f"the video stream declares an empty frame size ({width}x{height})", param=param)
    if width > limits.max_source_width or height > limits.max_source_height:
        raise PayloadTooLargeError(
            f"source frames are {width}x{height}; the limit is {limits.max_source_width}x{limits.max_source_height}",
            param=param,
        )
    b = decode.budget
    try:
        smart_resize(
            height, width, min_pixels=b.min_frame_pixels, max_pixels=b.max_frame_pixels, max_aspect=b.max_aspect_ratio
        )
    except UnprocessableClipError as e:
        raise UnprocessableClipError(e.message, param=param) from None


def configure_decoder(stream: av.video.stream.VideoStream, threads: int) -> None:
    """Explicit decoder threading: ``threads`` (0 = FFmpeg's choice); one thread uses no frame threads."""
    cc = stream.codec_context
    cc.thread_count = threads
    cc.thread_type = "SLICE" if threads == 1 else "AUTO"
