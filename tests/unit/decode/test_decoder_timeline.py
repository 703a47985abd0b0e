"""The player's timeline and no silent loss: the handed bug cases (tests/data, see ATTRIBUTION.md)
with their right values, the timeline and gap rules as pure functions, and display geometry."""

import io

import av
import numpy as np
import pytest
from clipgen import write_video

from benchmarks import mutations
from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.clip import decode_clip
from serve_app.decode.sampling import FrameGrid
from serve_app.decode.timeline import build_timeline, find_gaps
from serve_app.errors import UnprocessableClipError
from serve_app.protocol import FrameSampling

DEC, LIM = DecodeConfig(), LimitsConfig()


def sample(src, start_s=None, end_s=None, fps=4.0):
    return decode_clip(src, FrameSampling(fps, 128, start_s, end_s), DEC, LIM)


def grey_thumbs(path, times_s):
    """Plain-decode 16×16 grey thumbnails of the frames shown at ``times_s`` (edit list applied)."""
    with av.open(str(path)) as c:
        frames = [(f.time, f.reformat(width=16, height=16, format="gray").to_ndarray().astype(float))
                  for f in c.decode(video=0)]  # fmt: skip
    t0 = frames[0][0]
    return [min(frames, key=lambda f: abs(f[0] - t0 - t))[1] for t in times_s]


