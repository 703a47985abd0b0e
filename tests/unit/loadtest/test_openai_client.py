"""The load tester against any OpenAI server (``--api openai``) and with every question per window.

HTTP goes through ``httpx.MockTransport`` in virtual time (no sockets); the CPU app's real OpenAI
route is driven in tests/integration/loadtest/test_loadtest.py.
"""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest
from clock import run_virtual
from pydantic import ValidationError

from loadtest.camera import Window, source_windows
from loadtest.client import build_request, chat_request, send
from loadtest.records import RequestRecord
from loadtest.runner import Feed, Runner
from loadtest.settings import CameraSpec, RunSettings

WINDOW = Window(3, 30.0, 40.0, 0.0, 10.0, b"\x00\x01mp4 bytes", "reencode", 0.0)
QUESTIONS = ["Is anyone in danger?", "How many cars?", "Is the road wet?"]


def settings(**kw) -> RunSettings:
    base = {"cameras": [CameraSpec(id="cam-0", source="/clips/a.mp4", questions=QUESTIONS, window_s=0.2)],
            "max_tokens": 16, "api": "openai", "model": "nvidia/Cosmos-Reason1-7B"}
    return RunSettings(**{**base, **kw})


def test_a_chat_request_carries_the_window_as_a_data_url_and_the_question():
    s = settings(ignore_eos=True, temperature=0.0, request_seed=7)
    req = build_request(s.cameras[0], WINDOW, "How many cars?", s)
    body = req.json
    assert body is not None and req.files is None
    assert body["model"] == "nvidia/Cosmos-Reason1-7B" and body["max_tokens"] == 16
    (msg,) = body["messages"]
    video, text = msg["content"]
    prefix = "data:video/mp4;base64,"
    assert msg["role"] == "user" and video["type"] == "video_url" and video["video_url"]["url"].startswith(prefix)
    assert base64.b64decode(video["video_url"]["url"][len(prefix):]) == WINDOW.data
    assert text == {"type": "text", "text": "How many cars?"}
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["temperature"] == 0.0 and body["seed"] == 7
    assert "start_s" not in body and "camera_id" not in body  # nothing a plain OpenAI server would refuse
    assert req.bytes_sent == len(WINDOW.data)
    plain = chat_request(WINDOW, "q", settings(stream=False))
    assert plain.json is not None and "stream_options" not in plain.json and "ignore_eos" not in plain.json


def test_extra_body_is_merged_into_each_chat_request_and_may_not_replace_the_testers_fields():
    s = settings(extra_body={"mm_processor_kwargs": {"device": "cuda"}})
    body = chat_request(WINDOW, "q", s).json
    assert body is not None and body["mm_processor_kwargs"] == {"device": "cuda"} and body["max_tokens"] == 16
    assert "mm_processor_kwargs" not in (chat_request(WINDOW, "q", settings()).json or {})
    with pytest.raises(ValidationError, match="may not replace the load tester's own fields: max_tokens, model"):
        settings(extra_body={"model": "other", "max_tokens": 1})
    with pytest.raises(ValidationError, match="extra_body is for api openai"):
        settings(api="native", extra_body={"x": 1})


def test_a_chat_request_needs_the_windows_bytes_and_a_model():
    with pytest.raises(ValueError, match="window's bytes"):
        chat_request(Window(0, 0, 10, 0, 10, None, "path"), "q", settings())
    with pytest.raises(ValueError, match="model name"):
        chat_request(WINDOW, "q", settings(model=None))


@pytest.mark.parametrize("kw", [{"transport": "path"},
                                {"cameras": [CameraSpec(id="c", source="rtsp://cam.example/live")]}])
def test_openai_mode_refuses_what_it_cannot_send(kw):
    with pytest.raises(ValidationError, match="api openai sends each window's bytes"):
        settings(**kw)


def test_the_route_follows_the_api():
    assert settings().effective_route == "/v1/chat/completions"
    assert settings(api="native").effective_route == "/v1/video/query"
    assert settings(route="/x").effective_route == "/x"


def chunk(**delta) -> str:
    return "data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk",
                                  "choices": [{"index": 0, "delta": delta}]}) + "\n\n"


