"""Request building, SSE parsing, error classification, the bounded runner and server-limit checks.

The HTTP exchanges here go through ``httpx.MockTransport`` (no sockets); the
real server is exercised in tests/integration/loadtest/test_loadtest.py.
"""

import asyncio
import json

import httpx
import pytest
from clock import run_virtual
from pydantic import ValidationError

from loadtest.camera import Window
from loadtest.client import build_request, parse_sse_data, send
from loadtest.records import RequestRecord
from loadtest.runner import Feed, Runner
from loadtest.settings import (
    CameraSpec,
    RunSettings,
    ServerLimitError,
    check_against_server,
    load_cameras_file,
    make_cameras,
)
from serve_app.config import AppConfig

WINDOW = Window(3, 30.0, 40.0, 0.4, 10.4, b"\x00\x01mp4", "remux", 0.4)


def settings(**kw):
    base = {"cameras": [CameraSpec(id="cam-0", source="/clips/a.mp4")], "max_tokens": 16}
    return RunSettings(**{**base, **kw})


def test_an_uploaded_window_is_multipart_with_its_trim_and_limits():
    s = settings(ignore_eos=True, request_seed=7)
    cam = CameraSpec(id="lobby", source="/clips/a.mp4", fps=2, max_frames=16)
    req = build_request(cam, WINDOW, "Is anyone in danger?", s)
    assert req.json is None
    assert req.files == {"video": ("lobby-w3.mp4", WINDOW.data, "video/mp4")} and req.bytes_sent == len(WINDOW.data)
    assert req.data == {
        "question": "Is anyone in danger?", "camera_id": "lobby", "fps": "2.0", "max_frames": "16",
        "start_s": "0.4", "end_s": "10.4", "max_tokens": "16", "seed": "7", "stream": "true", "ignore_eos": "true",
    }


def test_a_url_camera_sends_json_with_the_url_and_window():
    cam = CameraSpec(id="gate", source="rtsp://10.0.0.5/stream1")
    url_window = Window(2, 20.0, 30.0, 20.0, 30.0, None, "url")
    req = build_request(cam, url_window, "q", settings(stream=False))
    assert req.files is None and req.bytes_sent == 0
    assert req.json == {"video_url": "rtsp://10.0.0.5/stream1", "question": "q", "camera_id": "gate",
                        "start_s": 20.0, "end_s": 30.0, "max_tokens": 16, "stream": False}


def test_path_transport_sends_the_resolved_local_path(tmp_path):
    clip = tmp_path / "a.mp4"
    cam = CameraSpec(id="c", source=str(clip))
    req = build_request(cam, Window(0, 0.0, 10.0, 0.0, 10.0, None, "path"), "q", settings(transport="path"))
    assert req.json["video_path"] == str(clip.resolve()) and (req.json["start_s"], req.json["end_s"]) == (0.0, 10.0)


def test_sse_data():
    assert parse_sse_data('{"type": "delta", "text": "a"}') == {"type": "delta", "text": "a"}
    assert parse_sse_data("[DONE]") == "[DONE]"
    with pytest.raises(ValueError):
        parse_sse_data("{not json")
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_sse_data('["a", "list"]')


DONE = {"type": "done", "id": "vq-1", "video": {"num_frames": 40},
        "usage": {"prompt_tokens": 8155, "completion_tokens": 3, "video_tokens": 8100},
        "timings": {"decode_ms": 100.0, "queue_ms": 5.0, "model_ms": 900.0, "ttft_ms": 400.0, "total_ms": 1010.0}}


#: The response header of every event stream (httpx-sse refuses a stream without it).
SSE = {"content-type": "text/event-stream"}


def sse(*events) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


