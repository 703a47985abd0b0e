"""Cases from the field, built by fixtures: timing quirks, windows, short and broken clips.

The generated clips write each frame's index into its picture
(tests/clipgen.py), so the tests check that the frame kept for a timestamp is
the frame shown at that time, not only that the timestamps look right.
"""

import functools
from fractions import Fraction

import numpy as np
import pytest
from clipgen import NonSeekable, coded_frame, read_code, write_video

from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.clip import decode_clip
from serve_app.errors import PayloadTooLargeError, UnprocessableClipError
from serve_app.protocol import FrameSampling

DEC, LIM = DecodeConfig(), LimitsConfig()
VFR_TIMES = list(np.arange(150) / 30) + list(5 + np.arange(25) * 0.2)  # 30 fps for 5 s, then 5 fps


def sample(src, fps=4.0, max_frames=128, start_s=None, end_s=None, limits=LIM):
    return decode_clip(src, FrameSampling(fps, max_frames, start_s, end_s), DEC, limits)


def assert_on_grid(ts, start=0.0, fps=4.0, tol=0.125):
    ts = np.asarray(ts)
    assert np.all(np.diff(ts) > 0), "timestamps must strictly increase"
    k = np.round((ts - start) * fps)
    assert np.max(np.abs(ts - (start + k / fps))) <= tol + 1e-9


def assert_frames_match_times(clip, frame_times):
    """Each kept frame's pixels carry the index of the source frame shown at its timestamp (to the ms)."""
    for img, t in zip(clip.frames, clip.timestamps_s, strict=True):
        shown = read_code(img)
        assert abs(frame_times[shown] - t) < 0.0015, f"frame for {t:.3f} s shows source frame {shown}"


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("field")
    @functools.cache  # the same 300 pictures for "normal" and "faststart": made once
    def noisy(i, w, h):  # hard to compress: bytes spread evenly over the clip
        return coded_frame(i, w, h) // 2 + np.random.default_rng(i).integers(0, 100, (h, w, 3), np.uint8)

    paths = {
        "vfr": d / "vfr.mp4",
        "audio_longer": d / "audio_longer.mp4",
        "odd_avi": d / "odd_rate.avi",
        "normal": d / "normal.mp4",
        "faststart": d / "faststart.mp4",
        "short_1p25": d / "short_1p25.mp4",
        "short_0p2": d / "short_0p2.mp4",
        "one_frame": d / "one_frame.mp4",
        "long": d / "long.mp4",
    }
    write_video(paths["vfr"], times_s=VFR_TIMES, time_base=Fraction(1, 90000))
    write_video(paths["audio_longer"], frames=300, fps=30, audio_s=14.4)
    write_video(paths["odd_avi"], codec="mjpeg", pix_fmt="yuvj420p", fps=Fraction(214748359, 3579125), frames=600)
    write_video(paths["normal"], frames=300, content=noisy)
    write_video(paths["faststart"], frames=300, content=noisy, container_options={"movflags": "faststart"})
    write_video(paths["short_1p25"], frames=30, fps=24)
    write_video(paths["short_0p2"], frames=5, fps=25)
    write_video(paths["one_frame"], frames=1)
    write_video(paths["long"], frames=600, fps=10, size=(160, 120))  # 60 s
    pipe = NonSeekable()
    write_video(pipe, codec="libvpx", fmt="webm", frames=300, fps=30)
    return {**paths, "webm_pipe": bytes(pipe.data)}


def test_variable_frame_rate_is_sampled_by_timestamp(clips):
    clip = sample(clips["vfr"])
    assert len(clip.timestamps_s) == 40 and clip.num_frames == 40
    assert_on_grid(clip.timestamps_s)
    # Index-based sampling would put 32 of 38 frames in the first half.
    assert sum(t < 5 for t in clip.timestamps_s) == 20
    assert_frames_match_times(clip, VFR_TIMES)


def test_webm_written_to_a_pipe_has_no_duration_and_still_gives_40_frames(clips):
    import io

    import av

    with av.open(io.BytesIO(clips["webm_pipe"])) as c:
        assert c.duration is None and c.streams.video[0].frames == 0  # really nothing in the header
    clip = sample(clips["webm_pipe"])
    assert len(clip.timestamps_s) == 40
    assert_on_grid(clip.timestamps_s)
    assert_frames_match_times(clip, [i / 30 for i in range(300)])


