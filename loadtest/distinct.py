"""Different scenes per camera: copies of one clip that differ in a corner mark, for camera sweeps.

Cameras that loop the same clip send the same windows, and vLLM serves a repeated window from its prefix cache
by content, whatever media UUID the request carries: on one H200, 80 cameras of one clip "kept up" at 7.93
windows/s while windows that all differ run at about 3.0/s (``results/gpu/quiet-scenes/README.md``,
"Correction"). A fleet of real cameras has no such repeats. Each copy written here is the source clip with a
camera's index stamped as a row of black and white 16-pixel squares in its top-left corner (bit ``b`` of the
index is square ``b``), re-encoded to H.264, so no two cameras' windows hold the same pixels while the scene, the
frame rate, the duration and the size stay the source's.

    python -m loadtest.distinct .gpu-clips/intel_one-by-one-person-detection.mp4 --cameras 96 \\
        --out-dir .gpu-clips/distinct

Copies already written (same name, newer than the source) are kept. The copies are named
``<source stem>-cam<index>.mp4``; pass them to ``--source`` (request modes) or ``--file`` (``--streams``, as
names under the server's allowed roots), one per camera.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

#: Side of one square of the mark, pixels (the vision tower's patches are 14 px, 28 px after merging).
SQUARE_PX = 16
#: Bits of the camera index in the mark (cameras 0 .. 2**BITS - 1).
BITS = 16
#: x264 settings of the copies: those of the load tester's re-encoded windows (loadtest/camera.py).
X264 = {"preset": "veryfast", "crf": "23"}


def mark(rgb: np.ndarray, camera: int) -> np.ndarray:
    """``rgb`` (H, W, 3) uint8 with camera ``camera``'s mark in its top-left corner (a copy).

    Square ``b`` (of :data:`BITS`, each :data:`SQUARE_PX` wide, left to right) is white when bit ``b`` of
    ``camera`` is set and black otherwise; squares beyond the frame's width are left out.

    Raises:
        ValueError: ``camera`` is outside ``0 .. 2**BITS - 1``.
    """
    if not 0 <= camera < 2**BITS:
        raise ValueError(f"camera index {camera} is outside 0..{2**BITS - 1}")
    out = rgb.copy()
    h = min(SQUARE_PX, out.shape[0])
    for b in range(BITS):
        x0 = b * SQUARE_PX
        if x0 >= out.shape[1]:
            break
        out[:h, x0 : x0 + SQUARE_PX] = 255 if camera >> b & 1 else 0
    return out


def copy_path(src: Path, out_dir: Path, camera: int) -> Path:
    """Where camera ``camera``'s copy of ``src`` goes."""
    return out_dir / f"{src.stem}-cam{camera:03d}.mp4"


def write_copy(src: Path, out: Path, camera: int) -> Path:
    """Writes ``src`` with camera ``camera``'s mark on every frame to ``out`` (H.264 in MP4, the source's frame
    rate, a keyframe every 2 s; audio dropped). Returns ``out``.

    Raises:
        av.error.FFmpegError: the source cannot be decoded.
        ValueError: the source has no video stream.
    """
    with av.open(str(src)) as inp:
        if not inp.streams.video:
            raise ValueError("the source has no video stream")
        vin = inp.streams.video[0]
        rate = Fraction(vin.average_rate or 25).limit_denominator(1001)
        tmp = out.with_suffix(".part.mp4")
        with av.open(str(tmp), "w") as dst:
            vout = dst.add_stream("libx264", rate=rate, options=dict(X264))
            vout.width, vout.height, vout.pix_fmt = vin.width, vin.height, "yuv420p"
            vout.codec_context.gop_size = max(1, round(2 * float(rate)))
            for i, frame in enumerate(inp.decode(vin)):
                f = av.VideoFrame.from_ndarray(mark(frame.to_ndarray(format="rgb24"), camera), format="rgb24")
                f.pts, f.time_base = i, 1 / rate
                dst.mux(vout.encode(f))
            dst.mux(vout.encode(None))
        tmp.replace(out)
    return out


def write_copies(src: Path, cameras: int, out_dir: Path, *, first: int = 0, workers: int | None = None) -> list[Path]:
    """Copies of ``src`` for cameras ``first .. first + cameras - 1`` in ``out_dir`` (made if missing), written in
    ``workers`` processes (default: the CPU count); copies newer than ``src`` are kept as they are.

    Raises:
        av.error.FFmpegError / ValueError: as :func:`write_copy`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = [(copy_path(src, out_dir, c), c) for c in range(first, first + cameras)]
    todo = [(p, c) for p, c in wanted if not (p.exists() and p.stat().st_mtime >= src.stat().st_mtime)]
    if todo:
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
            list(pool.map(write_copy, [src] * len(todo), [p for p, _ in todo], [c for _, c in todo]))
    return [p for p, _ in wanted]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.distinct", description=__doc__.split("\n")[0])
    ap.add_argument("source", type=Path, help="the clip to copy")
    ap.add_argument("--cameras", type=int, required=True, help="how many copies")
    ap.add_argument("--first", type=int, default=0, help="index of the first camera (its mark)")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=None, help="processes (default: the CPU count)")
    a = ap.parse_args(argv)
    for p in write_copies(a.source, a.cameras, a.out_dir, first=a.first, workers=a.workers):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