async def exchange(handler, stream=True) -> RequestRecord:
    rec = RequestRecord(0, "cam-0", 0, False, 0.0, 0.0, 0.0, 10.0)
    ticks = iter(range(1, 100))
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://t") as client:
        req = build_request(CameraSpec(id="cam-0"), WINDOW, "q", settings(stream=stream))
        await send(client, "/v1/video/query", req, rec, lambda: float(next(ticks)), stream)
    return rec


def test_streaming_response_gives_ttft_and_the_servers_timings_and_usage():
    def handler(request):
        assert b'name="stream"\r\n\r\ntrue' in request.read()
        body = sse({"type": "clip", "video": {"num_frames": 40}}, {"type": "delta", "text": "a"},
                   {"type": "delta", "text": "b"}, DONE, "[DONE]")
        return httpx.Response(200, content=body, headers={"x-request-id": "vq-1", **SSE})

    rec = asyncio.run(exchange(handler))
    assert rec.ok and rec.status == 200 and rec.request_id == "vq-1"
    assert rec.first_token_s == 1.0 and rec.done_s == 2.0  # first delta stamped before completion
    assert (rec.decode_ms, rec.queue_ms, rec.model_ms, rec.server_ttft_ms) == (100.0, 5.0, 900.0, 400.0)
    assert (rec.prompt_tokens, rec.completion_tokens, rec.video_tokens, rec.num_frames) == (8155, 3, 8100, 40)


def test_error_status_keeps_the_servers_error_type():
    def handler(request):
        return httpx.Response(503, json={"error": {"type": "overloaded", "message": "busy", "param": None}})

    rec = asyncio.run(exchange(handler))
    assert not rec.ok and rec.status == 503 and rec.error_kind == "http"
    assert rec.error_type == "overloaded" and rec.error_message == "busy"


def test_a_stream_without_done_and_transport_failures_are_classified():
    rec = asyncio.run(exchange(lambda r: httpx.Response(200, content=sse({"type": "delta", "text": "a"}), headers=SSE)))
    assert rec.error_kind == "protocol" and "without a 'done'" in rec.error_message

    def refuse(request):
        raise httpx.ConnectError("connection refused")

    assert asyncio.run(exchange(refuse)).error_kind == "connect"

    def slow(request):
        raise httpx.ReadTimeout("timed out")

    assert asyncio.run(exchange(slow, stream=False)).error_kind == "timeout"
    err = asyncio.run(exchange(lambda r: httpx.Response(200, content=sse({"type": "error", "error": {
        "type": "internal_error", "message": "boom"}}, "[DONE]"), headers=SSE)))
    assert err.error_kind == "stream" and err.error_type == "internal_error"
    # A 200 that is not an event stream (a proxy's HTML page, say) is a protocol error, not a crash.
    html = asyncio.run(exchange(lambda r: httpx.Response(200, content=b"<html>ok</html>",
                                                         headers={"content-type": "text/html"})))
    assert html.error_kind == "protocol" and "text/event-stream" in (html.error_message or "")


def test_non_streaming_response_body():
    rec = asyncio.run(exchange(lambda r: httpx.Response(200, json={k: v for k, v in DONE.items() if k != "type"}),
                               stream=False))
    assert rec.ok and rec.first_token_s is None and rec.completion_tokens == 3


def run_against(handler, feeds=None, stop_at_s=None, **kw):
    """Runs the runner against ``handler`` in virtual time: sleeps in the handler and the schedule
    take no wall time, and every time the records hold is exact."""
    s = settings(**kw)
    feeds = feeds or [Feed(c, (WINDOW,)) for c in s.cameras]

    def factory(st):
        return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://t")

    async def main():
        runner = Runner(s, feeds, client_factory=factory, clock=asyncio.get_running_loop().time)
        if stop_at_s is not None:
            asyncio.get_running_loop().call_later(stop_at_s, runner.stop, True)
        return await runner.run()

    return run_virtual(main())


