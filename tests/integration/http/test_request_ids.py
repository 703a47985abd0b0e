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


def test_the_questions_of_one_query_share_a_server_made_clip_identity(recording_app):
    body = {"questions": ["a?", "b?", "c?"], "video_path": "dashcam_0p4s.mp4", "max_tokens": 2}
    responses = [httpx.post(recording_app + "/v1/video/query", json=body, headers={"x-request-id": CLIENT_ID},
                            timeout=60) for _ in range(2)]  # fmt: skip
    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    media_of_request = []
    for r in responses:
        out = r.json()
        answers = out["answers"]
        assert [a["question"] for a in answers] == ["a?", "b?", "c?"]
        assert out["text"] == answers[0]["text"] and out["usage"] == answers[0]["usage"]
        seen = [tuple(a["text"].split()) for a in answers]  # "<engine id> <media uuid>"
        engine_ids = {engine_id for engine_id, _ in seen}
        media = {media_uuid for _, media_uuid in seen}
        assert len(engine_ids) == 3 and len(media) == 1  # a request per question, one clip identity
        (uuid,) = media
        assert re.fullmatch(r"clip-[0-9a-f]{32}", uuid) and uuid not in {f"clip-{e}" for e in engine_ids}
        assert CLIENT_ID not in uuid
        media_of_request.append(uuid)
    assert media_of_request[0] != media_of_request[1]  # never shared across requests


def test_one_question_has_no_answers_list(recording_app):
    r = httpx.post(recording_app + "/v1/video/query", json={"question": "q", "video_path": "dashcam_0p4s.mp4"},
                   timeout=60)
    assert r.status_code == 200 and "answers" not in r.json()
