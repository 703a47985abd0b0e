"""Real camera files (tests/data, see ATTRIBUTION.md): B-frames, packed B-frames, HEVC, VP9, truncation.

Also checks the speed tricks change nothing: frames the decoder skips are
never ones a kept frame depends on, so kept frames are bit-identical to a
full decode.
"""

import av
import numpy as np
import pytest

from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.bitstream import ReferenceParser
from serve_app.decode.clip import decode_clip
from serve_app.decode.frames import FrameStore
from serve_app.protocol import FrameSampling

DEC, LIM = DecodeConfig(), LimitsConfig()


def sample(src, max_frames=512, **kw):
    return decode_clip(src, FrameSampling(4, max_frames, **kw), DEC, LIM)


def assert_on_grid(ts, start=0.0, fps=4.0, tol=0.125):
    ts = np.asarray(ts)
    assert np.all(np.diff(ts) > 0), "timestamps must strictly increase"
    assert np.max(np.abs(ts - (start + np.round((ts - start) * fps) / fps))) <= tol + 1e-9


@pytest.mark.parametrize(
    "name,n_real,last_frame_s",
    [
        ("vtest_h264_bframes.mp4", 120, 29.9),  # 3 B-frames, index at the front
        ("intel_bottle-detection.mp4", 160, 39.85),  # B-frames, index at the end
        ("bgslibrary_video02_highway_cctv.avi", 120, 748 / 25),  # packed B-frames, 750 claimed, 748 decode
        ("person_hevc.mp4", 80, 19.9),  # HEVC hvc1
        ("dashcam_vp9.webm", 36, 8.8),  # VP9, no frame count: length found by reading
        ("dashcam_0p4s.mp4", 2, 0.36),  # 10 frames
    ],
)
def test_real_clips_sample_on_the_grid(data_dir, name, n_real, last_frame_s):
    clip = sample(data_dir / name)
    assert len(clip.timestamps_s) == n_real
    assert clip.num_frames == n_real + n_real % 2
    assert_on_grid(clip.timestamps_s)
    assert clip.timestamps_s[-1] <= last_frame_s + 1e-6  # never past the last decoded frame
    assert clip.warnings == ()
    assert clip.frames.std() > 10  # real picture content


def test_truncated_faststart_file_keeps_20_seconds_and_says_where_it_stopped(data_dir):
    data = (data_dir / "vtest_h264_bframes.mp4").read_bytes()
    cut = data[: int(len(data) * 0.7)]  # = the shared collection's vtest_h264_truncated70_faststart.mp4
    with av.open(__import__("io").BytesIO(cut)) as c:
        assert c.streams.video[0].frames == 300  # the header still claims all 300 frames
    clip = sample(cut)
    assert 19.0 <= clip.timestamps_s[-1] <= 20.1
    assert 76 <= len(clip.timestamps_s) <= 81
    assert_on_grid(clip.timestamps_s)
    assert any("stopped at" in w or "cut off" in w for w in clip.warnings), clip.warnings
    assert any("30.00 s" in w for w in clip.warnings)


def _reference_frames(path, timestamps_s, capacity):
    """The same picks from a plain full decode (every frame decoded), converted the same way."""
    store = FrameStore(capacity, DEC.budget, DEC.interpolation)
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        s.codec_context.thread_count = 1
        frames = {}
        t0 = None
        for f in c.decode(s):
            frames[f.pts] = f
        t0 = min(frames)
        by_time = {round(float((p - t0) * s.time_base), 6): f for p, f in frames.items()}
        for t in timestamps_s:
            store.add(by_time[round(float(t), 6)], t)
    return store.finish()[0]


@pytest.mark.parametrize(
    "name,total",
    [("vtest_h264_bframes.mp4", 300), ("person_hevc.mp4", 200), ("dashcam_4k_1s.mp4", 27), ("dashcam_vp9.webm", 221)],
)
def test_skipping_unkept_pictures_changes_no_kept_pixel(data_dir, name, total):
    path = data_dir / name
    clip = sample(path)
    assert clip.decoded_frames < total  # something was skipped
    expected = _reference_frames(path, clip.timestamps_s, len(clip.timestamps_s))
    assert np.array_equal(clip.frames, expected)


