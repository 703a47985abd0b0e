"""Sampling math: grids, frame selection by timestamp, pixel budget, even frame counts."""

import numpy as np
import pytest

from serve_app.config import PixelBudget
from serve_app.decode.sampling import (
    FrameSelector,
    even_frame_count,
    frame_pixel_cap,
    frame_size,
    plan_grid,
    plan_picks,
    smart_resize,
    video_tokens,
)
from serve_app.errors import UnprocessableClipError


def select(times, grid):
    sel = FrameSelector(grid)
    out = []
    for t in times:
        out += sel.push(t, t)
    out += sel.finish()
    return [t for _, t, _ in out]


def test_ten_second_clip_at_4fps_gives_40_targets():
    g = plan_grid(10.0, fps=4, max_frames=128)
    assert (g.count, g.fps, g.step_s) == (40, 4, 0.25)
    assert g.target(39) == pytest.approx(9.75)


def test_selection_by_timestamp_not_index_on_variable_frame_rate():
    # 150 frames at 30 fps over 0-5 s, then 25 frames at 5 fps over 5-10 s.
    times = list(np.arange(150) / 30) + list(5 + np.arange(25) * 0.2)
    g = plan_grid(times[-1] + 0.2, fps=4, max_frames=128)
    kept = select(times, g)
    assert len(kept) == 40
    assert np.all(np.diff(kept) > 0)
    grid = np.arange(40) * 0.25
    assert np.max(np.abs(np.array(kept) - grid)) <= 0.125
    assert sum(t < 5 for t in kept) == 20  # index-based sampling would put most in the first half


def test_never_picks_a_frame_twice_or_invents_one_for_sparse_sources():
    times = [0.0, 1.0, 2.0, 3.0]  # a 1-fps camera
    g = plan_grid(4.0, fps=4, max_frames=128, source_fps=1.0)
    assert g.fps == 1.0
    assert select(times, g) == times


def test_max_frames_lowers_the_rate_evenly():
    g = plan_grid(60.0, fps=4, max_frames=128)
    assert g.count == 128
    assert g.fps == pytest.approx(128 / 60)
    times = list(np.arange(0, 60, 1 / 30))
    kept = select(times, g)
    assert len(kept) == 128
    assert np.max(np.abs(np.array(kept) - np.arange(128) / g.fps)) <= g.tolerance_s


def test_odd_max_frames_rounds_down_to_even():
    assert plan_grid(60.0, fps=4, max_frames=7).count == 6


def test_window_start_and_end():
    g = plan_grid(30.16, fps=4, max_frames=128, start_s=10, end_s=20)
    assert (g.start_s, g.count) == (10, 40)


def test_empty_window_is_422():
    with pytest.raises(UnprocessableClipError):
        plan_grid(5.0, fps=4, max_frames=128, start_s=6)


@pytest.mark.parametrize("n,expected", [(0, 2), (1, 2), (2, 2), (5, 6), (40, 40), (121, 122)])
def test_even_frame_count(n, expected):
    assert even_frame_count(n) == expected


def test_short_clips_frame_counts():
    assert even_frame_count(plan_grid(1.25, fps=4, max_frames=128).count) == 6
    assert even_frame_count(plan_grid(0.2, fps=4, max_frames=128).count) == 2


def test_cosmos_budget_reference_workload():
    # model-facts.md: 40 frames of a 16:9 source -> 420x756 -> 8,100 video tokens.
    h, w = frame_size(432, 768, 40, PixelBudget())
    assert (h, w) == (420, 756)
    assert video_tokens(40, h, w) == 8100


@pytest.mark.parametrize("n_frames", [2, 8, 40, 128, 512])
@pytest.mark.parametrize("src", [(2160, 3840), (432, 768), (480, 640), (1080, 1920), (720, 1280)])
def test_budget_holds_for_every_clip(n_frames, src):
    budget = PixelBudget()
    h, w = frame_size(*src, n_frames, budget)
    assert h % 28 == 0 and w % 28 == 0 and h >= 28 and w >= 28
    assert h * w <= frame_pixel_cap(n_frames, budget)
    if n_frames >= 2:
        # <= 8192 vision tokens per clip unless the per-frame floor binds (very long clips)
        floor_bound = h * w <= budget.min_frame_pixels * 1.05 + 28 * 28 * 4
        assert video_tokens(n_frames, h, w) <= 8192 or floor_bound


def test_tiny_frames_scale_up_to_the_minimum_area():
    h, w = smart_resize(16, 16, min_pixels=100352, max_pixels=602112)
    assert h == w and h * w >= 100352 and h % 28 == 0


def test_extreme_aspect_is_rejected_naming_the_limit():
    with pytest.raises(UnprocessableClipError, match="200"):
        smart_resize(16, 4000, min_pixels=100352, max_pixels=602112)


def test_plan_picks_prefers_reference_frames_within_tolerance():
    times = np.arange(0, 2, 0.1)  # 10 fps: I/P every 0.4 s, B-reference midway, the rest non-reference
    refs = np.array([i % 2 == 0 for i in range(len(times))])
    g = plan_grid(2.0, fps=4, max_frames=128)
    picks = plan_picks(times, g, refs)
    assert len(picks) == 8 and np.all(np.diff(picks) > 0)
    assert refs[picks].all()  # every target had a reference frame within 0.125 s
    assert np.max(np.abs(times[picks] - (np.arange(8) * 0.25))) <= 0.125
    nearest = plan_picks(times, g, None)
    assert not refs[nearest].all()  # without reference flags the nearest frame wins


def test_plan_picks_leaves_gaps_and_never_reuses_a_frame():
    times = np.array([0.0, 0.05, 1.0, 1.02])  # nothing near 0.25 .. 0.75
    g = plan_grid(1.1, fps=4, max_frames=128)
    picks = plan_picks(times, g)
    assert list(picks) == [0, 2]
    assert len(set(picks)) == len(picks)


def test_plan_picks_matches_the_streaming_selector_without_reference_flags():
    rng = np.random.default_rng(3)
    times = np.sort(np.unique(np.round(rng.uniform(0, 20, 300), 3)))
    g = plan_grid(20.0, fps=4, max_frames=128)
    assert list(times[plan_picks(times, g)]) == select(list(times), g)


def test_a_window_starting_past_the_clips_end_is_refused_saying_where_the_clip_ends():
    with pytest.raises(UnprocessableClipError) as info:
        plan_grid(30.16, fps=4, max_frames=128, start_s=100.0, end_s=130.0)
    assert info.value.status == 422 and info.value.param == "start_s"
    assert info.value.message == "start_s 100 s is at or past the clip's end (30.160 s): the window is empty"


def test_a_clip_without_duration_is_refused_without_naming_a_start_the_client_did_not_send():
    with pytest.raises(UnprocessableClipError) as info:
        plan_grid(0.0, fps=4, max_frames=128)
    assert info.value.param is None and "start_s" not in info.value.message
    assert info.value.message == "the window from 0 s to 0 s is empty (the clip lasts 0.000 s)"