def answer_after(delay_s: float, log: list | None = None):
    """A handler that answers a stream after ``delay_s`` (virtual) seconds, logging (send time, in flight)."""
    inflight = [0]

    async def handler(request):
        inflight[0] += 1
        if log is not None:
            log.append((asyncio.get_running_loop().time(), inflight[0]))
        await asyncio.sleep(delay_s)
        inflight[0] -= 1
        return httpx.Response(200, content=sse({"type": "delta", "text": "a"}, DONE, "[DONE]"), headers=SSE)

    return handler


def test_the_runner_sends_every_planned_window_and_stops_by_itself():
    cams = make_cameras(3, ["/clips/a.mp4"], window_s=0.2)
    recs = run_against(answer_after(0.05), cameras=cams, duration_s=0.6, warmup_s=0.2)
    assert len(recs) == 9 and all(r.ok for r in recs)  # 3 cameras × windows at phase, +0.2, +0.4 s
    assert sorted({r.camera_id for r in recs}) == ["cam-0", "cam-1", "cam-2"]
    assert [r.warmup for r in recs[:3]] == [True, True, True] and not any(r.warmup for r in recs[3:])
    # uniform phases 0, 0.2/3, 0.4/3 s; sent on time; answered 50 ms later
    assert [round(r.scheduled_s, 4) for r in recs[:3]] == [0.0, 0.0667, 0.1333]
    assert all(r.lag_ms == pytest.approx(0, abs=1e-6) for r in recs)
    assert all(r.latency_ms == pytest.approx(50) and r.delta_events == 1 for r in recs)
    capped = run_against(answer_after(0.05), cameras=cams, duration_s=0.6, max_requests=4)
    assert len(capped) == 4


def test_answers_still_running_after_the_drain_are_recorded_unfinished():
    recs = run_against(answer_after(30), duration_s=0.1, drain_s=0.3)
    assert len(recs) == 1 and recs[0].error_kind == "unfinished"
    assert recs[0].stopped_s == pytest.approx(0.4) and recs[0].freshness_s == pytest.approx(0.4) and recs[0].missed


def test_closed_loop_keeps_concurrency_requests_in_flight():
    log = []
    recs = run_against(answer_after(0.05, log), cameras=make_cameras(2), schedule="closed", concurrency=3,
                       duration_s=0.52)
    assert max(n for _, n in log) == 3 and all(r.ok for r in recs)
    assert len(recs) == 33  # 3 workers × sends at 0, 0.05, …, 0.5 s (one 50-ms answer after another)
    assert all(r.freshness_s == pytest.approx(r.latency_ms / 1000) for r in recs)  # no real-time pacing
    # worker w sends requests w, w + 3, …: camera q mod 2 → both cameras get a fair share
    assert [r.camera_id for r in recs].count("cam-0") in (16, 17)


def test_a_paced_closed_loop_never_overlaps_a_cameras_requests():
    log = []
    # answers take 0.3 s, longer than the 0.2-s period: each camera's next request waits for its answer
    recs = run_against(answer_after(0.3, log), cameras=make_cameras(2), schedule="closed", interval_s=0.2,
                       duration_s=0.95)
    by_cam = {c: [r for r in recs if r.camera_id == c] for c in ("cam-0", "cam-1")}
    assert [round(r.sent_s, 3) for r in by_cam["cam-0"]] == [0.0, 0.3, 0.6, 0.9]
    assert [round(r.sent_s, 3) for r in by_cam["cam-1"]] == [0.1, 0.4, 0.7]  # staggered by half a period
    assert max(n for _, n in log) == 2 and all(r.ok for r in recs)
    fast = run_against(answer_after(0.05), cameras=make_cameras(1), schedule="closed", interval_s=0.2,
                       duration_s=0.95)
    assert [round(r.sent_s, 3) for r in fast] == [0.0, 0.2, 0.4, 0.6, 0.8]  # answered early: on the period