@pytest.mark.parametrize("name", ["vtest_h264_bframes.mp4", "intel_bottle-detection.mp4", "person_hevc.mp4"])
def test_reference_flags_agree_with_ffmpeg(data_dir, name):
    """Pictures the NAL header calls non-reference are exactly those FFmpeg's skip_frame=NONREF drops."""
    with av.open(str(data_dir / name)) as c:
        s = c.streams.video[0]
        parser = ReferenceParser.for_stream(s.codec_context.name, s.codec_context.extradata)
        assert parser is not None
        refs = {p.pts: parser.is_reference(p) for p in c.demux(s) if p.size}
    with av.open(str(data_dir / name)) as c:
        s = c.streams.video[0]
        s.codec_context.skip_frame = "NONREF"
        kept = {f.pts for f in c.decode(s)}
    assert None not in refs.values()
    assert {p for p, r in refs.items() if r} == kept
    assert 0 < len(kept) < len(refs)


@pytest.mark.parametrize("name", ["vtest_h264_bframes.mp4", "intel_bottle-detection.mp4"])
def test_p_pictures_predict_from_b_references_so_those_are_decoded(data_dir, name):
    """Why the decoder (and the decode bench's exact bound) keeps B *reference* pictures:
    skipping every B picture changes the pixels of most I/P pictures of these x264 clips."""
    from benchmarks.decode_bounds import ip_pictures_changed_without_b

    result = ip_pictures_changed_without_b((data_dir / name).read_bytes())
    assert result["of"] > 0 and result["changed"] > result["of"] // 2, result


def test_no_parser_for_annex_b_or_other_codecs():
    assert ReferenceParser.for_stream("h264", b"\x00\x00\x00\x01\x67") is None
    assert ReferenceParser.for_stream("vp9", b"") is None
    # hvcC with two temporal sub-layers: _N pictures may be referenced by the higher layer.
    hvcc = bytearray(23)
    hvcc[0], hvcc[21] = 1, (2 << 3) | 3
    assert ReferenceParser.for_stream("hevc", bytes(hvcc)) is None
    hvcc[21] = (1 << 3) | 3
    assert ReferenceParser.for_stream("hevc", bytes(hvcc)).length_size == 4


def test_reference_parser_reads_length_prefixed_nal_units():
    p = ReferenceParser("h264", 4)
    sei = b"\x00\x00\x00\x03\x06\x05\x00"
    assert p.is_reference(sei + b"\x00\x00\x00\x02\x01\xaa") is False  # nal_ref_idc 0, non-IDR slice
    assert p.is_reference(sei + b"\x00\x00\x00\x02\x41\xaa") is True  # nal_ref_idc 2
    assert p.is_reference(sei + b"\x00\x00\x00\x02\x65\xaa") is True  # IDR
    assert p.is_reference(sei) is None  # no slice
    assert p.is_reference(b"\x00\x00\x01\x00\x41") is None  # length past the end: malformed


def _remux(src, dst, fmt):
    """Stream-copies the video of ``src`` into container ``fmt`` (Annex-B for MPEG-TS and raw H.264)."""
    with av.open(str(src)) as inp, av.open(str(dst), "w", format=fmt) as out:
        s_in = inp.streams.video[0]
        s_out = out.add_stream_from_template(s_in)
        for packet in inp.demux(s_in):
            if packet.dts is None:
                continue
            packet.stream = s_out
            out.mux(packet)


@pytest.mark.parametrize("fmt,ext", [("mpegts", "ts"), ("h264", "h264"), ("matroska", "mkv")])
def test_other_containers_of_the_same_stream_sample_the_same_grid(data_dir, tmp_path, fmt, ext):
    # MPEG-TS: timestamps but Annex-B packets (no reference flags: FFmpeg skips per packet);
    # raw H.264: no timestamps at all (timed by index at the bitstream's 10 fps, not FFmpeg's 25-fps guess).
    path = tmp_path / f"vtest.{ext}"
    _remux(data_dir / "vtest_h264_bframes.mp4", path, fmt)
    clip = sample(path)
    assert len(clip.timestamps_s) == 120 and clip.timestamps_s[-1] <= 29.9 + 1e-6
    assert_on_grid(clip.timestamps_s)
    assert clip.warnings == ()
