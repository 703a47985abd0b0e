"""The streams routes without Ray: the SSE subscriber cap, Last-Event-ID, event framing, validation."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.requests import Request

from serve_app.cameras.protocol import EventBatch, StateEvent
from serve_app.cameras.routes import StreamsServing, validate_stream
from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError
from serve_app.http.context import RouteRunner
from serve_app.http.request_id import STATE_KEY


class Metrics:
    def started(self): ...
    def finished(self, *a, **k): ...
    def error(self, *a, **k): ...


class Remote:
    def __init__(self, fn):
        self.remote = fn


class FakeWorker:
    """``events.remote(after, stream_id, timeout_s)``: one state event after id 10, then nothing."""

    def __init__(self):
        self.calls: list[tuple] = []

        async def events(after, stream_id, timeout_s):
            self.calls.append((after, stream_id, timeout_s))
            if after is not None and after < 11:
                return EventBatch(
                    events=[StateEvent(id=11, stream_id="s", time=1.0, state="running", previous="connecting")],
                    last_id=11,
                )
            await asyncio.sleep(min(timeout_s, 0.01))
            return EventBatch(events=[], last_id=11)

        self.events = Remote(events)


def request(path="/v1/events", headers=None) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "GET", "path": path, "query_string": b"", "headers": raw,
                    "path_params": {}, "root_path": "", "state": {STATE_KEY: "req-1"}})


def serving(max_subscribers=1):
    cfg = AppConfig.model_validate({"streams": {"max_subscribers": max_subscribers}})
    worker = FakeWorker()
    return StreamsServing(RouteRunner(cfg, None, None, Metrics()), [worker]), worker


def test_events_replay_after_last_event_id_and_end_with_the_client():
    async def main():
        sv, worker = serving(max_subscribers=1)
        first = await sv.events(request(headers={"Last-Event-ID": "10"}))
        assert first.status_code == 200
        it = first.body_iterator
        chunks = [await it.__anext__() for _ in range(3)]
        await it.aclose()  # the client went away
        return chunks, worker.calls

    chunks, calls = asyncio.run(main())
    text = b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks).decode()
    assert "id: 11\nevent: state\ndata: {" in text  # replayed after Last-Event-ID 10
    assert calls[0] == (10, None, 0.0)


class ScriptedWorker:
    """``events.remote``: the first call (the connect poll) answers an empty batch at ``last_id``; later calls
    pop ``script`` (an exception is raised, a batch returned); once it is empty, long polls wait (no events)."""

    def __init__(self, last_id: int, script: list):
        self.calls: list[tuple] = []

        async def events(after, stream_id, timeout_s):
            self.calls.append((after, stream_id, timeout_s))
            if len(self.calls) == 1:
                return EventBatch(events=[], last_id=last_id)
            if script:
                step = script.pop(0)
                if isinstance(step, Exception):
                    raise step
                return step
            await asyncio.sleep(timeout_s)
            return EventBatch(events=[], last_id=last_id)

        self.events = Remote(events)


def state_batch(i: int, sid: str) -> EventBatch:
    return EventBatch(events=[StateEvent(id=i, stream_id=sid, time=1.0, state="running", previous=None)], last_id=i)


def stream_of(workers, n_chunks: int) -> list[str]:
    async def main():
        cfg = AppConfig.model_validate({"streams": {"workers": len(workers)}})
        sv = StreamsServing(RouteRunner(cfg, None, None, Metrics()), workers)
        r = await sv.events(request())
        it = r.body_iterator
        out = []
        for _ in range(n_chunks):
            try:
                chunk = await asyncio.wait_for(it.__anext__(), 10)
            except StopAsyncIteration:
                break
            out.append(chunk.decode() if isinstance(chunk, bytes) else chunk)
        await it.aclose()
        return out

    return asyncio.run(main())


def test_one_worker_that_fails_ends_the_events_with_an_error_to_reconnect_after():
    chunks = stream_of([ScriptedWorker(10, [RuntimeError("replica died")])], 5)
    assert chunks[-1].startswith("event: error\n") and "reconnect with Last-Event-ID" in chunks[-1]
    assert len(chunks) == 3  # the opening comment, the keep-alive of the empty first batch, the error: then the end


def test_with_two_workers_one_that_fails_does_not_stop_the_others_events(monkeypatch):
    monkeypatch.setattr("serve_app.cameras.routes.WORKER_RETRY_S", 0.05)
    ok = ScriptedWorker(10, [state_batch(12, "a"), state_batch(14, "a")])
    failing = ScriptedWorker(21, [RuntimeError("replica died"), state_batch(23, "b")])
    chunks = stream_of([ok, failing], 6)  # opening, keep-alive, 12, the comment, 14 and 23 (the last two: any order)
    text = "".join(chunks)
    assert ": stream worker 1 unavailable" in text and "event: error" not in text
    ids = [line[4:] for c in chunks for line in c.splitlines() if line.startswith("id: ")]
    assert ids == ["12-21", "14-21", "14-23"] or ids == ["12-21", "12-23", "14-23"]  # both workers, each in order
    assert failing.calls[2][0] == 21  # polled again from its position


def test_bad_last_event_id_is_400():
    async def main():
        sv, _ = serving()
        return await sv.events(request(headers={"Last-Event-ID": "x"}))

    r = asyncio.run(main())
    assert r.status_code == 400 and json.loads(r.body)["error"]["param"] == "Last-Event-ID"


@pytest.mark.parametrize(
    "body, param",
    [
        (
            {"url": "rtsp://192.0.2.10/x", "questions": ["q"], "window_s": 30, "fps": 8},
            "fps",
        ),  # 240 frames > limits.max_frames (200)
        ({"url": "rtsp://192.0.2.10/x", "questions": ["q"] * 9}, "questions"),
        ({"url": "rtsp://192.0.2.10/x", "questions": ["q"], "max_tokens": 10**6}, "max_tokens"),
        ({"url": "rtsp://192.0.2.10/x", "questions": ["q"], "webhook": "ftp://x/y"}, "webhook"),
        ({"url": "rtsp://192.0.2.10/x", "questions": ["q"], "window_s": 0.1, "fps": 1}, "fps"),
    ],
)
def test_validate_stream_limits(body, param):
    # 192.0.2.10 (TEST-NET-1, a literal: no DNS, no traffic) is allowed as a camera via allowed_networks
    cfg = AppConfig.model_validate({"limits": {"max_frames": 200}, "sources": {"allowed_networks": ["192.0.2.0/24"]}})
    with pytest.raises(InvalidRequestError) as e:
        validate_stream(body, cfg)
    assert e.value.param == param
