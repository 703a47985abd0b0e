"""The one server-sent-event framer (serve_app.http.sse.sse_event), as the clip routes and the camera events use it."""

from __future__ import annotations

import json

from serve_app.cameras.protocol import StateEvent
from serve_app.errors import ErrorEvent, OverloadedError, error_body
from serve_app.http.sse import sse_event


def parse(frame: bytes) -> dict[str, str]:
    text = frame.decode()
    assert text.endswith("\n\n") and text.count("\n\n") == 1  # one event, one blank line
    return dict(line.split(": ", 1) for line in text[:-2].split("\n"))


def test_a_clip_route_event_is_data_only_and_done_is_a_literal():
    assert sse_event("[DONE]") == b"data: [DONE]\n\n"
    fields = parse(sse_event(ErrorEvent(error=error_body(OverloadedError("busy")).error)))
    assert set(fields) == {"data"} and json.loads(fields["data"])["error"]["type"] == "overloaded"


def test_a_camera_event_carries_its_id_and_type_for_last_event_id():
    ev = StateEvent(id=42, stream_id="str_1", time=1.0, state="running", previous="connecting")
    fields = parse(sse_event(ev, event=ev.type, event_id=ev.id))
    assert list(fields) == ["id", "event", "data"]  # the order EventSource reads
    assert fields["id"] == "42" and fields["event"] == "state" and json.loads(fields["data"])["state"] == "running"


def test_an_error_event_on_the_events_route_uses_the_one_error_shape():
    fields = parse(sse_event(ErrorEvent(error=error_body(OverloadedError("restarting")).error), event="error"))
    body = json.loads(fields["data"])
    assert fields["event"] == "error" and body["type"] == "error"
    assert body["error"] == {"type": "overloaded", "message": "restarting", "param": None}
