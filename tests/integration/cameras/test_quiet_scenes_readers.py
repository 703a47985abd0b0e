"""Quiet scenes through the stream registry (no Ray): real reader threads replaying looping files in real
time, a fake model. (The settings' checks without readers: tests/unit/cameras/test_stream_quiet_scenes.py.)"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import av
import numpy as np

from serve_app.cameras.protocol import AlertEvent, AlertRule, AnswerEvent, SkippedEvent, SkipUnchanged, StreamCreate
from serve_app.cameras.registry import StreamRegistry
from serve_app.cameras.scene_change import synthetic_scene
from serve_app.cameras.store import StreamStore
from serve_app.config import AppConfig
from serve_app.testing.polling import wait_for_async

DATA = Path(__file__).resolve().parents[2] / "data"
MOVING = "dashcam_0p4s.mp4"  # a car driving: every window changes


class Metrics:
    def __init__(self):
        self.windows: list[str] = []

    def window(self, stream_id, outcome):
        self.windows.append(outcome)

    def reconnect(self, stream_id):
        pass

    def freshness(self, stream_id, seconds):
        pass


def static_clip(path: Path, seconds: float = 2.0, fps: float = 8.0) -> Path:
    """An H.264 clip of a still scene with sensor noise (a fixed camera on an empty room)."""
    with av.open(str(path), "w") as out:
        s = out.add_stream("libx264", rate=int(fps))
        s.width, s.height, s.pix_fmt = 320, 192, "yuv420p"
        for _, y in synthetic_scene(seconds, fps, size=(320, 192), noise_sigma=6.0):
            frame = av.VideoFrame.from_ndarray(np.repeat(y[..., None], 3, axis=2), format="rgb24")
            for packet in s.encode(frame):
                out.mux(packet)
        for packet in s.encode():
            out.mux(packet)
    return path


def config(tmp_path) -> AppConfig:
    return AppConfig.model_validate(
        {"sources": {"allowed_roots": [str(DATA), str(tmp_path)]},
         "streams": {"db_path": str(tmp_path / "streams.sqlite"), "read_timeout_s": 2.0}}
    )


async def answer(question, clip):
    from serve_app.protocol import ClipInfo, Delta, Done, VideoInfo

    yield ClipInfo(video=VideoInfo.of(clip), warnings=(), decode_ms=0.0, video_tokens=10, model="fake",
                   random_weights=True)
    yield Delta("<answer>a person stands by the table</answer>", 5)
    yield Done("stop", 20, 5, queue_ms=0.0, model_ms=1.0, ttft_ms=1.0)


async def watch(tmp_path, url, until, **spec_kwargs):
    cfg = config(tmp_path)
    metrics = Metrics()
    reg = StreamRegistry(cfg, answer, StreamStore(cfg.streams.db_path), metrics=metrics)
    spec = StreamCreate(url=url, window_s=0.5, fps=4, questions=["anyone?"], loop=True, **spec_kwargs)
    st = reg.create(spec)
    await wait_for_async(lambda: until(reg.status(st.id)), 30)
    status = reg.status(st.id)
    events = reg.events.since(0, st.id).events
    await reg.close()
    return status, events, metrics


def test_a_still_camera_is_skipped_between_forced_answers_and_never_alerts_on_a_skip(tmp_path):
    clip = static_clip(tmp_path / "still.mp4")
    status, events, metrics = asyncio.run(watch(
        tmp_path, str(clip), lambda s: s.windows_answered >= 3 and s.windows_skipped >= 4,
        skip_unchanged=SkipUnchanged(threshold=0.01, max_skip_s=2.0), alert=AlertRule(keywords=["person"]),
    ))
    assert status.windows_answered >= 3 and status.windows_skipped >= 4, status
    assert status.skip_unchanged is not None and status.skip_unchanged.max_skip_s == 2.0
    answered = sorted({e.window_index for e in events if isinstance(e, AnswerEvent)})
    skipped = [e for e in events if isinstance(e, SkippedEvent)]
    alerts = [e for e in events if isinstance(e, AlertEvent)]
    assert not {e.window_index for e in skipped} & set(answered)
    for e in skipped:
        assert e.since_window_index in answered and e.since_window_index < e.window_index
        assert e.change < e.threshold == 0.01
        assert f"unchanged since window {e.since_window_index}; previous answer stands" in e.message
    # alerts come from answers only: one per answered window, none for a skipped one
    assert {a.window_index for a in alerts} == set(answered)
    # forced answers: an answer at least every max_skip_s (2 s = 4 windows of 0.5 s) of stream time
    assert max(b - a for a, b in itertools.pairwise(answered)) <= 4
    assert metrics.windows.count("skipped") == status.windows_skipped


def test_a_moving_scene_is_answered_every_window(tmp_path):
    status, events, _ = asyncio.run(watch(
        tmp_path, MOVING, lambda s: s.windows_answered >= 4, skip_unchanged=SkipUnchanged(threshold=0.01),
    ))
    assert status.windows_answered >= 4 and status.windows_skipped == 0
    assert not [e for e in events if isinstance(e, SkippedEvent)]


def test_without_the_option_nothing_is_skipped(tmp_path):
    clip = static_clip(tmp_path / "still.mp4")
    status, _events, _ = asyncio.run(watch(tmp_path, str(clip), lambda s: s.windows_answered >= 4))
    assert status.windows_skipped == 0 and status.skip_unchanged is None
