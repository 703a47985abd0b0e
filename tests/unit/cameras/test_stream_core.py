"""The Ray-free core of live streams: window cutting, newest-wins queue, backoff, alerts, events, store."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pydantic import ValidationError

from serve_app.cameras.protocol import AlertRule, AnswerEvent, StateEvent, StreamCreate
from serve_app.cameras.store import StreamStore
from serve_app.cameras.windows import Backoff, EventLog, NewestWinsQueue, Percentiles, WindowCutter


def feed(cutter: WindowCutter, fps: float, seconds: float):
    out = []
    n = round(seconds * fps)
    for i in range(n):
        out += cutter.push(i / fps, i, wall=1000.0 + i / fps)
    return out


def test_windows_back_to_back_sampled_at_fps():
    c = WindowCutter(window_s=2.0, every_s=2.0, fps=2.0)
    windows = feed(c, fps=30, seconds=6.05)
    assert [w.index for w in windows] == [0, 1, 2]
    for w in windows:
        assert len(w.frames) == 4  # 2 s at 2 fps
        assert w.times_s == pytest.approx(
            [w.start_s + k * 0.5 for k in range(4)], abs=0.051
        )  # within 0.1/fps, never later than a frame
        assert all(w.start_s - 0.051 <= t < w.end_s for t in w.times_s)
    # the window closes when the first frame past its end arrives
    assert windows[0].wall_end == pytest.approx(1002.0, abs=1 / 30)


def test_camera_slower_than_fps_keeps_its_own_frames():
    c = WindowCutter(window_s=2.0, every_s=2.0, fps=4.0)
    windows = feed(c, fps=1, seconds=5)
    assert [len(w.frames) for w in windows] == [2, 2]


def test_gap_between_windows_and_out_of_order_frames():
    c = WindowCutter(window_s=1.0, every_s=3.0, fps=2.0)
    got = []
    for i in range(0, 70):
        got += c.push(i / 10, i)
    got += c.push(3.0, "dup")  # out of order: ignored
    assert [(w.start_s, w.end_s) for w in got] == [(0.0, 1.0), (3.0, 4.0)]
    assert got[1].times_s == pytest.approx([3.0, 3.5])


def test_cutter_rejects_overlap_and_bad_values():
    with pytest.raises(ValueError):
        WindowCutter(window_s=2.0, every_s=1.0, fps=2.0)
    with pytest.raises(ValueError):
        WindowCutter(window_s=2.0, every_s=2.0, fps=0)


def test_reset_drops_the_open_window():
    c = WindowCutter(window_s=2.0, every_s=2.0, fps=2.0)
    c.push(0.0, 0)
    c.push(1.0, 1)
    c.reset()
    assert c.push(5.0, 2) == []  # the broken window 0 is never emitted


def test_convert_runs_only_for_kept_frames():
    seen = []
    c = WindowCutter(window_s=1.0, every_s=1.0, fps=2.0, convert=lambda f: seen.append(f) or f)
    feed(c, fps=30, seconds=2.1)
    assert len(seen) == 5  # 0, 0.5, 1.0, 1.5, 2.0: 30 fps in, 2 fps converted


def test_newest_wins_queue_drops_oldest():
    q = NewestWinsQueue(2)
    assert q.put(1) is None and q.put(2) is None
    assert q.put(3) == 1
    assert [q.get_nowait(), q.get_nowait(), q.get_nowait()] == [2, 3, None]
    with pytest.raises(ValueError):
        NewestWinsQueue(0)


def test_backoff_doubles_up_to_cap():
    b = Backoff(0.5, 4.0)
    assert [b.delay_s(i) for i in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.delay_s(10_000) == 4.0


def test_percentiles_bounded():
    p = Percentiles(size=10)
    assert p.summary().p50 is None
    for v in range(100):
        p.add(v)
    s = p.summary()
    assert s.count == 10 and s.p50 == pytest.approx(94.5) and s.p95 == pytest.approx(98.55)


@pytest.mark.parametrize(
    "rule, answer, hits",
    [
        ({"keywords": ["person", "red car"]}, "A person walks by.", ["person"]),
        ({"keywords": ["person", "red car"]}, "A RED  car!", ["red car"]),
        ({"keywords": ["car"]}, "a carpet", []),  # whole words only
        ({"keywords": ["person", "car"], "match": "all"}, "a person", []),
        ({"keywords": ["person", "car"], "match": "all"}, "car and person", ["person", "car"]),
        ({"kind": "yes"}, "Yes, there is smoke.", ["yes"]),
        ({"kind": "yes"}, "No. yes", []),
        ({"kind": "no"}, " no", ["no"]),
    ],
)
def test_alert_rule(rule, answer, hits):
    assert AlertRule.model_validate(rule).matches(answer) == hits


def test_alert_rule_is_linear_on_adversarial_input():
    rule = AlertRule(keywords=["a" * 60])
    assert rule.matches(("a" * 59 + " ") * 20_000) == []  # a backtracking regex would take ages


@pytest.mark.parametrize(
    "bad", [{"keywords": ["!!!"]}, {"keywords": ["x" * 65]}, {"keywords": ["k"] * 17}, {"kind": "regex"}]
)
def test_alert_rule_rejects(bad):
    with pytest.raises(ValidationError):
        AlertRule.model_validate(bad)


def test_stream_create_defaults_and_limits():
    s = StreamCreate(url="rtsp://cam/1", questions=["what happens?"])
    assert (s.window_s, s.fps, s.every_s, s.loop) == (10.0, 4.0, None, False)
    for bad in (
        {"url": "x", "questions": []},
        {"url": "x", "questions": [" "]},
        {"url": "x", "questions": ["q"], "window_s": 0},
        {"url": "x", "questions": ["q"], "bogus": 1},
    ):
        with pytest.raises(ValidationError):
            StreamCreate.model_validate(bad)


def _state(log: EventLog, sid: str) -> StateEvent:
    return StateEvent(id=log.next_id(), stream_id=sid, time=0.0, state="running", previous="connecting")


def test_event_log_replay_bounded_and_filtered():
    log = EventLog(size=5, first_id=100)
    for i in range(8):
        log.append(_state(log, "a" if i % 2 else "b"))
    assert log.last_id == 107
    batch = log.since(104)
    assert [e.id for e in batch.events] == [105, 106, 107] and not batch.missed
    assert [e.id for e in log.since(104, "a").events] == [105, 107]
    old = log.since(100)  # 101, 102 fell out of the history
    assert old.missed and [e.id for e in old.events] == [103, 104, 105, 106, 107]
    assert log.since(None).events == []


def test_event_log_wait_wakes_on_append():
    async def main():
        log = EventLog(size=10)
        waiter = asyncio.create_task(log.wait(log.last_id, None, timeout_s=5))
        await asyncio.sleep(0.05)
        log.append(_state(log, "s"))
        batch = await asyncio.wait_for(waiter, 2)
        empty = await log.wait(log.last_id, None, timeout_s=0.05)
        return batch, empty

    batch, empty = asyncio.run(main())
    assert len(batch.events) == 1 and empty.events == []


def answer_event(i: int, stream_id: str = "s1") -> AnswerEvent:
    """A stored answer as the stream worker writes it (event id ``i``)."""
    return AnswerEvent.model_validate({
        "id": i, "stream_id": stream_id, "time": 1000.0 + i, "window_index": i, "question_index": 0,
        "question": "q", "window": {"start_s": 10.0 * i, "end_s": 10.0 * i + 10, "wall_start": 0.0, "wall_end": 1.0},
        "frames": 40, "answer": f"answer {i}", "reasoning": None, "finish_reason": "stop",
        "timings": {"decode_ms": 1.0, "queue_ms": 0.0, "model_ms": 2.0, "ttft_ms": 1.0, "latency_ms": 3.0,
                    "freshness_s": 0.5},
        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "video_tokens": 90},
        "model": "m", "random_weights": True, "windows_dropped": 0,
    })  # fmt: skip


def test_store_persists_and_bounds_history(tmp_path):
    db = tmp_path / "s" / "streams.sqlite"
    store = StreamStore(db, keep=3)
    spec = StreamCreate(url="cam.mp4", questions=["q"], loop=True)
    store.add("s1", spec, 1.0)
    for i in range(5):
        store.add_answer("s1", i, answer_event(i).model_dump_json(), b"jpeg%d" % i)
    store.close()
    again = StreamStore(db, keep=3)
    assert again.streams() == [("s1", spec, 1.0)]
    history = again.answers("s1")
    assert [a.id for a in history] == [4, 3, 2] and history[0] == answer_event(4)  # typed, frozen, equal by value
    assert again.thumbnail("s1") == b"jpeg4"
    again.remove("s1")
    assert again.streams() == [] and again.count_answers("s1") == 0


def test_a_stored_answer_of_another_format_is_left_out_not_half_typed(tmp_path, caplog):
    store = StreamStore(tmp_path / "streams.sqlite", keep=5)
    store.add("s1", StreamCreate(url="cam.mp4", questions=["q"]), 1.0)
    store.add_answer("s1", 1, answer_event(1).model_dump_json(), None)
    store.add_answer("s1", 2, '{"id": 2, "answer": "an older version\'s event"}', None)
    store.add_answer("s1", 3, answer_event(3).model_dump_json(), None)
    with caplog.at_level(logging.WARNING, logger="ray.serve"):
        assert [a.id for a in store.answers("s1")] == [3, 1]
    assert any("another version" in r.getMessage() for r in caplog.records)
