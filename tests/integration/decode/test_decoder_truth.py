"""Differential harness: for every clip in tests/data (the handed bug cases included) and every
mutation of tests/data/dashcam_320x180_h264.mp4, the service's decode agrees with a plain full
PyAV decode (see :mod:`benchmarks.decode_truth` for the rules). The report script
(``python -m benchmarks.decode_truth``) runs the same checks and adds ../shared clips."""

import dataclasses

import pytest

from benchmarks import decode_truth

INPUTS = decode_truth.inputs(shared=False)


def test_the_harness_covers_the_issues_inputs():
    names = {name for name, *_ in INPUTS}
    kinds = {kind for _n, kind, *_ in INPUTS}
    assert kinds == {"tests/data", "mutation"}
    for handed in ("editlist_starts_2s_in.mp4", "all_timestamps_equal.mkv", "starts_at_3600s.mkv",
                   "audio_first_video_after_12s.ts", "starts_mid_gop.ts", "resolution_change_midstream.ts"):
        assert handed in names  # fmt: skip
    mutated = {n.split(":", 1)[1] for n in names if ":" in n}
    assert {"truncated_25pct", "flipped_first_gop", "flipped_middle_gop", "idr_slice_header_first_slice",
            "edit_list_starts_1s_in", "offset_3h.ts", "concatenated.ts", "all_timestamps_equal.mkv",
            "anamorphic_4to3"} <= mutated  # fmt: skip


@pytest.mark.parametrize("name,kind,data,description", INPUTS, ids=[i[0] for i in INPUTS])
def test_service_decode_agrees_with_a_plain_decode(name, kind, data, description):
    entry = decode_truth.evaluate(name, kind, data, description)
    problems = [(r["window"], p) for r in entry["requests"] for p in r["problems"]]
    assert entry["verdict"] == "ok", problems
    assert entry["requests"][0]["status"] in (200, 422)


def test_the_check_fails_when_frames_go_missing_silently(data_dir, monkeypatch):
    """The harness can fail: a decoder that drops the second half of a clip without a word is caught."""
    real = decode_truth.decode_clip

    def lossy(data, request, dec, lim):
        clip = real(data, request, dec, lim)
        half = len(clip.timestamps_s) // 2
        return dataclasses.replace(
            clip, timestamps_s=clip.timestamps_s[:half], frames=clip.frames[:half], gaps=(), warnings=())

    monkeypatch.setattr(decode_truth, "decode_clip", lossy)
    entry = decode_truth.evaluate("x", "test", (data_dir / "dashcam_320x180_h264.mp4").read_bytes())
    assert entry["verdict"] == "fail"
    assert any("missing without a warning" in p for p in entry["requests"][0]["problems"])


def test_the_check_fails_on_the_wrong_moments(data_dir, monkeypatch):
    """Frames relabelled 2 s later than they show (the edit-list bug) are caught by their content."""
    real = decode_truth.decode_clip

    def shifted(data, request, dec, lim):
        clip = real(data, request, dec, lim)
        clip.frames[:-8] = clip.frames[8:].copy()  # each timestamp now carries the picture 2 s later
        return clip

    monkeypatch.setattr(decode_truth, "decode_clip", shifted)
    entry = decode_truth.evaluate("x", "test", (data_dir / "dashcam_320x180_h264.mp4").read_bytes())
    assert any("differ from the plain frame" in p for p in entry["requests"][0]["problems"])
