"""OpenAI requests real clients send: a system message, a conversation about one clip, stop strings.

Pure parts (the request's mapping, the stop scanner) and the model's side without Ray
(:func:`serve_app.model.generation.answer_stream` over the scripted engine), then the whole graph in this
process (:mod:`inprocess`) driven by the official ``openai`` client over an ASGI transport.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from inprocess import inprocess_app

from serve_app.config import AppConfig, ModelConfig
from serve_app.http.chat import parsing as chat_parsing
from serve_app.model.generation import answer_stream
from serve_app.model.stop_strings import StopScanner
from serve_app.model_facts import COSMOS_SYSTEM_PROMPT
from serve_app.protocol import ClipQuestion, DecodedClip, Delta, Done, SamplingOptions, Turn
from serve_app.testing.engines import ScriptedEngine

DATA = Path(__file__).resolve().parents[3] / "data"
MODEL = "cosmos-chat"
CFG = AppConfig.model_validate({"model": {"served_model_name": MODEL}})


def clip_message(url="clip.mp4", text="What happens?") -> dict:
    parts = [{"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": text}]
    return {"role": "user", "content": parts}


# --- the request's mapping ------------------------------------------------------------------------


def test_system_message_and_later_turns_map_onto_the_question():
    q = chat_parsing.parse_chat_request(
        {"model": MODEL, "stop": "END", "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
            clip_message(),
            {"role": "assistant", "content": "A car turns left."},
            {"role": "user", "content": [{"type": "text", "text": "Was it"}, {"type": "text", "text": "safe?"}]},
        ]},
        CFG,
    )  # fmt: skip
    assert q.query.question == "What happens?" and q.video_url == "clip.mp4"
    assert q.system_prompt == "Be terse." and q.stop == ("END",) and q.clip_index == 1
    assert q.history == (Turn("assistant", "A car turns left."), Turn("user", "Was it\nsafe?"))
    assert q.video_param == "messages.1.content.video_url"


def test_developer_role_is_the_system_message_and_no_system_keeps_the_default():
    q = chat_parsing.parse_chat_request({"model": MODEL, "messages": [{"role": "developer", "content": "D"},
                                                                    clip_message()]}, CFG)  # fmt: skip
    assert q.system_prompt == "D" and q.history == () and q.stop == ()
    q = chat_parsing.parse_chat_request({"model": MODEL, "messages": [clip_message()], "stop": ["a", "b"]}, CFG)
    assert q.system_prompt is None and q.stop == ("a", "b")


# --- stop strings -------------------------------------------------------------------------------


def feed_all(scanner: StopScanner, deltas: list[str]) -> str:
    out = "".join(scanner.feed(d) for d in deltas)
    return out + scanner.flush()


def test_a_stop_string_split_across_deltas_is_never_sent():
    s = StopScanner(["STOP"])
    sent = [s.feed("abc ST"), s.feed("O"), s.feed("P tail")]
    assert "".join(sent) == "abc " and s.stopped and s.matched == "STOP"
    assert all("ST" not in part for part in sent)
    assert s.feed("more") == "" and s.flush() == ""


def test_the_last_characters_are_held_back_as_vllm_does():
    s = StopScanner(["STOP"])  # longest stop: 4 characters, so the last 3 are held
    assert s.feed("abST") == "a"
    assert s.feed("x") == "b"
    assert s.flush() == "STx" and not s.stopped


def test_of_two_stop_strings_the_one_that_ends_first_wins():
    assert feed_all(StopScanner(["long stop", "ng"]), ["a long stop"]) == "a lo"
    assert feed_all(StopScanner(["long stop", "op"]), ["a long stop"]) == "a "  # same end: the earlier start
    assert feed_all(StopScanner(["xyz", "b"]), ["abxyz"]) == "a"


def test_no_stop_string_sends_everything():
    assert feed_all(StopScanner(["zz"]), ["a", "bz", "c"]) == "abzc"
    with pytest.raises(ValueError):
        StopScanner([""])


# --- the model's side (answer_stream) ----------------------------------------------------------------


class PromptEngine(ScriptedEngine):
    """The scripted engine ("engine-<hex> tok1 tok2 …"), recording each prompt and abort."""

    def __init__(self):
        super().__init__(ModelConfig())
        self.prompts: list[str] = []
        self.aborted: list[str] = []

    async def generate(self, request):
        self.prompts.append(request.prompt)
        async for chunk in super().generate(request):
            yield chunk

    async def abort(self, request_id):
        self.aborted.append(request_id)
        await super().abort(request_id)


def clip() -> DecodedClip:
    return DecodedClip(
        frames=np.zeros((2, 56, 84, 3), np.uint8), timestamps_s=np.array([0.0, 0.5]), fps=2.0,
        source_width=84, source_height=56, source_fps=2.0, duration_s=1.0, warnings=(), decode_ms=1.0,
    )  # fmt: skip


def run(engine, question: ClipQuestion) -> list:
    async def go():
        return [c async for c in answer_stream(engine, question, clip(), model_name="m", system_prompt="CONFIGURED")]

    return asyncio.run(go())


def sampling(max_tokens=8, stop=()) -> SamplingOptions:
    return SamplingOptions(max_tokens=max_tokens, temperature=0, top_p=1, repetition_penalty=1, stop=stop)


def test_stop_ends_the_answer_before_the_string_and_aborts_the_engine():
    engine = PromptEngine()
    chunks = run(engine, ClipQuestion("r", "q", sampling(10, stop=("tok3",))))
    text = "".join(c.text for c in chunks if isinstance(c, Delta))
    done = chunks[-1]
    assert text.startswith("engine-") and text.endswith(" tok1 tok2 ") and "tok3" not in text
    assert isinstance(done, Done) and done.finish_reason == "stop" and done.completion_tokens == 4
    assert len(engine.aborted) == 1 and engine.num_unfinished() == 0  # the engine's slot is free again


def test_without_a_stop_hit_the_held_back_text_is_sent_at_the_end():
    chunks = run(PromptEngine(), ClipQuestion("r", "q", sampling(3, stop=("never here",))))
    text = "".join(c.text for c in chunks if isinstance(c, Delta))
    assert text.endswith(" tok1 tok2 ") and chunks[-1].finish_reason == "length"


def test_the_request_system_prompt_and_history_reach_the_prompt():
    engine = PromptEngine()
    history = (Turn("assistant", "A car."), Turn("user", "Safe?"))
    run(engine, ClipQuestion("r", "What?", sampling(1), system_prompt="Be terse.", history=history))
    run(engine, ClipQuestion("r", "What?", sampling(1)))
    mine, default = engine.prompts
    assert mine == (
        "<|im_start|>system\nBe terse.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>What?<|im_end|>\n"
        "<|im_start|>assistant\nA car.<|im_end|>\n<|im_start|>user\nSafe?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert default.startswith("<|im_start|>system\nCONFIGURED<|im_end|>\n") and "Safe?" not in default
    assert default.count("<|video_pad|>") == mine.count("<|video_pad|>") == 1  # one clip


# --- the whole graph with the official openai client ---------------------------------------------------


def app_args() -> dict:
    return {
        "model": {"backend": "serve_app.testing.engines:scripted_engine", "model_id": "scripted",
                  "served_model_name": MODEL, "warmup": False, "stream_interval_ms": 0},
        "sources": {"allowed_roots": [str(DATA)]},
    }  # fmt: skip


def with_client(work):
    """Runs ``await work(client, model)`` with an ``openai.AsyncOpenAI`` client on the in-process graph."""

    async def go():
        async with inprocess_app(app_args()) as (app, model):
            engine = model.engine
            prompts: list[str] = []
            generate = engine.generate

            def recording(request):
                prompts.append(request.prompt)
                return generate(request)

            engine.generate = recording
            http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test/v1")
            client = openai.AsyncOpenAI(base_url="http://test/v1", api_key="unused", http_client=http, max_retries=0)
            try:
                return await work(client), prompts
            finally:
                await client.close()

    return asyncio.run(go())


def test_openai_client_system_message_and_conversation():
    async def work(client):
        return await client.chat.completions.create(
            model=MODEL, max_tokens=2,
            messages=[{"role": "system", "content": "Be terse."}, clip_message("dashcam_0p4s.mp4", "What?"),
                      {"role": "assistant", "content": "A road."}, {"role": "user", "content": "Any cars?"}],
        )  # fmt: skip

    r, prompts = with_client(work)
    assert r.choices[0].message.content and r.choices[0].finish_reason == "length"
    (prompt,) = prompts  # one engine request: the clip was decoded once, for the whole conversation
    assert prompt.startswith("<|im_start|>system\nBe terse.<|im_end|>\n") and COSMOS_SYSTEM_PROMPT not in prompt
    assert prompt.endswith("<|im_start|>assistant\nA road.<|im_end|>\n<|im_start|>user\nAny cars?<|im_end|>\n"
                           "<|im_start|>assistant\n")  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_openai_client_stop_sequences(stream):
    async def work(client):
        args = {"model": MODEL, "max_tokens": 10, "stop": ["tok4", "tok2 tok3"],
                "messages": [clip_message("dashcam_0p4s.mp4")]}  # fmt: skip
        if not stream:
            r = await client.chat.completions.create(**args)
            return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens
        chunks = [c async for c in await client.chat.completions.create(
            **args, stream=True, stream_options={"include_usage": True})]  # fmt: skip
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        return text, reasons[-1], chunks[-1].usage.completion_tokens

    (text, reason, tokens), _ = with_client(work)
    assert text.endswith(" tok1 ") and "tok2" not in text  # "tok2 tok3" ends first: cut before it
    assert reason == "stop" and tokens == 4


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"n": 2}, "n"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.png"}}]}]},
         "messages.0.content.0.type"),
        ({"messages": [clip_message("dashcam_0p4s.mp4"), {"role": "assistant", "content": "x"}]}, "messages"),
        ({"stop": [""]}, "stop"),
    ],
)
def test_openai_client_gets_clear_400s_for_what_is_not_served(kwargs, param):
    async def work(client):
        args = {"model": MODEL, "max_tokens": 2, "messages": [clip_message("dashcam_0p4s.mp4")], **kwargs}
        with pytest.raises(openai.BadRequestError) as e:
            await client.chat.completions.create(**args)
        return e.value

    err, prompts = with_client(work)
    body = err.response.json()["error"]
    assert err.status_code == 400 and body["type"] == "invalid_request_error" and body["param"] == param
    assert prompts == []  # refused before the engine
