"""The load tester's --streams report, computed from answer events and final stream statuses."""

from __future__ import annotations

import itertools

import httpx
import pytest

from loadtest.streams import summarize, verdict


def answer(sid, fresh, latency_ms=100.0, q=0, w=None):
    a = {"stream_id": sid, "question_index": q, "timings": {"freshness_s": fresh, "latency_ms": latency_ms}}
    return a if w is None else {**a, "window_index": w}


def test_summary_per_camera_and_total():
    answers = [answer("a", f, w=i) for i, f in enumerate((1.0, 2.0, 3.0, 4.0))] + [answer("b", 10.0),
                                                                                   answer("a", 0.5, q=1, w=0)]
    statuses = {"a": {"name": "cam-a", "windows_dropped": {"model_behind": 2}, "state": "running",
                      "windows_cut": 9, "windows_skipped": 3},
                "b": {"name": "cam-b", "windows_dropped": {}, "state": "reconnecting"},
                "c": {"name": "cam-c", "windows_dropped": {"model_busy": 1}, "state": "failed"}}
    r = summarize(answers, statuses, duration_s=10.0)
    a, b, c = (r["cameras"][k] for k in "abc")
    assert a["answers"] == 4 and a["answers_per_s"] == 0.4  # windows: window 0's second answer (earlier) joins it
    assert a["freshness_s_p50"] == 2.5 and a["freshness_s_p95"] == pytest.approx(3.85)
    assert a["dropped_total"] == 2 and b["answers"] == 1 and c["answers"] == 0
    assert (a["windows_cut"], a["windows_skipped"], b["windows_skipped"]) == (9, 3, 0)  # quiet-scene skips kept
    t = r["total"]
    assert t["answers"] == 5 and t["answers_per_s"] == 0.5 and t["dropped_total"] == 3
    assert (t["windows_cut"], t["windows_skipped"]) == (9, 3)
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


class _Reply:
    def __init__(self, status_code, body):
        self.status_code, self._body, self.text = status_code, body, ""

    def json(self):
        return self._body


class _FakeService:
    """httpx.Client stand-in: records when each camera is registered (by the patched clock)."""

    def __init__(self, clock, slow=()):
        self.clock, self.registered, self.slow, self.deleted = clock, [], set(slow), []

    def __call__(self, **kwargs):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def post(self, path, json):
        self.registered.append((self.clock[0], json["name"]))
        return _Reply(201, {"id": f"s{len(self.registered)}"})

    def get(self, path, timeout=None):
        if path.rsplit("/", 1)[-1] in self.slow:
            raise httpx.ReadTimeout("timed out")
        return _Reply(200, {"name": path, "windows_dropped": {}, "state": "running", "windows_cut": 0})

    def delete(self, path, timeout=None):
        self.deleted.append(path)
        return _Reply(200, {})


class _NoEvents:
    answers, reconnects = [], 0

    def __init__(self, *a):
        pass

    def stop(self):
        pass


def run_level_against(monkeypatch, tmp_path, service, argv, cameras):
    """``streams.run_level`` against ``service`` (an httpx.Client stand-in) on a fake clock, without events."""
    import argparse

    from loadtest import streams

    monkeypatch.setattr(streams.httpx, "Client", service)
    monkeypatch.setattr(streams.time, "sleep", lambda s: service.clock.__setitem__(0, service.clock[0] + s))
    monkeypatch.setattr(streams.time, "time", lambda: service.clock[0])
    monkeypatch.setattr(streams, "EventReader", _NoEvents)
    monkeypatch.setattr(streams, "_plot", lambda *a, **k: None)
    ap = argparse.ArgumentParser()
    streams.add_arguments(ap)
    return streams.run_level(ap.parse_args(argv), cameras, tmp_path, argv)


@pytest.mark.parametrize(("stagger", "extra", "gaps"), [
    ("uniform", [], [2.5, 2.5, 2.5]),  # 10-s window / 4 cameras
    ("uniform", ["--skip-unchanged", "0.01", "--max-skip-s", "60"], [15.0, 15.0, 15.0]),  # forced answers 60 s apart
    ("none", [], [0.0, 0.0, 0.0]),
])
def test_cameras_are_registered_a_period_over_n_apart_unless_told_not_to(monkeypatch, tmp_path, stagger, extra, gaps):
    service = _FakeService([0.0])
    argv = ["--window-s", "10", "--stagger", stagger, "--duration-s", "5", "--api-key", "secret", *extra]
    doc = run_level_against(monkeypatch, tmp_path, service, argv, 4)
    times = [t for t, _ in service.registered]
    assert [round(b - t, 3) for t, b in itertools.pairwise(times)] == gaps
    assert "streams" not in doc["settings"] and "api_key" not in doc["settings"]
    assert doc["settings"]["stagger"] == stagger and doc["duration_s"] == 5.0  # measured after the last one


