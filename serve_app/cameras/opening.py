"""Opening a camera's source, each checked as one-off clips are (:mod:`serve_app.sources.rules`).

* a path under ``sources.allowed_roots``: opened through the clip routes' container allowlist
  (:func:`serve_app.decode.container.open_container`);
* ``rtsp://``: TCP-interleaved RTP through a relay pinned to the checked address, redirects refused
  (:mod:`serve_app.sources.rtsp_relay`, as :mod:`serve_app.decode.capture` does);
* ``http(s)://``: progressive MP4, MPEG-TS or MJPEG read as it arrives, over a connection pinned to
  the checked address (:mod:`serve_app.sources.http_source`; TLS verified for the host name), its
  format told from its first bytes (:func:`sniff_http_format`).

Errors retrying cannot fix are raised as :class:`PermanentSourceError` (the stream ends in state
``failed``): a path outside the roots, a file that is not a video, a body that is not what its first
bytes say, an HTTP MP4 whose index sits at its end on a server without byte ranges, an RTSP redirect.
"""

from __future__ import annotations

import av

from serve_app.config import AppConfig
from serve_app.decode.container import open_container
from serve_app.errors import ServeAppError, UnsupportedMediaError
from serve_app.sources.http_source import PinnedHttpBody
from serve_app.sources.rtsp_relay import RtspRelay
from serve_app.sources.rules import check_url, normalize_url, resolve_local_path

#: HTTP statuses of errors that retrying cannot fix (forbidden, not found, too large, not a video).
PERMANENT_STATUSES = frozenset({400, 403, 404, 413, 415})


class PermanentSourceError(Exception):
    """The source cannot be read and retrying will not help (state ``failed``)."""


#: HTTP live formats a stream may use, by what their first bytes look like (FFmpeg demuxer names).
HTTP_FORMATS = ("mov,mp4,m4a,3gp,3g2,mj2", "mpegts", "mpjpeg", "mjpeg")
#: How messages name them.
FORMAT_NAMES = {HTTP_FORMATS[0]: "an MP4", "mpegts": "an MPEG-TS stream", "mpjpeg": "an MJPEG stream",
                "mjpeg": "an MJPEG stream"}  # fmt: skip


def mp4_index_after_media(head: bytes) -> bool:
    """Whether an MP4's top-level boxes in ``head`` (its first bytes) reach the media data (``mdat``)
    before the index (``moov``): such a file can only be read by seeking to its end."""
    pos = 0
    while pos + 8 <= len(head):
        size = int.from_bytes(head[pos : pos + 4], "big")
        kind = head[pos + 4 : pos + 8]
        if kind == b"moov":
            return False
        if kind == b"mdat":
            return True
        if size == 1 and pos + 16 <= len(head):  # a 64-bit size follows the type
            size = int.from_bytes(head[pos + 8 : pos + 16], "big")
        if size < 8:
            return False  # to the end of the file, or malformed: let FFmpeg judge
        pos += size
    return False


def sniff_http_format(head: bytes, content_type: str) -> str:
    """The FFmpeg demuxer for an ``http(s)://`` live source, from its first bytes and ``Content-Type``.

    Progressive MP4 (``ftyp``/``moov``/``mdat`` box), MPEG-TS (sync byte 0x47 every 188 bytes),
    MJPEG over HTTP (``multipart/x-mixed-replace``, or raw JPEG ``FF D8``). Anything else, notably
    an HLS playlist (``#EXTM3U``, whose segment URLs would not pass the source checks), is refused.

    Args:
        head: the body's first bytes (400 or more when the body has them).
        content_type: the ``Content-Type`` header, lower case ("" when absent).

    Raises:
        UnsupportedMediaError (415): not one of those formats (HLS included).
    """
    ctype = content_type
    if ctype.startswith("multipart/x-mixed-replace"):
        return "mpjpeg"
    if head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide"):
        return HTTP_FORMATS[0]
    if len(head) >= 377 and head[0] == 0x47 and head[188] == 0x47 and head[376] == 0x47:
        return "mpegts"
    if head[:2] == b"\xff\xd8":
        return "mjpeg"
    if head.lstrip().startswith(b"#EXTM3U") or "mpegurl" in ctype:
        raise UnsupportedMediaError(
            "HLS playlists are refused: their segment URLs are not checked by the source rules; "
            "use progressive MP4, MPEG-TS or MJPEG over HTTP, or rtsp://",
            param="url",
        )
    raise UnsupportedMediaError("the camera URL is not progressive MP4, MPEG-TS or MJPEG over HTTP", param="url")



