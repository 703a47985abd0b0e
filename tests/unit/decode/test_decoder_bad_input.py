"""Bad input: each kind gets its own 4xx with a message naming what was wrong, and decoding goes on."""

import numpy as np
import pytest
from clipgen import write_audio_only, write_video

from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.clip import decode_clip
from serve_app.errors import (
    NotFoundError,
    PayloadTooLargeError,
    ServeAppError,
    UnprocessableClipError,
    UnsupportedMediaError,
    UpstreamTimeoutError,
)
from serve_app.protocol import FrameSampling

DEC, LIM = DecodeConfig(), LimitsConfig()
REQ = FrameSampling(4, 128)


@pytest.fixture(scope="module")
def bad(tmp_path_factory, data_dir):
    d = tmp_path_factory.mktemp("bad")
    write_audio_only(d / "audio.m4a")
    write_video(d / "mjpeg.avi", codec="mjpeg", pix_fmt="yuvj420p", frames=4, fps=4)
    unknown = (d / "mjpeg.avi").read_bytes().replace(b"MJPG", b"QZQZ")  # a FourCC no decoder knows
    (d / "unknown_codec.avi").write_bytes(unknown)
    write_video(d / "wide.avi", codec="mpeg4", size=(7700, 64), frames=2, fps=4)
    (d / "notes.txt").write_text("hello\n" * 200)  # FFmpeg would open this as 'tty' (ANSI art)
    (d / "empty.mp4").write_bytes(b"")
    bottle = (data_dir / "intel_bottle-detection.mp4").read_bytes()
    return {
        "empty bytes": (b"", UnprocessableClipError, "empty"),
        "empty file": (d / "empty.mp4", UnprocessableClipError, "empty"),
        "random bytes": (np.random.default_rng(0).bytes(50_000), UnsupportedMediaError, "not a readable video"),
        # FFmpeg would open it as 'tty'; the demuxer allowlist refuses it before it runs.
        "text file": (d / "notes.txt", UnsupportedMediaError, "not a readable video container"),
        "audio only": (d / "audio.m4a", UnsupportedMediaError, "no video stream"),
        "unknown codec": (d / "unknown_codec.avi", UnsupportedMediaError, "codec is not supported"),
        "huge frames": (d / "wide.avi", PayloadTooLargeError, "7700x64; the limit is 7680x4320"),
        "half of an index-at-end MP4": (bottle[: len(bottle) // 2], UnprocessableClipError, "truncated or damaged"),
        "missing file": (d / "nope.mp4", NotFoundError, "not found"),
    }


CASES = [
    "empty bytes",
    "empty file",
    "random bytes",
    "text file",
    "audio only",
    "unknown codec",
    "huge frames",
    "half of an index-at-end MP4",
    "missing file",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_gets_a_clear_4xx_and_the_next_clip_decodes(bad, data_dir, case):
    source, error, message = bad[case]
    with pytest.raises(error) as e:
        decode_clip(source, REQ, DEC, LIM)
    assert 400 <= e.value.status < 500 and e.value.param == "video"
    assert message in e.value.message
    ok = decode_clip(data_dir / "dashcam_0p4s.mp4", REQ, DEC, LIM)
    assert ok.num_frames == 2


def test_too_long_clip_is_413_naming_the_limit(data_dir):
    with pytest.raises(PayloadTooLargeError, match="the limit is 20 s"):
        decode_clip(data_dir / "vtest_h264_bframes.mp4", REQ, DEC, LimitsConfig(max_clip_duration_s=20))


def test_empty_window_is_422(data_dir):
    with pytest.raises(UnprocessableClipError, match="empty"):
        decode_clip(data_dir / "dashcam_0p4s.mp4", FrameSampling(4, 128, start_s=5.0), DEC, LIM)


def test_decode_time_limit_is_504_and_names_the_limit(data_dir):
    tight = DecodeConfig(timeout_s=0.001)
    with pytest.raises(UpstreamTimeoutError, match="limit") as e:
        decode_clip(data_dir / "intel_bottle-detection.mp4", REQ, tight, LIM)
    assert e.value.status == 504


def test_all_errors_are_serve_app_errors(bad):
    for case in CASES:
        with pytest.raises(ServeAppError):
            decode_clip(bad[case][0], REQ, DEC, LIM)
