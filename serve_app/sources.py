"""Where a clip comes from, and the rules each kind of source must pass.

A :class:`ClipSource` is a value that crosses deployment handles: uploaded
bytes, or a local path that must resolve (``..`` and symlinks followed)
inside one of the configured allowed roots.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from serve_app.errors import ForbiddenSourceError, InvalidRequestError, NotFoundError, PayloadTooLargeError


@dataclasses.dataclass(frozen=True)
class ClipSource:
    """One clip source.

    Attributes:
        data: the clip's bytes (uploads, ``data:`` URLs).
        path: a local file path, checked against the allowed roots where it is read.
        name: a label for logs and errors (file name or path).
    """

    data: bytes | None = None
    path: str | None = None
    name: str = "video"

    def __post_init__(self) -> None:
        if (self.data is None) == (self.path is None):
            raise ValueError("a ClipSource holds exactly one of data or path")

    @property
    def param(self) -> str:
        """The request field this source came from (for error messages)."""
        return "video" if self.data is not None else "video_path"


def resolve_local_path(path: str, allowed_roots: list[str], max_bytes: int) -> Path:
    """Resolves ``path`` and checks it lies inside an allowed root.

    ``..`` components and symlinks are resolved before the check, so neither
    can escape a root.

    Args:
        path: absolute path, or relative to the first allowed root.
        allowed_roots: directories clips may be read from.
        max_bytes: largest accepted file size in bytes.

    Returns:
        The resolved path of an existing regular file.

    Raises:
        ForbiddenSourceError (403): no roots configured, or the path resolves outside them.
        NotFoundError (404): no such file under an allowed root.
        PayloadTooLargeError (413): the file exceeds ``max_bytes``.
        InvalidRequestError (400): empty path.
    """
    if not path or "\x00" in path:
        raise InvalidRequestError("video_path is empty or contains a NUL byte", param="video_path")
    if not allowed_roots:
        raise ForbiddenSourceError(
            "local file paths are disabled on this server (sources.allowed_roots is empty)", param="video_path"
        )
    roots = [Path(r).resolve() for r in allowed_roots]
    p = Path(path)
    candidate = (p if p.is_absolute() else roots[0] / p).resolve()
    if not any(candidate == r or r in candidate.parents for r in roots):
        raise ForbiddenSourceError(
            f"video_path {path!r} is outside the allowed roots ({', '.join(map(str, roots))})",
            param="video_path",
        )
    if not candidate.is_file():
        raise NotFoundError(f"video_path {path!r}: no such file under the allowed roots", param="video_path")
    size = os.stat(candidate).st_size
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"video file is {size} bytes; the limit is {max_bytes} bytes", param="video_path"
        )
    return candidate
