"""First-version decoder behaviour on a real clip and on bad input."""

import numpy as np
import pytest

from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.clip import decode_clip
from serve_app.errors import PayloadTooLargeError, UnprocessableClipError, UnsupportedMediaError
from serve_app.protocol import FrameSampling

DEC, LIM = DecodeConfig(), LimitsConfig()


def on_grid(ts, fps=4.0, start=0.0):
    return np.max(np.abs(ts - (start + np.round((ts - start) * fps) / fps))) <= 0.125


def test_real_clip_window_is_the_reference_workload(data_dir):
    clip = decode_clip(data_dir / "intel_car-detection.mp4", FrameSampling(4, 128, 10, 20), DEC, LIM)
    assert clip.frames.shape == (40, 420, 756, 3) and clip.frames.dtype == np.uint8
    assert clip.fps == 4 and clip.padded_frames == 0
    assert np.all(np.diff(clip.timestamps_s) > 0)
    assert clip.timestamps_s[0] >= 10 and clip.timestamps_s[-1] < 20
    assert on_grid(clip.timestamps_s, start=10.0)
    assert clip.frames.std() > 10  # real picture content, not a blank buffer


def test_whole_clip_from_bytes_is_even_and_on_grid(data_dir):
    data = (data_dir / "intel_car-detection.mp4").read_bytes()
    clip = decode_clip(data, FrameSampling(4, 128), DEC, LIM)
    n_real = len(clip.timestamps_s)
    assert n_real == 121  # 30.16 s -> targets 0 .. 30.0 s
    assert clip.num_frames == 122 and clip.padded_frames == 1
    assert np.array_equal(clip.frames[-1], clip.frames[-2])
    assert on_grid(clip.timestamps_s)
    assert clip.timestamps_s[-1] <= clip.duration_s


def test_empty_upload_is_422():
    with pytest.raises(UnprocessableClipError, match="empty"):
        decode_clip(b"", FrameSampling(4, 128), DEC, LIM)


def test_random_bytes_are_415():
    rng = np.random.default_rng(0)
    with pytest.raises(UnsupportedMediaError):
        decode_clip(rng.bytes(50_000), FrameSampling(4, 128), DEC, LIM)


def test_source_size_limit_is_413(data_dir):
    small = LimitsConfig(max_source_width=640, max_source_height=360)
    with pytest.raises(PayloadTooLargeError, match="640x360"):
        decode_clip(data_dir / "intel_car-detection.mp4", FrameSampling(4, 128), DEC, small)


def test_clip_duration_limit_is_413(data_dir):
    short = LimitsConfig(max_clip_duration_s=10)
    with pytest.raises(PayloadTooLargeError, match="10 s"):
        decode_clip(data_dir / "intel_car-detection.mp4", FrameSampling(4, 128), DEC, short)


def test_qwen3_vl_geometry_sizes_the_reference_window_as_the_recipe_processor_would(data_dir):
    """The decode tier takes the family's geometry as values (no model code): with Qwen3-VL's 32-px factor
    and Cosmos-Reason2's budget (t·h·w ≤ 8192·32²), the 10-s window at 4 fps has the size transformers'
    Qwen3-VL video processor gives the same 40 frames under the recipe's ``size`` (so plain vLLM with that
    size and the graph see the same pixels' geometry)."""
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

    from serve_app.config import AppConfig
    from serve_app.protocol import FrameGeometry

    config = AppConfig.model_validate({"model": {"family": "qwen3_vl", "backend": "transformers"}})
    request = FrameSampling(4, 128, 10, 20, geometry=config.model.geometry)
    assert request.geometry == FrameGeometry(32, 2)
    clip = decode_clip(data_dir / "intel_car-detection.mp4", request, config.decode, LIM)
    t, h, w, _ = clip.frames.shape
    assert t == 40 and h % 32 == 0 and w % 32 == 0
    src_h, src_w = clip.source_height, clip.source_width
    assert (h, w) == smart_resize(40, src_h, src_w, factor=32, min_pixels=256 * 32 * 32, max_pixels=8192 * 32 * 32)
    assert t * h * w <= 8192 * 32 * 32
