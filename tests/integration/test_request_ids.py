"""Issue 13 item 2 on real Serve (CPU): a client's X-Request-Id is echoed and logged, never
used as an engine id or a clip's multimodal UUID (the key of vLLM's encoder cache)."""

from __future__ import annotations

import re

import httpx
import pytest

from serve_app.testing.local_serve import deploy

CLIENT_ID = "same-id-from-two-clients"


@pytest.fixture(scope="module")
def recording_app(serve_session, data_dir):
    from ray import serve

    small = {"num_cpus": 0, "max_ongoing_requests": 4}
    deploy("ids", "/ids", {
        "model": {"backend": "serve_app.testing.engines:recording_engine", "model_id": "recording", "warmup": False},
        "sources": {"allowed_roots": [str(data_dir)]},
        "ingress": small, "decoder": small, "model_replica": small,
    })
    yield f"{serve_session}/ids"
    serve.delete("ids")


@pytest.mark.parametrize("route", ["query", "chat"])
def test_the_same_x_request_id_twice_reaches_the_engine_with_two_server_ids(recording_app, route):
    if route == "query":
        url, body = "/v1/video/query", {"question": "q", "video_path": "dashcam_0p4s.mp4", "max_tokens": 2}
    else:
        content = [{"type": "text", "text": "q"}, {"type": "video_url", "video_url": {"url": "dashcam_0p4s.mp4"}}]
        url, body = "/v1/chat/completions", {"model": "recording", "messages": [{"role": "user", "content": content}]}
    responses = [httpx.post(recording_app + url, json=body, headers={"x-request-id": CLIENT_ID}, timeout=60)
                 for _ in range(2)]
    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    assert [r.headers["x-request-id"] for r in responses] == [CLIENT_ID, CLIENT_ID]  # echoed
    if route == "query":
        texts = [r.json()["text"] for r in responses]
    else:
        texts = [r.json()["choices"][0]["message"]["content"] for r in responses]
    seen = [tuple(t.split()) for t in texts]  # the recording engine answers "<engine id> <media uuid>"
    assert seen[0] != seen[1]
    for engine_id, media_uuid in seen:
        assert re.fullmatch(r"gen-[0-9a-f]{32}", engine_id) and media_uuid == f"clip-{engine_id}"
        assert CLIENT_ID not in engine_id and CLIENT_ID not in media_uuid
