"""What FFmpeg itself costs on a clip, via PyAV without the decoder's conversions: the decode bench's bounds.

A full decode and a decode of only the reference pictures (the least any exact sampler must do),
the I/P pictures that change when B pictures are skipped, the fidelity of skipping the loop filter,
and the clip's facts (codec, size, rate, picture types). See :mod:`benchmarks.decode`.
"""

from __future__ import annotations

import io
import statistics
from pathlib import Path
from typing import Any, Literal

import av
import numpy as np

from benchmarks.cpu_time import own_cpu_s


def _open_video(
    data: bytes, skip_nonref: bool, skip_loop_filter: bool
) -> tuple[av.container.InputContainer, av.VideoStream]:
    c = av.open(io.BytesIO(data), mode="r")
    s = c.streams.video[0]
    if skip_loop_filter:
        s.codec_context.options = {"skip_loop_filter": "all"}  # AVDISCARD_ALL for the deblocking filter
    s.codec_context.thread_count = 1
    s.codec_context.thread_type = "SLICE"
    if skip_nonref:
        s.codec_context.skip_frame = "NONREF"
    return c, s


def pyav_decode_cpu_s(data: bytes, skip_nonref: bool, skip_loop_filter: bool = False) -> tuple[float, int]:
    """CPU seconds and frame count of decoding every (or every reference) picture with PyAV, single-threaded.

    ``skip_loop_filter``: FFmpeg's ``skip_loop_filter=all`` (no deblocking; not exact, see
    :func:`loop_filter_psnr_db`).
    """

    def run() -> int:
        c, s = _open_video(data, skip_nonref, skip_loop_filter)
        with c:
            return sum(1 for _ in c.decode(s))

    return own_cpu_s(run)


def ip_pictures_changed_without_b(data: bytes) -> dict[str, Any]:
    """I/P pictures whose luma differs from the exact decode when all B pictures are skipped.

    Returns ``{"changed": n, "of": n_ip}``; ``changed > 0`` means P pictures predict from
    B reference pictures (H.264 B-pyramid), so an exact sampler must decode those too.
    """

    def luma(skip: Literal["DEFAULT", "BIDIR"]) -> dict[int | None, np.ndarray]:
        c, s = _open_video(data, False, False)
        with c:
            s.codec_context.skip_frame = skip
            return {f.pts: f.to_ndarray(format="gray") for f in c.decode(s)}

    exact, no_b = luma("DEFAULT"), luma("BIDIR")
    changed = sum(1 for pts, y in no_b.items() if not np.array_equal(y, exact[pts]))
    return {"changed": changed, "of": len(no_b)}


def loop_filter_psnr_db(data: bytes) -> dict[str, Any]:
    """Luma PSNR (dB) of the reference pictures decoded without deblocking against the exact decode.

    Returns ``{"min": dB, "median": dB}`` over the pictures (99 dB stands for identical).
    """

    def luma(skip_loop_filter: bool) -> list[np.ndarray]:
        c, s = _open_video(data, True, skip_loop_filter)
        with c:
            return [f.to_ndarray(format="gray").astype(np.float64) for f in c.decode(s)]

    psnr = []
    for a, b in zip(luma(False), luma(True), strict=True):
        mse = float(np.mean((a - b) ** 2))
        psnr.append(99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse))
    return {"min": round(min(psnr), 1), "median": round(statistics.median(psnr), 1)}


def describe_clip(path: Path) -> dict[str, Any]:
    """Codec, size, rate, length and picture-type counts of a clip."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        types: dict[str, int] = {}
        for f in c.decode(s):
            name = {1: "I", 2: "P", 3: "B"}.get(int(f.pict_type), str(int(f.pict_type)))
            types[name] = types.get(name, 0) + 1
        return {
            "codec": s.codec_context.name,
            "width": s.codec_context.width,
            "height": s.codec_context.height,
            "fps": round(float(s.average_rate or 0), 3),
            "frames": sum(types.values()),
            "picture_types": types,
            "audio": bool(c.streams.audio),
            "bytes": path.stat().st_size,
        }