def open_source(
    url: str, scheme: str | None, config: AppConfig
) -> tuple[av.container.InputContainer, RtspRelay | PinnedHttpBody | None]:
    """Opens a camera's source; network sources connect to the checked address only.

    ``rtsp://`` goes through an :class:`~serve_app.sources.rtsp_relay.RtspRelay` pinned to the checked
    address (FFmpeg's RTSP client would follow a redirect anywhere); ``http(s)://`` is read by
    a :class:`~serve_app.sources.http_source.PinnedHttpBody` (no second lookup, redirects refused, TLS
    verified for the host name) that PyAV demuxes as a file.

    Args:
        url: the stream's URL or file path (as registered).
        scheme: its URL scheme (:func:`serve_app.sources.rules.url_scheme`), None for a file path.
        config: the application config (sources, limits, streams).

    Returns:
        The open container and what it reads through (the relay or the HTTP body, None for a file):
        the caller closes both. On an error the source is closed here.

    Raises:
        PermanentSourceError: retrying cannot help (see the module docstring).
    """
    cfg, url = config, normalize_url(url)
    s = cfg.streams
    timeout = (cfg.sources.rtsp_open_timeout_s, s.read_timeout_s)
    source: RtspRelay | PinnedHttpBody | None = None
    try:
        if scheme is not None:
            checked = check_url(url, cfg.sources)
            if checked.scheme == "rtsp":
                opts = {
                    "rtsp_transport": "tcp",
                    "timeout": str(int(s.read_timeout_s * 1e6)),
                    "analyzeduration": "1000000",
                    # FFmpeg speaks RTSP over plain TCP to the relay on loopback, and nothing else
                    "format_whitelist": "rtsp",
                    "protocol_whitelist": "tcp",
                }
                relay = RtspRelay(checked.addresses[0], checked.port, cfg.sources.rtsp_open_timeout_s)
                source = relay.__enter__()
                try:
                    return av.open(relay.url(checked.url), options=opts, timeout=timeout), source
                except (av.error.FFmpegError, OSError):
                    if relay.redirect is not None:
                        raise PermanentSourceError(
                            "the camera answered with a redirect to another address; RTSP redirects are not "
                            "followed (register the address that serves the stream)"
                        ) from None
                    raise
            body = PinnedHttpBody(checked, cfg.sources.url_connect_timeout_s, s.read_timeout_s)
            source = body
            head = body.peek(400)
            fmt = sniff_http_format(head, body.content_type)
            if fmt == HTTP_FORMATS[0] and not body.seekable() and mp4_index_after_media(head):
                raise PermanentSourceError(
                    "the camera's MP4 keeps its index (the 'moov' box) after its media data and the server "
                    "does not take byte ranges (Accept-Ranges: bytes), so it cannot be read as it arrives; "
                    "serve it with the index first (ffmpeg -movflags +faststart), with byte ranges, or as "
                    "MPEG-TS"
                )
            # The format is forced: FFmpeg never probes the body as a playlist that opens further URLs.
            try:
                return av.open(body, mode="r", format=fmt, timeout=timeout), source
            except av.error.InvalidDataError as e:  # the bytes are not what they looked like: no retry helps
                raise PermanentSourceError(
                    f"the camera's data is not {FORMAT_NAMES.get(fmt, fmt)} FFmpeg can read "
                    f"(FFmpeg says: {e.strerror or type(e).__name__})"
                ) from None
        path = resolve_local_path(url, cfg.sources.allowed_roots, cfg.limits.max_upload_bytes)
        try:  # the clip routes' opening: video containers only, the file protocol only
            return open_container(path, param="url", label="the camera file"), None
        except ServeAppError as e:  # a file that is not a readable video stays so: no retry
            raise PermanentSourceError(e.message) from None
    except BaseException as e:
        if source is not None:
            source.close()
        if isinstance(e, ServeAppError):
            e.message = e.message.replace("video_url", "url").replace("video_path", "url")
            if e.status in PERMANENT_STATUSES:
                raise PermanentSourceError(e.message) from None
        raise
