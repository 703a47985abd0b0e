"""The whole graph with the second model family: the tiny random Qwen3-VL (Cosmos-Reason2's architecture)
served beside the Qwen2.5-VL app in the session's Serve, on both routes, the official ``openai`` client and a
live camera (random weights: the text is meaningless; shapes, counts and names are checked)."""

from __future__ import annotations

import httpx
import openai
import pytest

from serve_app.testing import local_serve
from serve_app.testing.polling import wait_for

MODEL = "tiny-random-qwen3_vl"
PREFIX = "/reason2"


@pytest.fixture(scope="module")
def reason2_app(serve_session, tiny_qwen3_checkpoint) -> str:
    """``configs/cpu-reason2.yaml``'s model section deployed at ``/reason2``; yields its base URL."""
    local_serve.deploy("reason2", PREFIX, local_serve.cpu_app_args(model=local_serve.reason2_model_args()))
    return serve_session + PREFIX


def test_a_clip_question_is_answered_with_32_pixel_frames_and_the_qwen3_token_count(reason2_app):
    r = httpx.post(f"{reason2_app}/v1/video/query", json={
        "question": "What happens?", "video_path": "intel_car-detection.mp4", "end_s": 2, "max_tokens": 4,
        "ignore_eos": True}, timeout=180)  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == MODEL and body["random_weights"] is True
    v = body["video"]
    assert v["num_frames"] == 8 and v["frame_width"] % 32 == 0 and v["frame_height"] % 32 == 0
    n_video = v["num_frames"] // 2 * (v["frame_height"] // 32) * (v["frame_width"] // 32)
    assert body["usage"]["video_tokens"] == n_video
    # the processor's prompt: the video tokens plus a "<t seconds>" text and vision start/end per frame pair
    assert body["usage"]["prompt_tokens"] > n_video + 4 * 4
    assert body["usage"]["completion_tokens"] == 4 and body["finish_reason"] == "length"
    # Qwen3-VL's reasoning format: no </think> in 4 random tokens is an answer-only text (or none at all)
    assert body["answer"] == (body["text"].strip() or None) or "</think>" in body["text"]


def test_the_openai_client_gets_a_completion_from_the_qwen3_app(reason2_app):
    client = openai.OpenAI(base_url=f"{reason2_app}/v1", api_key="unused", max_retries=0, timeout=180)
    assert [m.id for m in client.models.list().data] == [MODEL]
    r = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {
                "role": "user",
                "content": [
                    {"type": "video_url", "video_url": {"url": "intel_car-detection.mp4"}},
                    {"type": "text", "text": "Is anyone in danger?"},
                ],
            },
        ],
        max_tokens=3,
        extra_body={"end_s": 2, "ignore_eos": True},
    )
    assert r.model == MODEL and r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"


def test_a_camera_on_the_qwen3_app_is_answered(reason2_app):
    r = httpx.post(f"{reason2_app}/v1/streams", json={
        "url": "intel_bottle-detection.mp4", "name": "reason2-cam", "window_s": 2, "fps": 2, "loop": True,
        "questions": ["Is there a person?"], "max_tokens": 4}, timeout=30)  # fmt: skip
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        def answered() -> dict | None:
            s = httpx.get(f"{reason2_app}/v1/streams/{sid}", timeout=30).json()
            return s if s["windows_answered"] >= 1 else None

        status = wait_for(answered, 180, step_s=1.0)
        assert status is not None, httpx.get(f"{reason2_app}/v1/streams/{sid}", timeout=30).text
        assert status["last_answer"]["random_weights"] is True
    finally:
        httpx.delete(f"{reason2_app}/v1/streams/{sid}", timeout=30)
