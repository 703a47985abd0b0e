"""Pixel formats, rotation, tiny/extreme and 4K frames: what comes out is upright RGB24 at a valid size."""

import shutil
import tracemalloc

import numpy as np
import pytest
from clipgen import ffmpeg_frame, write_video

from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.clip import decode_clip
from serve_app.errors import UnprocessableClipError
from serve_app.protocol import FrameSampling

DEC, LIM = DecodeConfig(), LimitsConfig()
COLOR = (200, 60, 30)


def sample(src, **kw):
    return decode_clip(src, FrameSampling(4, 128, **kw), DEC, LIM)


def solid(i, w, h):
    return np.broadcast_to(np.array(COLOR, np.uint8), (h, w, 3)).copy()


def solid_rgba(i, w, h):
    img = np.empty((h, w, 4), np.uint8)
    img[..., :3] = COLOR
    img[..., 3] = 255
    return img


@pytest.mark.parametrize(
    "codec,pix_fmt,ext,content,input_format",
    [
        ("mjpeg", "yuvj420p", "avi", solid, "rgb24"),  # full-range JPEG YUV (dashcams, webcams)
        ("libx264", "yuv420p10le", "mp4", solid, "rgb24"),  # 10-bit H.264
        ("ffv1", "yuva420p", "mkv", solid_rgba, "rgba"),  # YUV with alpha
        ("png", "rgba", "mov", solid_rgba, "rgba"),  # RGB with alpha
    ],
)
def test_colour_pixel_formats_come_out_as_rgb24(tmp_path, codec, pix_fmt, ext, content, input_format):
    path = tmp_path / f"clip.{ext}"
    write_video(path, codec=codec, pix_fmt=pix_fmt, frames=8, fps=8, content=content, input_format=input_format)
    clip = sample(path)
    assert clip.frames.dtype == np.uint8 and clip.frames.shape[-1] == 3
    mean = clip.frames.reshape(-1, 3).mean(axis=0)
    assert np.all(np.abs(mean - COLOR) < 6), mean


def test_gray_comes_out_as_equal_rgb_channels(tmp_path):
    path = tmp_path / "gray.mkv"
    write_video(path, codec="ffv1", pix_fmt="gray", frames=8, fps=8, content=solid)
    clip = sample(path)
    r, g, b = (clip.frames[..., c].astype(int) for c in range(3))
    assert np.array_equal(r, g) and np.array_equal(g, b)
    luma = 0.299 * COLOR[0] + 0.587 * COLOR[1] + 0.114 * COLOR[2]  # BT.601 luma of the source colour
    assert abs(r.mean() - luma) < 4


def marker(i, w, h):
    """Dark frame with a bright block in the top-left corner (shows orientation)."""
    img = np.full((h, w, 3), 40, np.uint8)
    img[: h // 3, : w // 4] = (250, 250, 250)
    img[h // 2 :, w // 2 :] = (30, 120, 220)
    return img


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs Debian's ffmpeg (.ci/run installs it)")
@pytest.mark.parametrize("rotate_cw", [90, 180, 270])
def test_rotated_clips_come_out_upright_like_ffmpeg_shows_them(tmp_path, rotate_cw):
    path = tmp_path / f"rot{rotate_cw}.mp4"
    # A phone's rotate=90 tag is a display matrix of -90 degrees counter-clockwise.
    write_video(path, size=(320, 240), frames=8, fps=8, content=marker, rotation_ccw=-rotate_cw)
    clip = sample(path)
    assert clip.rotation_deg == rotate_cw
    h, w = clip.frames.shape[1:3]
    if rotate_cw in (90, 270):
        # The pixel budget is applied to the displayed (portrait) size.
        assert (clip.source_width, clip.source_height) == (240, 320) and h > w
    else:
        assert (clip.source_width, clip.source_height) == (320, 240) and w > h
    reference = ffmpeg_frame(path, w, h)
    diff = np.abs(clip.frames[0].astype(int) - reference.astype(int)).mean()
    assert diff < 3, f"differs from ffmpeg's auto-rotated decode by {diff:.1f} per channel"


@pytest.mark.parametrize("size,expected", [((16, 16), (336, 336)), ((640, 20), (56, 1792))])
def test_tiny_frames_are_resized_to_valid_sizes(tmp_path, size, expected):
    path = tmp_path / "tiny.mp4"
    write_video(path, size=size, frames=8, fps=8)
    clip = sample(path)
    h, w = clip.frames.shape[1:3]
    assert (h, w) == expected
    assert h % 28 == 0 and w % 28 == 0 and min(h, w) >= 28 and max(h, w) / min(h, w) <= 200


def test_an_extreme_aspect_ratio_is_422_naming_the_limit(tmp_path):
    path = tmp_path / "strip.mp4"
    write_video(path, size=(4000, 16), frames=4, fps=8)
    with pytest.raises(UnprocessableClipError, match="200:1") as e:
        sample(path)
    assert e.value.param == "video" and "4000x16" in e.value.message


def test_4k_frames_are_resized_while_decoding(data_dir):
    path = data_dir / "dashcam_4k_1s.mp4"
    sample(path)  # warm-up: one-time allocations of the libraries
    tracemalloc.start()
    try:
        clip = sample(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (clip.source_width, clip.source_height) == (3840, 2160)
    h, w = clip.frames.shape[1:3]
    assert h * w <= DEC.budget.max_frame_pixels
    one_4k_rgb = 3840 * 2160 * 3
    # Python/NumPy memory: the output array plus small change, never a full-size frame (let alone float32).
    assert peak < clip.frames.nbytes + 4_000_000 and peak < one_4k_rgb, peak
