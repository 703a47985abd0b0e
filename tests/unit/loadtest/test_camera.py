"""Windows cut once, up front: stream copy from the keyframe before the window, or re-encode."""

import numpy as np
import pytest

from loadtest.camera import WindowCutError, cut_windows, source_windows
from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.clip import decode_clip
from serve_app.protocol import FrameSampling


@pytest.fixture(scope="module")
def clip(data_dir):
    return str(data_dir / "intel_car-detection.mp4")  # 30.16 s, keyframes every 4.8 s


def decode(source, start, end, fps=4.0):
    return decode_clip(source, FrameSampling(fps, 128, start, end), DecodeConfig(), LimitsConfig())


def test_ten_second_windows_are_remuxed_from_the_keyframe_before_them(clip):
    windows = cut_windows(clip, 10.0)
    assert [w.method for w in windows] == ["remux"] * 3  # 30.16 s → 3 whole windows, tail dropped
    assert [(w.source_start_s, w.source_end_s) for w in windows] == [(0, 10), (10, 20), (20, 30)]
    # keyframes at 0, 9.6, 19.2 s: pre-roll 0, 0.4, 0.8 s before start_s
    assert [w.start_s for w in windows] == pytest.approx([0.0, 0.4, 0.8])
    assert [w.end_s - w.start_s for w in windows] == pytest.approx([10.0] * 3)
    assert all(0 < w.size_bytes < 1_500_000 for w in windows)


def test_a_remuxed_window_decodes_to_the_same_frames_as_the_source_window(clip):
    w = cut_windows(clip, 10.0)[1]
    cut = decode(w.data, w.start_s, w.end_s)
    ref = decode(clip, 10.0, 20.0)
    assert cut.num_frames == ref.num_frames == 40
    np.testing.assert_allclose(cut.timestamps_s - w.start_s, ref.timestamps_s - 10.0, atol=1e-6)
    assert np.array_equal(cut.frames, ref.frames)  # stream copy: bit-identical pictures


def test_windows_far_from_a_keyframe_are_reencoded(clip):
    windows = cut_windows(clip, 3.0, max_preroll_s=0.0)
    methods = [w.method for w in windows]
    assert methods[0] == "remux" and "reencode" in methods  # keyframes only at multiples of 4.8 s
    w = windows[1]  # [3, 6) s: cars move, so a wrong cut would show
    assert w.method == "reencode" and (w.start_s, w.end_s) == (0.0, 3.0)
    cut = decode(w.data, w.start_s, w.end_s)
    ref = decode(clip, 3.0, 6.0)
    assert cut.num_frames == ref.num_frames == 12
    assert cut.timestamps_s[0] == pytest.approx(0.0, abs=0.05)

    def mean_diff(a, b):
        return np.abs(a.frames.astype(np.int16) - b.frames.astype(np.int16)).mean()

    assert mean_diff(cut, ref) < 4  # lossy, but the same pictures
    assert mean_diff(cut, decode(clip, 4.0, 7.0)) > 10  # one second off is clearly different


def test_a_clip_shorter_than_one_window_is_refused(clip):
    with pytest.raises(WindowCutError, match="shorter than one 40-s window"):
        cut_windows(clip, 40.0)
    with pytest.raises(WindowCutError, match="window length must be > 0"):
        cut_windows(clip, 0.0)


def test_an_unreadable_source_is_a_clear_error(tmp_path):
    bad = tmp_path / "notes.mp4"
    bad.write_text("not a video")
    with pytest.raises(WindowCutError, match="cannot open"):
        cut_windows(str(bad), 5.0)


def test_url_cameras_name_the_window_instead_of_carrying_bytes():
    ws = source_windows("rtsp://cam.example/stream1", 10.0, duration_s=25.0)
    assert [(w.start_s, w.end_s, w.method, w.data) for w in ws] == [(0.0, 10.0, "url", None), (10.0, 20.0, "url", None)]


def test_path_transport_sends_source_times(clip):
    ws = source_windows(clip, 10.0, transport="path")
    assert [(w.start_s, w.end_s, w.data) for w in ws] == [(0.0, 10.0, None), (10.0, 20.0, None), (20.0, 30.0, None)]
    with pytest.raises(ValueError, match="unknown transport"):
        source_windows(clip, 10.0, transport="carrier-pigeon")
