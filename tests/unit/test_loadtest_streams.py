"""The load tester's --streams report, computed from answer events and final stream statuses."""

from __future__ import annotations

import pytest

from loadtest.streams import summarize


def answer(sid, fresh, latency_ms=100.0, q=0):
    return {"stream_id": sid, "question_index": q, "timings": {"freshness_s": fresh, "latency_ms": latency_ms}}


def test_summary_per_camera_and_total():
    answers = [answer("a", f) for f in (1.0, 2.0, 3.0, 4.0)] + [answer("b", 10.0), answer("a", 99.0, q=1)]
    statuses = {"a": {"name": "cam-a", "windows_dropped": {"model_behind": 2}, "state": "running"},
                "b": {"name": "cam-b", "windows_dropped": {}, "state": "reconnecting"},
                "c": {"name": "cam-c", "windows_dropped": {"model_busy": 1}, "state": "failed"}}
    r = summarize(answers, statuses, duration_s=10.0)
    a, b, c = (r["cameras"][k] for k in "abc")
    assert a["answers"] == 4 and a["answers_per_s"] == 0.4  # the second question does not count
    assert a["freshness_s_p50"] == 2.5 and a["freshness_s_p95"] == pytest.approx(3.85)
    assert a["dropped_total"] == 2 and b["answers"] == 1 and c["answers"] == 0
    t = r["total"]
    assert t["answers"] == 5 and t["answers_per_s"] == 0.5 and t["dropped_total"] == 3
    assert t["every_camera_answered"] is False  # camera c never answered
    assert summarize([], {}, 5.0)["total"]["every_camera_answered"] is False