def test_a_fixed_batch_sends_each_window_once_with_bounded_concurrency():
    log = []
    windows = tuple(Window(i, 0.0, 10.0, float(i), float(i) + 10, b"mp4") for i in range(5))
    cams = [CameraSpec(id="batch", source="/clips/a.mp4")]
    recs = run_against(answer_after(1.0, log), feeds=[Feed(cams[0], windows, cycle=False)], cameras=cams,
                       schedule="closed", concurrency=2, duration_s=3600)
    assert sorted(r.window_index for r in recs) == [0, 1, 2, 3, 4]
    assert max(n for _, n in log) == 2 and [round(t, 6) for t, _ in log] == [0.0, 0.0, 1.0, 1.0, 2.0]


def test_stop_with_drain_sends_nothing_more_and_keeps_the_answers_in_flight():
    recs = run_against(answer_after(0.5), cameras=make_cameras(2), schedule="closed", duration_s=3600,
                       stop_at_s=1.2)
    assert len(recs) == 6 and all(r.ok for r in recs)  # 2 cameras × sends at 0, 0.5, 1.0 s
    assert max(r.done_s for r in recs) == pytest.approx(1.5)


def test_a_refusal_keeps_its_retry_after():
    def handler(request):
        return httpx.Response(503, headers={"retry-after": "2"}, json={"error": {"type": "overloaded"}})

    rec = asyncio.run(exchange(handler))
    assert rec.status == 503 and rec.error_type == "overloaded" and rec.retry_after_s == 2.0
    assert asyncio.run(exchange(lambda r: httpx.Response(429, headers={"retry-after": "soon"}))).retry_after_s is None


def test_deltas_are_counted_in_both_json_spacings():
    body = (b'data: {"type": "delta", "text": "a"}\n\ndata: {"type":"delta","text":"b"}\n\n'
            b'data: {"type": "delta", "text": "c"}\n\n' + sse(DONE, "[DONE]"))
    rec = asyncio.run(exchange(lambda r: httpx.Response(200, content=body, headers=SSE)))
    assert rec.ok and rec.delta_events == 3 and rec.first_token_s == 1.0


def test_server_limits_are_checked_before_sending():
    cfg = AppConfig.model_validate({"model": {"allow_ignore_eos": False}, "limits": {"max_tokens": 32}})
    with pytest.raises(ServerLimitError, match="max_tokens 64 exceeds the server limit 32") as e:
        check_against_server(settings(max_tokens=64, ignore_eos=True), cfg)
    assert "allow_ignore_eos" in str(e.value)
    check_against_server(settings(max_tokens=32), cfg)


def test_settings_refuse_unknown_keys_and_duplicate_cameras(tmp_path):
    f = tmp_path / "cams.yaml"
    f.write_text("- {id: gate, source: rtsp://x/1, window_s: 5}\n- {id: lobby, frames_per_second: 2}\n")
    with pytest.raises(ValidationError, match="frames_per_second"):
        load_cameras_file(f, {"window_s": 10.0})
    f.write_text("- {id: gate, source: rtsp://x/1, window_s: 5}\n- {id: lobby, questions: 'Anyone there?'}\n")
    cams = load_cameras_file(f, {"window_s": 10.0, "fps": 2.0})
    assert [(c.id, c.window_s, c.fps) for c in cams] == [("gate", 5.0, 2.0), ("lobby", 10.0, 2.0)]
    assert cams[1].questions == ["Anyone there?"]
    with pytest.raises(ValidationError, match="camera ids must be unique"):
        settings(cameras=[CameraSpec(id="a"), CameraSpec(id="a")])


def test_cli_help_states_each_default_once():
    from loadtest.__main__ import parser

    text = parser().format_help()
    assert "(default: None)" not in text and "(default: False)" not in text
    assert "(default: 4)" in text  # --cameras
    flat = " ".join(text.split())
    # options whose help states its own default get no second one appended
    assert "intel_car-detection.mp4) (default" not in flat and "unlimited) (default" not in flat
