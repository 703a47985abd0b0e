"""The load tester's --streams report, computed from answer events and final stream statuses."""

from __future__ import annotations

import pytest

from loadtest.streams import summarize, verdict


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


def timed(sid, fresh, received, q=0):
    return {**answer(sid, fresh, q=q), "_received": received}


def test_the_verdict_keeps_up_only_when_fresh_complete_and_not_growing():
    statuses = {"a": {"name": "a", "windows_dropped": {}, "state": "running"}}
    steady = [timed("a", 1.0 + 0.01 * (i % 2), 100.0 + 2 * i) for i in range(20)]
    report = summarize(steady, statuses, 40.0)
    ok = verdict(report, steady, slo_s=3.0, max_drop_rate=0.01, max_growth=0.05, windows_cut=20)
    assert ok["keeps_up"] and ok["reasons"] == [] and abs(ok["freshness_growth_s_per_s"]) < 0.01
    growing = [timed("a", 0.5 + 0.2 * i, 100.0 + 2 * i) for i in range(20)]  # falls behind by 0.1 s/s
    g = verdict(summarize(growing, statuses, 40.0), growing, 3.0, 0.01, 0.05, 20)
    assert not g["keeps_up"] and any("p95 freshness" in r for r in g["reasons"])
    assert any("grows" in r for r in g["reasons"]) and g["freshness_growth_s_per_s"] == pytest.approx(0.1)
    dropped = {"a": {"name": "a", "windows_dropped": {"model_behind": 3}, "state": "running"}}
    d = verdict(summarize(steady, dropped, 40.0), steady, 3.0, 0.01, 0.05, windows_cut=23)
    assert not d["keeps_up"] and d["drop_rate"] == pytest.approx(3 / 23, abs=1e-4)


def test_a_stream_body_carries_every_question_ignore_eos_and_quiet_scenes():
    import argparse

    from loadtest.streams import add_arguments, stream_body

    ap = argparse.ArgumentParser()
    add_arguments(ap)
    a = ap.parse_args(["--question", "A?", "--question", "B?", "--ignore-eos", "--skip-unchanged", "0.02",
                       "--max-tokens", "256", "--window-s", "10", "--fps", "4"])
    body = stream_body(a, 3, "intel_car-detection.mp4")
    assert body["questions"] == ["A?", "B?"] and body["ignore_eos"] is True and body["max_tokens"] == 256
    assert body["skip_unchanged"] == {"threshold": 0.02, "max_skip_s": 60.0} and body["name"] == "load-3"
    plain = stream_body(ap.parse_args([]), 0, "x.mp4")
    assert plain["questions"] == ["What is happening?"] and "ignore_eos" not in plain and "skip_unchanged" not in plain
