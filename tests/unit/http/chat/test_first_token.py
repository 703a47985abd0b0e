"""The OpenAI stream sends no chunk with ``choices`` before the engine's first token (as vLLM's server).

``vllm bench serve`` (backend ``openai-chat``) and similar clients take the first chunk with ``choices``
as the first token: a role chunk sent before the engine produced anything makes their TTFT false.

The real ingress, decoder and model classes run in this process (:mod:`inprocess`) with the scripted
engine, whose first token is held back by the test (a gate standing in for a long prefill). The ASGI
app is driven directly, so every body chunk the route sends is recorded in one log, in order, with
the engine's first token: the log's order is the assertion (no timing).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from inprocess import inprocess_app

DATA = Path(__file__).resolve().parents[3] / "data"
MODEL = "cosmos-first-token"
FIRST_TOKEN = "engine: first token"


def app_args() -> dict:
    return {
        "model": {
            "backend": "serve_app.testing.engines:scripted_engine",
            "model_id": "scripted",
            "served_model_name": MODEL,
            "warmup": False,
            "stream_interval_ms": 0,
        },
        "sources": {"allowed_roots": [str(DATA)]},
    }


def gate_first_token(model, log: list, release: asyncio.Event) -> None:
    """Holds the engine's first text chunk until ``release`` is set, then logs :data:`FIRST_TOKEN`."""
    generate = model.engine.generate

    async def gated(request):
        first = True
        async for chunk in generate(request):
            if first and chunk.text:
                await release.wait()
                log.append(FIRST_TOKEN)
                first = False
            yield chunk

    model.engine.generate = gated


async def post_recording(app, path: str, body: dict, log: list, on_first_body=None) -> int:
    """POSTs ``body`` to the ASGI ``app``; each body chunk is appended to ``log`` as it is sent.
    Returns the status. ``on_first_body`` is called when the response starts (its headers are sent)."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"test"),
                    (b"content-length", str(len(raw)).encode())],
        "client": ("127.0.0.1", 50000), "server": ("test", 80),
    }  # fmt: skip
    sent = False
    finished = asyncio.Event()
    status = 0

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            if on_first_body is not None:
                on_first_body()
        elif message["type"] == "http.response.body":
            if message.get("body"):
                log.append(message["body"].decode())
            if not message.get("more_body", False):
                finished.set()

    await asyncio.wait_for(app(scope, receive, send), timeout=120)
    return status


def events_of(log: list) -> list:
    """The log with each body chunk split into its SSE data payloads (parsed JSON, or ``[DONE]``)."""
    out: list = []
    for item in log:
        if item == FIRST_TOKEN:
            out.append(item)
            continue
        for block in item.split("\n\n"):
            if block.startswith("data: "):
                data = block[len("data: "):]
                out.append(data if data == "[DONE]" else json.loads(data))
    return out


def chat_body(**extra) -> dict:
    content = [{"type": "video_url", "video_url": {"url": "dashcam_0p4s.mp4"}}, {"type": "text", "text": "What?"}]
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 3, "stream": True,
            **extra}  # fmt: skip


@pytest.mark.parametrize("include_usage", [False, True])
def test_no_choices_chunk_before_the_engines_first_token(include_usage):
    async def main():
        log: list = []
        release = asyncio.Event()
        async with inprocess_app(app_args()) as (app, model):
            gate_first_token(model, log, release)
            # the first token comes only once the response has started: anything the route sends
            # before it would be in the log first
            loop = asyncio.get_running_loop()
            status = await post_recording(
                app, "/v1/chat/completions", chat_body(stream_options={"include_usage": include_usage}), log,
                on_first_body=lambda: loop.call_soon(release.set),
            )
        return status, events_of(log)

    status, events = asyncio.run(main())
    assert status == 200
    first = events.index(FIRST_TOKEN)
    assert not any(isinstance(e, dict) and e.get("choices") for e in events[:first]), events[: first + 1]
    chunks = [e for e in events if isinstance(e, dict)]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # the role chunk, first
    assert chunks[1]["choices"][0]["delta"]["content"]  # then the first token's text
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert (chunks[-1]["choices"] == []) is include_usage
    assert events[-1] == "[DONE]"


def test_an_engine_error_before_any_token_sends_no_role_chunk():
    async def main():
        log: list = []
        async with inprocess_app(app_args()) as (app, _):
            body = chat_body()
            body["messages"][0]["content"][1]["text"] = "[die] now"
            status = await post_recording(app, "/v1/chat/completions", body, log)
        return status, events_of(log)

    status, events = asyncio.run(main())
    assert status == 200
    assert not any(isinstance(e, dict) and e.get("choices") for e in events)
    assert events[0]["error"]["type"] == "overloaded" and events[-1] == "[DONE]"
