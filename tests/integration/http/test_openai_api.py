"""The OpenAI-compatible route on the real CPU graph, driven by the official ``openai`` client."""

import base64
import json

import httpx
import openai
import pytest
from httpx_sse import connect_sse

MODEL = "tiny-random-qwen2_5_vl"
QUESTION = "Is anyone in this scene in danger?"


@pytest.fixture(scope="module")
def client(cpu_app):
    return openai.OpenAI(base_url=f"{cpu_app}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def data_url(data_dir):
    return "data:video/mp4;base64," + base64.b64encode((data_dir / "intel_car-detection.mp4").read_bytes()).decode()


def messages(url, question=QUESTION):
    return [
        {
            "role": "user",
            "content": [{"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": question}],
        }
    ]


def test_models_lists_the_served_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError, match=MODEL):
        client.models.retrieve("gpt-4o")


def test_data_url_clip_gets_a_chat_completion_with_usage(client, data_url):
    r = client.chat.completions.create(
        model=MODEL,
        messages=messages(data_url),
        max_tokens=5,
        temperature=0,
        extra_body={"end_s": 2, "ignore_eos": True},
    )
    assert r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-")
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 5  # ignore_eos fixes the length
    assert r.usage.prompt_tokens > 100  # 8 frames of video tokens + the prompt
    assert r.usage.total_tokens == r.usage.prompt_tokens + 5


def test_streaming_with_the_openai_client_ends_with_usage(client, data_url):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages(data_url),
        max_completion_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"end_s": 2, "ignore_eos": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    assert len({c.id for c in chunks}) == 1


def test_raw_sse_stream_ends_with_done(cpu_app, data_dir):
    body = {
        "model": MODEL,
        "messages": messages("intel_car-detection.mp4"),  # a path relative to the allowed root
        "stream": True,
        "max_tokens": 3,
        "end_s": 1,
    }
    with httpx.Client(timeout=120) as client, connect_sse(client, "POST", f"{cpu_app}/v1/chat/completions",
                                                            json=body) as source:
        r = source.response
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [sse.data for sse in source.iter_sse()]
    assert events[-1] == "[DONE]"
    objs = [json.loads(e) for e in events[:-1]]
    assert {o["object"] for o in objs} == {"chat.completion.chunk"}
    assert objs[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_file_url_under_the_allowed_root(client, data_dir):
    r = client.chat.completions.create(
        model=MODEL,
        messages=messages((data_dir / "intel_car-detection.mp4").resolve().as_uri()),
        max_tokens=2,
        extra_body={"start_s": 3, "end_s": 4},
    )
    assert r.choices[0].message.content is not None and r.usage.completion_tokens <= 2


@pytest.mark.parametrize(
    ("kwargs", "exc", "err_type", "param"),
    [
        ({"model": "gpt-4o"}, openai.NotFoundError, "not_found", "model"),
        ({"max_tokens": 10**6}, openai.BadRequestError, "invalid_request_error", "max_tokens"),
        ({"temperature": 5}, openai.BadRequestError, "invalid_request_error", "temperature"),
        (
            {"extra_body": {"frequency_penalty": 1}},
            openai.BadRequestError,
            "invalid_request_error",
            "frequency_penalty",
        ),
        (
            {"messages": [{"role": "user", "content": "no clip here"}]},
            openai.BadRequestError,
            "invalid_request_error",
            None,
        ),
        ({"extra_body": {"fps": 60}}, openai.BadRequestError, "invalid_request_error", "fps"),
    ],
)
def test_bad_requests_get_the_project_error_shape(client, data_dir, kwargs, exc, err_type, param):
    args = {"model": MODEL, "messages": messages("intel_car-detection.mp4"), "max_tokens": 2, **kwargs}
    with pytest.raises(exc) as e:
        client.chat.completions.create(**args)
    err = e.value.response.json()["error"]
    assert err["type"] == err_type and err["message"]
    if param:
        assert err["param"] == param


def test_not_a_video_is_415_and_the_service_keeps_serving(client):
    not_video = "data:video/mp4;base64," + base64.b64encode(b"this is text, not a video" * 40).decode()
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model=MODEL, messages=messages(not_video), max_tokens=2)
    assert e.value.status_code in (415, 422)
    assert e.value.response.json()["error"]["type"] in ("unsupported_media_type", "unprocessable_clip")
    r = client.chat.completions.create(
        model=MODEL, messages=messages("intel_car-detection.mp4"), max_tokens=2, extra_body={"end_s": 1}
    )
    assert r.choices[0].finish_reason in ("stop", "length")


def test_malformed_json_body_is_400(cpu_app):
    r = httpx.post(
        f"{cpu_app}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}, timeout=30
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_a_system_message_replaces_the_default_system_prompt(client, data_url):
    """As with plain vLLM, a system message is rendered with the model's template, in place of the
    server's Cosmos-Reason1 prompt: the prompt gets shorter with a short system message."""
    args = {"model": MODEL, "max_tokens": 2, "extra_body": {"end_s": 1}}
    default = client.chat.completions.create(messages=messages(data_url), **args)
    terse = client.chat.completions.create(
        messages=[{"role": "system", "content": "Be terse."}, *messages(data_url)], **args
    )
    assert terse.choices[0].message.content is not None
    assert 0 < terse.usage.prompt_tokens < default.usage.prompt_tokens


def test_a_conversation_about_one_clip(client, data_url):
    """The first user message carries the clip; later text turns are rendered after it (one clip)."""
    args = {"model": MODEL, "max_tokens": 2, "extra_body": {"end_s": 1}}
    one = client.chat.completions.create(messages=messages(data_url), **args)
    convo = [
        *messages(data_url),
        {"role": "assistant", "content": "A car drives along a road."},
        {"role": "user", "content": [{"type": "text", "text": "Is the driver safe?"}]},
    ]
    stream = client.chat.completions.create(messages=convo, stream=True, stream_options={"include_usage": True}, **args)
    chunks = list(stream)
    usage = chunks[-1].usage
    assert one.usage.prompt_tokens < usage.prompt_tokens < one.usage.prompt_tokens + 40  # same clip, more text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequences_cut_the_answer_before_the_stop_string(client, stream):
    """Greedy decoding makes the tiny model's text repeatable: a stop string taken from the middle of
    one answer cuts the same request's answer right before its first occurrence (vLLM's semantics)."""
    args = {"model": MODEL, "messages": messages("intel_car-detection.mp4"), "max_tokens": 12, "temperature": 0,
            "extra_body": {"end_s": 1, "ignore_eos": True}}  # fmt: skip
    full = client.chat.completions.create(**args).choices[0].message.content
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    expected = full[: full.find(stop)]
    if not stream:
        r = client.chat.completions.create(**args, stop=[stop])
        text, reason = r.choices[0].message.content, r.choices[0].finish_reason
    else:
        chunks = list(client.chat.completions.create(**args, stop=stop, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        reason = next(c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason)
    assert (text, reason) == (expected, "stop"), (full, stop)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"n": 2}, "n"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.png"}}]}]},
            "messages.0.content.0.type",
        ),
    ],
)
def test_what_is_not_served_is_a_clear_400(client, kwargs, param):
    args = {"model": MODEL, "messages": messages("intel_car-detection.mp4"), "max_tokens": 2, **kwargs}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**args)
    err = e.value.response.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]
