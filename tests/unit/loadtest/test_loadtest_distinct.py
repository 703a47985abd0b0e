"""Different scenes per camera (loadtest/distinct.py): copies of one clip that differ only in a corner mark."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from loadtest.distinct import BITS, SQUARE_PX, copy_path, mark, write_copies


def _clip(path: Path, frames: int = 20, fps: int = 10, size: tuple[int, int] = (320, 96)) -> Path:
    """A small moving gradient, H.264 in MP4."""
    w, h = size
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for i in range(frames):
            x = (np.arange(w)[None, :, None] * 0.7 + i * 6 + np.arange(h)[:, None, None]) % 256
            rgb = np.broadcast_to(x, (h, w, 3)).astype(np.uint8)
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            f.pts, f.time_base = i, Fraction(1, fps)
            c.mux(s.encode(f))
        c.mux(s.encode(None))
    return path


def _frames(path: Path) -> tuple[list[np.ndarray], float]:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return [f.to_ndarray(format="rgb24") for f in c.decode(s)], float(s.average_rate or 0)


def _read_mark(rgb: np.ndarray) -> int:
    inner = slice(4, SQUARE_PX - 4)  # the square's middle: away from compression at its edges
    bits = [rgb[inner, b * SQUARE_PX + 4 : (b + 1) * SQUARE_PX - 4].mean() > 128 for b in range(BITS)]
    return sum(1 << b for b, on in enumerate(bits) if on)


def test_the_mark_encodes_the_camera_index_and_leaves_the_rest():
    rgb = np.full((40, 300, 3), 77, np.uint8)
    out = mark(rgb, 0b1010_0000_0000_0101)
    assert _read_mark(out) == 0b1010_0000_0000_0101
    assert (out[SQUARE_PX:] == 77).all() and (out[:, BITS * SQUARE_PX :] == 77).all()
    assert (rgb == 77).all()  # the input is not changed
    with pytest.raises(ValueError, match=r"outside 0\.\.65535"):
        mark(rgb, 2**BITS)


def test_copies_keep_the_clip_and_differ_only_in_their_marks(tmp_path):
    src = _clip(tmp_path / "scene.mp4")
    paths = write_copies(src, 3, tmp_path / "distinct", first=5, workers=2)
    assert paths == [copy_path(src, tmp_path / "distinct", c) for c in (5, 6, 7)]
    ref, fps = _frames(src)
    for cam, p in zip((5, 6, 7), paths, strict=True):
        frames, copy_fps = _frames(p)
        assert len(frames) == len(ref) and copy_fps == fps
        assert {_read_mark(f) for f in frames} == {cam}
        below = [np.abs(f[SQUARE_PX + 8 :].astype(int) - r[SQUARE_PX + 8 :].astype(int)).mean()
                 for f, r in zip(frames, ref, strict=True)]
        assert max(below) < 4  # the scene itself: only re-encoding noise
    first = [_frames(p)[0][0][:SQUARE_PX] for p in paths]
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[1], first[2])


def test_copies_already_written_are_kept(tmp_path):
    src = _clip(tmp_path / "scene.mp4", frames=5)
    (p,) = write_copies(src, 1, tmp_path / "d", workers=1)
    before = p.stat().st_mtime_ns
    assert write_copies(src, 1, tmp_path / "d", workers=1) == [p]
    assert p.stat().st_mtime_ns == before
