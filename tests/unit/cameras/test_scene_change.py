"""The quiet-scene measure and policy on generated fixed-camera scenes (labels known by construction)."""

from __future__ import annotations

import numpy as np
import pytest

from serve_app.cameras.scene_change import (
    THRESHOLD,
    QuietScenePolicy,
    changed_fraction,
    held_luma,
    luma_grid,
    measure_window,
    synthetic_scene,
)

WINDOW_S, FPS, MAX_SKIP_S = 10.0, 4.0, 60.0


def run(frames, threshold=THRESHOLD, max_skip_s=MAX_SKIP_S):
    """Cuts frames into 10-s windows and runs the policy; returns {index: decision}."""
    policy = QuietScenePolicy(threshold, max_skip_s)
    windows: dict[int, list[np.ndarray]] = {}
    for t, y in frames:
        windows.setdefault(int(t // WINDOW_S), []).append(y)
    out = {}
    for k in sorted(windows):
        grids = policy.grids(windows[k])
        end_s = (k + 1) * WINDOW_S
        d = policy.decide(k, end_s, grids)
        if not d.skip:
            policy.answered(k, end_s, grids[-1])
        out[k] = d
    return out


def test_noise_alone_is_no_change():
    decisions = run(synthetic_scene(60, FPS, noise_sigma=12.0))
    assert decisions[0].reason == "first" and not decisions[0].skip
    assert [d.skip for k, d in decisions.items() if k > 0] == [True] * 5
    assert max(d.change.score for d in decisions.values()) == 0.0


@pytest.mark.parametrize("ramp", [0.4, -0.4])
def test_a_light_ramp_is_no_change(ramp):
    decisions = run(synthetic_scene(50, FPS, light_ramp=ramp))
    assert all(d.skip for k, d in decisions.items() if k > 0)


def test_a_light_ramp_would_count_without_the_brightness_match():
    frames = synthetic_scene(50, FPS, light_ramp=0.4, noise_sigma=0.0)
    first, last = luma_grid(frames[0][1]), luma_grid(frames[-1][1])
    assert np.abs(first - last).mean() > 30  # the raw grids moved by far more than CELL_DELTA
    assert changed_fraction(first, last) == 0.0


@pytest.mark.parametrize("enter_s", [3.0, 33.0, 47.5, 58.0])
def test_the_window_a_person_enters_is_answered(enter_s):
    decisions = run(synthetic_scene(90, FPS, noise_sigma=10.0, light_ramp=0.2, person_at_s=enter_s))
    k = int(enter_s // WINDOW_S)
    assert not decisions[k].skip and decisions[k].reason in {"changed", "first"}
    assert decisions[k].change.score >= THRESHOLD
    # once the person stands, later windows are quiet again (until the forced answer)
    assert any(d.skip for i, d in decisions.items() if i > k + 1)


def test_a_forced_answer_at_least_every_max_skip_s():
    decisions = run(synthetic_scene(150, FPS), max_skip_s=30.0)
    answered = [k for k, d in decisions.items() if not d.skip]
    assert answered == [0, 3, 6, 9, 12]
    assert {decisions[k].reason for k in answered[1:]} == {"max_skip"}
    assert decisions[1].since_index == 0 and decisions[4].since_index == 3


def test_a_skip_run_ends_at_the_first_window_that_crosses_the_threshold():
    quiet = synthetic_scene(40, FPS)
    moving = [(t + 40, y) for t, y in synthetic_scene(10, FPS, person_at_s=0.0)]
    decisions = run(quiet + moving)
    assert [decisions[k].skip for k in range(5)] == [False, True, True, True, False]
    assert decisions[4].reason == "changed" and decisions[4].since_index == 0


def test_something_that_arrives_and_stays_is_a_change_against_the_reference():
    a = np.full((252, 448), 120, np.uint8)
    b = a.copy()
    b[100:200, 100:200] = 20  # a parked car: no motion inside the next window, but not the answered picture
    change = measure_window([luma_grid(b)] * 5, reference=luma_grid(a))
    assert change.motion == 0.0 and change.vs_reference > 0.05 and change.score == change.vs_reference


def test_a_window_without_frames_is_never_skipped_and_a_new_picture_size_is_a_change():
    assert measure_window([], None).score == 1.0
    assert changed_fraction(np.zeros((4, 4), np.float32), np.zeros((5, 4), np.float32)) == 1.0


def test_luma_grid_shapes_and_the_held_yuv_luma_plane():
    y = np.arange(40 * 64, dtype=np.uint32).reshape(40, 64).astype(np.uint8)
    assert luma_grid(y, 16).shape == (2, 4)
    assert luma_grid(y, 100).shape == (1, 1)  # a cell never exceeds the picture
    held = np.zeros((60, 64), np.uint8)  # (H*3/2, W) YUV 4:2:0, H = 40
    held[:40] = 7
    assert held_luma(held).shape == (40, 64) and int(held_luma(held).max()) == 7
    with pytest.raises(ValueError):
        luma_grid(np.zeros((4, 4, 3), np.uint8))


@pytest.mark.parametrize("kwargs", [{"threshold": 0.0, "max_skip_s": 60}, {"threshold": 0.5, "max_skip_s": 0}])
def test_bad_policy_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        QuietScenePolicy(**kwargs)


def test_the_policy_holds_one_small_grid():
    policy = QuietScenePolicy(THRESHOLD, MAX_SKIP_S)
    assert policy.held_bytes == 0
    grid = luma_grid(np.zeros((252, 448), np.uint8))
    policy.answered(0, 10.0, grid)
    assert policy.held_bytes == grid.nbytes == 15 * 28 * 4
