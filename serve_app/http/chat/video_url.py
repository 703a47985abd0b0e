"""A chat request's ``video_url`` as the clip pipeline's :class:`~serve_app.protocol.ClipSource` (Ray-free).

A base64 ``data:`` URL is decoded here (its size checked first); an ``http(s)://`` or ``rtsp://``
URL and a file path (optionally as ``file://``) become sources the decoder reads under the
rules of every route. Also the request fields that clip errors name.
"""

from __future__ import annotations

import binascii
from urllib.parse import unquote, urlparse

from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError, PayloadTooLargeError
from serve_app.protocol import ClipSource
from serve_app.sources.rules import DEFAULT_PORTS

#: URL schemes fetched by the decoder (network sources): those :func:`serve_app.sources.rules.check_url` knows.
NETWORK_SCHEMES = tuple(DEFAULT_PORTS)
#: Media types accepted in a ``data:`` URL (an empty type is accepted too: the decoder sniffs the container).
DATA_MEDIA_PREFIXES = ("video/", "application/octet-stream")

#: The request field a chat request's clip errors name (the user message's video_url part), when that
#: message comes first (see :func:`video_url_param`).
VIDEO_URL_PARAM = "messages.0.content.video_url"


def video_url_param(clip_index: int) -> str:
    """The request field naming the ``video_url`` part of ``messages[clip_index]``."""
    return f"messages.{clip_index}.content.video_url"


#: Params of clip errors raised by the shared pipeline (decoder, sources), in /v1/video/query terms.
CLIP_PARAMS = frozenset({"video", "video_path", "video_url"})


def clip_source(video_url: str, config: AppConfig, param: str = VIDEO_URL_PARAM) -> ClipSource:
    """The :class:`ClipSource` of a ``video_url``.

    ``data:`` URLs are decoded here (size checked first); network URLs and paths
    become sources whose rules (allowed roots, address checks) the decoder
    applies where it reads them, as for every route.

    Args:
        video_url: the ``video_url`` part's URL or path.
        config: limits (``limits.max_upload_bytes``, ``limits.max_url_chars``).
        param: the request field errors name.

    Raises:
        InvalidRequestError (400): malformed ``data:`` URL, non-video media type,
            unknown scheme, or a network URL on a server without URL support.
        PayloadTooLargeError (413): the decoded clip would exceed ``limits.max_upload_bytes``.
    """
    if video_url.startswith("data:"):
        return ClipSource(data=_data_url_bytes(video_url, config.limits.max_upload_bytes, param), name="data-url")
    limit = config.limits.max_url_chars
    if len(video_url) > limit:
        raise InvalidRequestError(
            f"video_url is {len(video_url)} characters; the limit is {limit} (limits.max_url_chars; "
            "data: URLs are bounded by limits.max_upload_bytes instead)",
            param=param,
        )
    try:
        parsed = urlparse(video_url)
        parsed.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as e:  # e.g. "http://[::1/a.mp4": Invalid IPv6 URL
        raise InvalidRequestError(f"video_url is not a valid URL ({e})", param=param) from None
    scheme = parsed.scheme.lower()
    if scheme in NETWORK_SCHEMES:
        return ClipSource(url=video_url, name=video_url)
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidRequestError("file:// URLs must name a local path (file:///...)", param=param)
        path = unquote(parsed.path)
        return ClipSource(path=path, name=path)
    if scheme and len(scheme) > 1:  # "C:" style drive letters are not URLs
        raise InvalidRequestError(
            f"unsupported video_url scheme {scheme!r}: use data:, http(s)://, rtsp://, file:// or a path", param=param
        )
    return ClipSource(path=video_url, name=video_url)


def _data_url_bytes(url: str, max_bytes: int, param: str) -> bytes:
    """The bytes of a base64 ``data:`` URL (RFC 2397), checked against ``max_bytes``.

    The data starts after the comma that follows ``;base64``: browsers label MediaRecorder clips
    ``video/webm;codecs=vp8,opus``, whose parameter holds a comma of its own.

    Raises:
        InvalidRequestError (400): no comma, not base64, a non-video media type, invalid base64, empty.
        PayloadTooLargeError (413): more than ``max_bytes`` once decoded.
    """
    marker = url[:4096].lower().find(";base64,")
    comma = marker + len(";base64") if marker >= 0 else url.find(",", 5)
    if comma < 0:
        raise InvalidRequestError("malformed data: URL (no ',')", param=param)
    header = url[5:comma]
    parts = header.split(";")
    media = parts[0].strip().lower()
    if "base64" not in (p.strip().lower() for p in parts[1:]):
        raise InvalidRequestError("a data: URL must be base64-encoded (data:video/mp4;base64,...)", param=param)
    if media and not media.startswith(DATA_MEDIA_PREFIXES):
        raise InvalidRequestError(f"data: URL media type {media!r} is not a video type", param=param)
    decoded_len = (len(url) - comma - 1) * 3 // 4
    if decoded_len > max_bytes:
        raise PayloadTooLargeError(
            f"video in the data: URL is about {decoded_len} bytes; the limit is {max_bytes} bytes", param=param
        )
    try:
        # binascii reads an ASCII str in place (base64.b64decode would first copy it to bytes)
        data = binascii.a2b_base64(url[comma + 1 :], strict_mode=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidRequestError(f"data: URL is not valid base64 ({e})", param=param) from None
    if not data:
        raise InvalidRequestError("data: URL holds no bytes", param=param)
    return data
