"""benchmarks.quiet_scenes: the report counts skipped windows that carry a motion label."""

from __future__ import annotations

import json

from benchmarks import quiet_scenes
from serve_app.cameras.scene_change import synthetic_scene


def lumas_of(frames, windows):
    return [[y for t, y in frames if 10 * k <= t < 10 * (k + 1)] for k in range(windows)]


def test_a_skipped_window_labelled_motion_is_reported():
    lumas = lumas_of(synthetic_scene(40, 4.0), 4)  # nothing moves: windows 1-3 are skipped
    out = quiet_scenes.report("static", lumas, motion={2}, thresholds=[0.01], max_skip_s=60.0, decode_s=None)
    row = out["by_threshold"]["0.01"]
    assert row["skipped_windows"] == [1, 2, 3]
    assert row["motion_windows_skipped"] == [2]  # a mislabelled (or missed) window shows up


def test_the_labels_cover_each_clip_once():
    labels = json.loads(quiet_scenes.LABELS.read_text())
    assert labels["window_s"] == quiet_scenes.WINDOW_S
    for name, clip in labels["clips"].items():
        assert not set(clip["motion"]) & set(clip["quiet"]), name
        assert sorted(clip["motion"] + clip["quiet"]) == list(range(len(clip["motion"]) + len(clip["quiet"]))), name


def test_the_written_quiet_camera_clip_is_skipped_as_the_generated_frames_are(tmp_path):
    """The clip the GPU run loops as a camera (H.264 of the generated quiet scene) reads back at its size and rate,
    and the stream worker's measure skips its windows after the first: encoding adds no change."""
    from serve_app.cameras.scene_change import THRESHOLD, held_luma
    from serve_app.config import AppConfig

    path = quiet_scenes.write_clip(tmp_path / "quiet.mp4", seconds=30.0, fps=10.0, size=(320, 180))
    windows, _ = quiet_scenes.clip_windows(path, AppConfig())
    assert len(windows) == 2  # the window ending at 30 s needs a frame past it
    with quiet_scenes.av.open(str(path)) as c:
        s = c.streams.video[0]
        assert (s.width, s.height, s.frames or 300) == (320, 180, 300)
    decisions, _ = quiet_scenes.run_policy([[held_luma(f) for f in w.frames] for w in windows], THRESHOLD, 60.0)
    assert [d["reason"] for d in decisions] == ["first", "unchanged"]