def test_audio_longer_than_video_never_samples_past_the_video(clips):
    clip = sample(clips["audio_longer"])
    assert len(clip.timestamps_s) == 40
    assert clip.timestamps_s[-1] < 10.0 and clip.duration_s == pytest.approx(10.0, abs=0.05)
    assert_on_grid(clip.timestamps_s)


def test_avi_with_an_odd_60fps_rate_is_timed_by_frame_index(clips):
    import av

    with av.open(str(clips["odd_avi"])) as c:
        assert c.streams.video[0].average_rate == Fraction(214748359, 3579125)
    clip = sample(clips["odd_avi"])
    assert len(clip.timestamps_s) == 40
    assert_on_grid(clip.timestamps_s, tol=0.02)
    rate = 214748359 / 3579125
    assert_frames_match_times(clip, [i / rate for i in range(600)])


@pytest.mark.parametrize("name,frames,real", [("short_1p25", 6, 5), ("short_0p2", 2, 1), ("one_frame", 2, 1)])
def test_short_clips_give_an_even_frame_count(clips, name, frames, real):
    clip = sample(clips[name])
    assert clip.num_frames == frames and len(clip.timestamps_s) == real
    assert clip.padded_frames == frames - real
    assert np.array_equal(clip.frames[-1], clip.frames[real - 1])


def test_window_options_select_the_right_seconds(clips):
    clip = sample(clips["long"], start_s=20, end_s=30)
    assert len(clip.timestamps_s) == 40
    assert clip.timestamps_s[0] == pytest.approx(20.0) and clip.timestamps_s[-1] < 30
    assert_on_grid(clip.timestamps_s, start=20.0)
    assert_frames_match_times(clip, [i / 10 for i in range(600)])


def test_a_long_clip_lowers_the_rate_evenly_and_reports_the_effective_fps(clips):
    clip = sample(clips["long"], max_frames=64)
    assert clip.num_frames == 64
    assert clip.fps == pytest.approx(64 / 60.0)
    assert_on_grid(clip.timestamps_s, fps=clip.fps, tol=0.5 / clip.fps)
    steps = np.diff(clip.timestamps_s)
    assert steps.max() - steps.min() <= 0.1 + 1e-9  # even spacing, to the source's 0.1-s frame period


def test_first_half_of_an_mp4_with_the_index_at_the_end_is_422(clips):
    data = clips["normal"].read_bytes()
    assert data.find(b"moov") > len(data) // 2  # the index really is at the end
    with pytest.raises(UnprocessableClipError, match="truncated or damaged") as e:
        sample(data[: len(data) // 2])
    assert e.value.param == "video" and "moov" in e.value.message


def test_first_half_of_a_faststart_mp4_keeps_the_frames_before_the_break(clips):
    data = clips["faststart"].read_bytes()
    clip = sample(data[: len(data) // 2])
    n = len(clip.timestamps_s)
    assert 12 <= n <= 24  # the break lies near the middle of the 10-s clip
    assert clip.timestamps_s[-1] < 6.0
    assert_on_grid(clip.timestamps_s)
    assert clip.warnings and "10.00 s" in clip.warnings[0]
    assert_frames_match_times(clip, [i / 30 for i in range(300)])


def test_damage_in_the_middle_keeps_frames_on_both_sides_and_says_where(data_dir):
    data = bytearray((data_dir / "intel_car-detection.mp4").read_bytes())
    mid = len(data) // 2
    data[mid : mid + 65536] = np.random.default_rng(1).bytes(65536)
    clip = sample(bytes(data))
    assert any("damaged data at" in w for w in clip.warnings), clip.warnings
    assert clip.timestamps_s[0] == 0.0 and clip.timestamps_s[-1] > 25  # decoding resumed after the damage
    assert_on_grid(clip.timestamps_s)


def test_a_break_before_two_frames_is_422(clips):
    data = clips["faststart"].read_bytes()
    head = data.find(b"mdat") + 3000  # the index and a sliver of the first frame
    with pytest.raises(UnprocessableClipError):
        sample(data[:head])


def test_clip_without_a_header_duration_is_measured_against_the_limit(clips):
    with pytest.raises(PayloadTooLargeError, match="5 s"):
        sample(clips["webm_pipe"], limits=LimitsConfig(max_clip_duration_s=5))