def test_a_camera_whose_status_does_not_come_back_fails_the_level_and_every_camera_is_still_deleted(
    monkeypatch, tmp_path
):
    service = _FakeService([0.0], slow={"s2"})  # the second camera's status read times out
    argv = ["--window-s", "10", "--duration-s", "5", "--status-timeout-s", "2"]
    doc = run_level_against(monkeypatch, tmp_path, service, argv, 3)
    assert doc["total"]["status_unread"] == 1
    assert doc["cameras"]["s2"]["status_unread"] == "ReadTimeout after at most 2 s"
    assert not doc["summary"]["keeps_up"]
    assert any("1 cameras' status not read" in r for r in doc["summary"]["reasons"])
    assert sorted(service.deleted) == ["/v1/streams/s1", "/v1/streams/s2", "/v1/streams/s3"]


def test_no_service_at_the_target_is_a_clear_error_and_exit_code_2_not_a_traceback(tmp_path, caplog):
    from loadtest.streams import run

    # port 9 (discard) on loopback: nothing listens, the registration's connection is refused
    code = run(["--file", "a.mp4", "--cameras", "1", "--duration-s", "1", "--target", "http://127.0.0.1:9",
                "--out", str(tmp_path / "out")])
    assert code == 2
    assert "could not reach the service at http://127.0.0.1:9 (ConnectError" in caplog.text


def test_a_window_is_as_fresh_as_its_last_answer():
    # Three questions per window; the graph asks questions 2 and 3 after the first one's first token.
    statuses = {"a": {"name": "a", "windows_dropped": {}, "state": "running"}}
    answers = [timed("a", f, 100.0 + 10 * w + f, q=q) | {"window_index": w}
               for w in range(6) for q, f in enumerate((2.0, 2.9, 3.4))]
    r = summarize(answers, statuses, 60.0)
    t = r["total"]
    assert t["answers"] == 6 and t["freshness_s_p95"] == pytest.approx(3.4)
    assert t["first_question_freshness_s_p95"] == pytest.approx(2.0)
    v = verdict(r, answers, 3.0, 0.01, 0.05, windows_cut=6)
    assert not v["keeps_up"] and any("p95 freshness 3.4" in x for x in v["reasons"])
    other_stream = [answer("b", 9.0, w=0)]  # the same window index on another stream is another window
    both = summarize(answers + other_stream, statuses | {"b": statuses["a"]}, 60.0)
    assert both["cameras"]["b"]["answers"] == 1 and both["total"]["answers"] == 7


def test_the_total_says_where_a_windows_time_went_on_the_server():
    def full(sid, ttft_ms, model_ms, q=0):
        a = answer(sid, 2.0, latency_ms=ttft_ms + model_ms, q=q)
        a["timings"].update(decode_ms=5.0, queue_ms=1.0, ttft_ms=ttft_ms, model_ms=model_ms)
        return a

    answers = [full("a", 400.0, 2000.0), full("a", 600.0, 2200.0, q=1), full("b", 500.0, 2100.0),
               {**full("b", 0.0, 0.0), "timings": {**full("b", 0.0, 0.0)["timings"], "ttft_ms": None}},
               full("gone", 9000.0, 9000.0)]  # a camera not in the statuses is left out
    statuses = {"a": {"name": "a", "windows_dropped": {}}, "b": {"name": "b", "windows_dropped": {}}}
    server = summarize(answers, statuses, 10.0)["total"]["server_ms"]
    assert server["ttft_ms"] == {"p50": 500.0, "p95": pytest.approx(590.0)}  # the null ttft left out
    assert server["model_ms"]["p50"] == pytest.approx(2050.0) and server["decode_ms"] == {"p50": 5.0, "p95": 5.0}
    assert set(server) == {"decode_ms", "queue_ms", "ttft_ms", "model_ms", "latency_ms"}
    assert summarize([answer("a", 1.0)], statuses, 1.0)["total"]["server_ms"]["ttft_ms"] == {"p50": None, "p95": None}
