"""The lone-clip decode latency bench decodes the reference window as the decode tier does."""

from __future__ import annotations

from pathlib import Path

from benchmarks.decode_latency import lone_clip_latency
from benchmarks.workload import Window, cut_window_files

ROOT = Path(__file__).resolve().parents[3]


def test_each_thread_count_decodes_the_whole_window(tmp_path):
    [path] = cut_window_files([Window(ROOT / "tests" / "data" / "intel_car-detection.mp4", 10.0)], tmp_path, workers=1)
    rows = lone_clip_latency(path, [1, 2], repeats=2)
    assert [r["threads"] for r in rows] == [1, 2]
    for r in rows:
        assert r["frames"] == 40  # 10 s at 4 fps: the GPU bench's 8,100-video-token clip
        assert 0 < r["wall_ms"]["p50"] <= r["wall_ms"]["p95"]
        assert r["cpu_s"] > 0