def thumb(img):
    g = img.astype(float) @ [0.299, 0.587, 0.114]
    h, w = g.shape
    return g[: h - h % 16, : w - w % 16].reshape(16, h // 16, 16, w // 16).mean(axis=(1, 3))


# --------------------------------------------------------------------------- handed cases


def test_edit_list_clip_is_on_the_players_timeline(data_dir):
    path = data_dir / "editlist_starts_2s_in.mp4"
    clip = sample(path)
    assert clip.duration_s == pytest.approx(10.0)
    assert len(clip.timestamps_s) == 40
    assert clip.timestamps_s[0] == pytest.approx(0.0) and clip.timestamps_s[-1] == pytest.approx(9.75, abs=0.02)
    # The first frame is the player's first frame, not a picture the edit list discards.
    refs = grey_thumbs(path, [0.0, 9.75])
    assert np.abs(thumb(clip.frames[0]) - refs[0]).mean() < 6
    assert np.abs(thumb(clip.frames[39]) - refs[1]).mean() < 6
    assert not clip.warnings


@pytest.mark.parametrize("start,end", [(0.0, 2.0), (8.0, 10.0)])
def test_edit_list_windows_index_the_players_timeline(data_dir, start, end):
    path = data_dir / "editlist_starts_2s_in.mp4"
    clip = sample(path, start, end)
    assert len(clip.timestamps_s) == 8 and clip.timestamps_s[0] == pytest.approx(start)
    right = grey_thumbs(path, clip.timestamps_s)  # what a player shows at those times
    off = grey_thumbs(path, clip.timestamps_s + 2.0)  # what the old timeline returned
    mad_right = np.mean([np.abs(thumb(img) - r).mean() for img, r in zip(clip.frames, right, strict=True)])
    mad_off = np.mean([np.abs(thumb(img) - r).mean() for img, r in zip(clip.frames, off, strict=True)])
    assert mad_right < 8 and mad_right < mad_off / 2, (mad_right, mad_off)


@pytest.mark.parametrize("name", ["all_timestamps_equal.mkv", "all_timestamps_equal.mp4"])
def test_timestamps_that_never_advance_are_timed_by_order_with_a_warning(data_dir, name):
    clip = sample(data_dir / name)
    assert len(clip.timestamps_s) == 40 and clip.duration_s == pytest.approx(10.0)
    assert np.allclose(clip.timestamps_s, np.arange(40) * 0.25, atol=0.021)
    assert any("do not advance" in w and "25 fps" in w for w in clip.warnings)
    window = sample(data_dir / name, 4.0, 6.0)
    assert len(window.timestamps_s) == 8 and window.timestamps_s[0] == pytest.approx(4.0)


@pytest.mark.parametrize("name", ["fragmented_starts_at_3600s.mp4", "starts_at_3600s.mkv"])
def test_a_clip_starting_at_3600s_lasts_6s(data_dir, name):
    clip = sample(data_dir / name)
    assert len(clip.timestamps_s) == 24 and clip.duration_s == pytest.approx(6.0)
    assert clip.timestamps_s[0] == pytest.approx(0.0)
    strict = decode_clip(data_dir / name, FrameSampling(4.0, 128), DEC, LimitsConfig(max_clip_duration_s=10))
    assert strict.duration_s == pytest.approx(6.0)  # the start time never counts towards the limit


@pytest.mark.parametrize("name,frames,first", [("audio_first_video_after_12s.ts", 16, 0.0),
                                               ("cut_8s_before_first_keyframe.ts", 24, 8.0)])  # fmt: skip
def test_a_stream_the_probe_did_not_size_is_decoded_the_plain_way(data_dir, name, frames, first):
    with av.open(str(data_dir / name)) as c:
        assert c.streams.video[0].codec_context.width == 0  # FFmpeg's probe really gave up
    clip = sample(data_dir / name)
    assert len(clip.timestamps_s) == frames and clip.timestamps_s[0] == pytest.approx(first)
    assert (clip.source_width, clip.source_height) == (320, 180)
    assert clip.decode_path == "plain"
    if first:
        gap = clip.gaps[0]
        assert gap.start_s == 0.0 and gap.end_s == pytest.approx(first - 0.5) and "first keyframe" in gap.reason
        assert any("no frames for 0.00–7.50 s" in w for w in clip.warnings)


def test_browser_recorder_webm_decodes(data_dir):
    clip = sample(data_dir / "browser_recorder_vp8_opus.webm")
    assert len(clip.timestamps_s) == 12 and clip.duration_s == pytest.approx(3.0) and not clip.warnings


def test_a_ts_starting_mid_gop_says_what_it_cannot_show(data_dir):
    path = data_dir / "starts_mid_gop.ts"
    clip = sample(path)
    assert clip.timestamps_s[0] == pytest.approx(4.0)
    assert clip.gaps and clip.gaps[0].start_s == 0.0 and "first keyframe is at 3.92 s" in clip.gaps[0].reason
    assert any(w.startswith("no frames for 0.00–3.50 s") for w in clip.warnings)
    with pytest.raises(UnprocessableClipError, match=r"first keyframe is at 3\.92 s") as e:
        sample(path, 0.0, 3.0)
    assert "[0.00, 3.00) s" in e.value.message


def test_a_resolution_change_keeps_each_pictures_shape_and_says_when(data_dir):
    clip = sample(data_dir / "resolution_change_midstream.ts")
    assert len(clip.timestamps_s) == 40
    assert any("frame size changes at 5.00 s to 240x320" in w for w in clip.warnings)
    h, w = clip.frames.shape[1:3]
    late = clip.frames[int(np.searchsorted(clip.timestamps_s, 6.0))].astype(int)
    cols = late.mean(axis=(0, 2))
    content = np.flatnonzero(cols > 8)
    # A 240x320 portrait picture pillarboxed into a 16:9 frame: content is h·3/4 wide, centred, bars black.
    assert abs(len(content) - h * 240 / 320) <= 6 and cols[: w // 4].max() < 8 and cols[-w // 4 :].max() < 8
    early = clip.frames[0].astype(int).mean(axis=(0, 2))
    assert early.min() > 8  # the first half fills the frame


# --------------------------------------------------------------------------- no silent loss


def test_a_damaged_first_idr_falls_back_to_the_plain_decode(data_dir):
    data = mutations.idr_slice_header_damaged((data_dir / "dashcam_320x180_h264.mp4").read_bytes())
    av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture() as logs, av.open(io.BytesIO(data)) as c:
            c.streams.video[0].codec_context.thread_count = 1
            plain = [f.time for f in c.decode(video=0)]
    finally:
        av.logging.set_level(None)
    assert any("A non-intra slice in an IDR NAL unit" in m for _lvl, _n, m in logs)
    assert len(plain) == 221 and plain[0] == 0.0  # FFmpeg conceals the damage and shows every picture
    clip = sample(data)
    assert clip.decode_path.startswith("planned, then plain")
    assert len(clip.timestamps_s) == 36 and clip.timestamps_s[0] == 0.0  # nothing lost


def test_damage_that_loses_a_whole_gop_is_a_warning_with_its_range(data_dir):
    data = mutations.idr_slice_header_damaged((data_dir / "dashcam_320x180_h264.mp4").read_bytes(), all_slices=True)
    clip = sample(data)
    assert clip.timestamps_s[0] == pytest.approx(2.0)
    assert clip.gaps[0].start_s == 0.0 and clip.gaps[0].end_s == pytest.approx(1.5)
    assert "damaged data at 0.00 s" in clip.gaps[0].reason


def test_two_recordings_joined_byte_for_byte_play_one_after_the_other(data_dir):
    data = mutations.concatenated((data_dir / "dashcam_320x180_h264.mp4").read_bytes(), "mpegts")
    clip = sample(data)
    assert clip.duration_s == pytest.approx(17.68, abs=0.1) and len(clip.timestamps_s) == 71
    assert np.all(np.diff(clip.timestamps_s) > 0)
    assert any("jump back" in w for w in clip.warnings) and not clip.gaps


def test_build_timeline_drops_discarded_pictures_and_counts_from_the_first_shown():
    pts = [-50, -25, 0, 75, 25, 50, 100]  # decode order, B-frames; the first two discarded (edit list)
    tl = build_timeline(pts, pts, [True, True] + [False] * 5, 0.04 / 25, 25.0, False)
    assert np.isnan(tl.times_s[:2]).all()
    assert np.allclose(tl.presented, [0.0, 0.04, 0.08, 0.12, 0.16])
    hours = build_timeline([p + 10**9 for p in pts[2:]], [p + 10**9 for p in pts[2:]], [False] * 5, 0.04 / 25, 25.0,
                           False)  # fmt: skip
    assert hours.presented[0] == 0.0 and hours.presented[-1] == pytest.approx(0.16)


def test_find_gaps_reports_only_targets_more_than_one_step_from_a_frame():
    grid = FrameGrid(0.0, 0.25, 40, 4.0)
    kept = np.r_[np.arange(0, 4, 0.25), 4.5, np.arange(7, 10, 0.25)]  # one missing target at 4.25: tolerated
    pics = np.arange(0, 10, 0.04)
    gaps = find_gaps(grid, kept, pics, 0.0, np.array([0.0, 5.0]), [(5.0, "Invalid data")])
    assert len(gaps) == 1 and gaps[0].start_s == 5.0 and gaps[0].end_s == 6.5 and gaps[0].targets == 7
    assert "damaged data at 5.00 s" in gaps[0].reason
    none_there = find_gaps(grid, kept, pics[(pics < 4.6) | (pics > 6.9)], 0.0, np.array([0.0]), [])
    assert "holds no pictures" in none_there[0].reason


# --------------------------------------------------------------------------- displayed geometry


def marker(i, w, h):
    img = np.full((h, w, 3), 40, np.uint8)
    img[: h // 3, : w // 4] = 250  # bright block top-left
    return img


@pytest.mark.parametrize(
    "matrix,corner",
    [((-65536, 0, 0, 0, 65536, 0, 0, 0, 1 << 30), "top-right"),  # horizontal flip (mirrored camera)
     ((65536, 0, 0, 0, -65536, 0, 0, 0, 1 << 30), "bottom-left")],  # vertical flip
)  # fmt: skip
def test_display_matrix_flips_are_applied(tmp_path, matrix, corner):
    out = av.open(str(tmp_path / "flip.mp4"), "w")
    s = out.add_stream("libx264", rate=8)
    s.width, s.height, s.pix_fmt = 320, 240, "yuv420p"
    s.set_display_matrix(matrix)
    for i in range(8):
        f = av.VideoFrame.from_ndarray(marker(i, 320, 240), format="rgb24")
        f.pts = i
        for p in s.encode(f):
            out.mux(p)
    for p in s.encode():
        out.mux(p)
    out.close()
    img = sample(tmp_path / "flip.mp4").frames[0].astype(int)
    h, w = img.shape[:2]
    quads = {"top-left": img[: h // 4, : w // 5], "top-right": img[: h // 4, -w // 5 :],
             "bottom-left": img[-h // 4 :, : w // 5]}  # fmt: skip
    assert quads[corner].mean() > 200 and quads["top-left"].mean() < 80


def test_anamorphic_pixels_are_shown_square(data_dir):
    data = mutations.MUTATIONS["anamorphic_4to3"][1]((data_dir / "dashcam_320x180_h264.mp4").read_bytes())
    clip = sample(data)
    assert (clip.source_width, clip.source_height) == (427, 180)
    h, w = clip.frames.shape[1:3]
    assert w / h == pytest.approx(427 / 180, rel=0.08)


def test_the_codecs_cropping_window_is_applied(data_dir):
    data = mutations.MUTATIONS["sps_crop_window"][1]((data_dir / "dashcam_320x180_h264.mp4").read_bytes())
    clip = sample(data)
    assert (clip.source_width, clip.source_height) == (304, 168)  # 320x192 coded


def test_a_portrait_phone_clip_with_the_rotate_tag_is_portrait(tmp_path):
    path = tmp_path / "phone.mp4"
    write_video(path, size=(320, 180), frames=8, fps=8, rotation_ccw=-90)
    clip = sample(path)
    assert clip.rotation_deg == 90 and (clip.source_width, clip.source_height) == (180, 320)