def test_an_openai_stream_gives_ttft_at_the_first_content_and_the_usage():
    async def handler(request):
        await asyncio.sleep(0.2)
        body = (chunk(role="assistant", content="") + chunk(content="Two") + chunk(content=" cars")
                + "data: " + json.dumps({"id": "c1", "choices": [], "usage": {"prompt_tokens": 8100,
                                                                                "completion_tokens": 2}}) + "\n\n"
                + "data: [DONE]\n\n")
        return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})

    async def main():
        loop = asyncio.get_running_loop()
        rec = RequestRecord(0, "cam-0", 0, False, 0.0, 0.0, 10.0, 10.0)
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://t") as client:
            await send(client, "/v1/chat/completions", chat_request(WINDOW, "q", settings()), rec, loop.time, True)
        return rec

    rec = run_virtual(main())
    assert rec.ok and rec.delta_events == 2 and rec.first_token_s == pytest.approx(0.2)
    assert rec.prompt_tokens == 8100 and rec.completion_tokens == 2


def test_all_questions_are_asked_about_every_window_together():
    seen: list[tuple[float, str, str]] = []

    async def handler(request):
        body = json.loads(request.content)
        seen.append((asyncio.get_running_loop().time(), request.url.path, body["messages"][0]["content"][1]["text"]))
        await asyncio.sleep(0.05)
        return httpx.Response(200, content=(chunk(content="a") + "data: [DONE]\n\n").encode(),
                              headers={"content-type": "text/event-stream"})

    s = settings(all_questions=True, duration_s=0.4)
    windows = (WINDOW, Window(4, 40.0, 50.0, 0.0, 10.0, b"other window", "reencode", 0.0))
    feeds = [Feed(s.cameras[0], windows)]

    async def main():
        factory = lambda st: httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://t")  # noqa: E731
        return await Runner(s, feeds, client_factory=factory, clock=asyncio.get_running_loop().time).run()

    recs = run_virtual(main())
    assert len(recs) == 6 and all(r.ok for r in recs)  # 2 windows (0 and 0.2 s) × 3 questions
    assert {p for _, p, _ in seen} == {"/v1/chat/completions"}
    for t in (0.0, 0.2):
        asked = sorted(q for at, _, q in seen if at == pytest.approx(t))
        assert asked == sorted(QUESTIONS)  # every question of the window, sent at the same moment
    assert sorted(r.question_index for r in recs) == [0, 0, 1, 1, 2, 2]

    seen.clear()
    s1 = settings(duration_s=0.4)

    async def one_per_window():
        factory = lambda st: httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://t")  # noqa: E731
        return await Runner(s1, [Feed(s1.cameras[0], windows)], client_factory=factory,
                            clock=asyncio.get_running_loop().time).run()

    recs = run_virtual(one_per_window())
    assert len(recs) == 2 and [q for _, _, q in seen] == QUESTIONS[:2]  # round-robin: one question per window
    assert all(r.question_index is None for r in recs)


def test_exact_windows_start_at_the_window(data_dir):
    windows = source_windows(str(data_dir / "intel_car-detection.mp4"), 5.0, exact=True)
    assert windows and all(w.preroll_s == 0.0 and w.start_s == 0.0 for w in windows)
    cut = source_windows(str(data_dir / "intel_car-detection.mp4"), 5.0)
    assert any(w.preroll_s > 0 for w in cut)  # the default keeps a keyframe's preroll (native: start_s trims it)


def test_the_cli_refuses_settings_the_run_would_refuse_as_a_usage_error_naming_the_rule(capsys):
    from loadtest.__main__ import main

    base = ["--api", "openai", "--model", "m", "--source", "tests/data/intel_car-detection.mp4", "--no-live"]
    for extra, rule in [(["--extra-body", '{"model": "x"}'], "may not replace the load tester's own fields: model"),
                        (["--transport", "path"], "api openai sends each window's bytes")]:
        with pytest.raises(SystemExit) as e:
            main(base + extra)
        err = capsys.readouterr().err
        assert e.value.code == 2 and rule in err and "Traceback" not in err and "input_value" not in err
