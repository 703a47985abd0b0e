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
