"""The OpenAI-compatible request parsing and response shapes (pure)."""

import base64
from pathlib import Path

import pytest

from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from serve_app.http.chat import parsing as chat_parsing
from serve_app.http.chat import protocol as openai_api
from serve_app.http.chat import video_url as chat_video_url
from serve_app.protocol import Done

CFG = AppConfig.model_validate({"model": {"served_model_name": "cosmos", "allow_ignore_eos": True}})


def body(url="clip.mp4", text="What happens?", **extra):
    return {
        "model": "cosmos",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": text}, {"type": "video_url", "video_url": {"url": url}}],
            }
        ],
        **extra,
    }


def test_request_maps_onto_the_clip_query():
    q = chat_parsing.parse_chat_request(
        body(max_completion_tokens=7, temperature=0.2, top_p=0.5, seed=3, fps=2, end_s=5, camera_id="cam-1",
             stream=True, stream_options={"include_usage": True}),
        CFG,
    )
    assert q.video_url == "clip.mp4" and q.include_usage
    qq = q.query
    assert (qq.question, qq.max_tokens, qq.temperature, qq.top_p, qq.seed) == ("What happens?", 7, 0.2, 0.5, 3)
    assert (qq.fps, qq.end_s, qq.camera_id, qq.stream) == (2, 5, "cam-1", True)


def test_text_parts_join_into_the_question():
    q = chat_parsing.parse_chat_request(
        {
            "model": "cosmos",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "First."},
                        {"type": "video_url", "video_url": {"url": "a.mp4"}},
                        {"type": "text", "text": "Second?"},
                    ],
                }
            ],
        },
        CFG,
    )
    assert q.query.question == "First.\nSecond?"


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"model": "other"}, "model"),
        ({"n": 2}, "n"),
        ({"stop": [""]}, "stop"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": "x" * 257}, "stop"),
        ({"logit_bias": {}}, "logit_bias"),
        ({"max_tokens": 10**6}, "max_tokens"),
        ({"seed": 2**64}, "seed"),
        ({"temperature": float("nan")}, "temperature"),
        ({"max_tokens": 5, "max_completion_tokens": 6}, "max_completion_tokens"),
        ({"end_s": 1, "start_s": 2}, "end_s"),
        (
            {"messages": [{"role": "system", "content": "be terse"}, {"role": "user", "content": "hi"}]},
            "messages.1.content",
        ),
        ({"messages": [{"role": "system", "content": "be terse"}]}, "messages"),
        ({"messages": [{"role": "assistant", "content": "hello"}, *body()["messages"]]}, "messages.0.role"),
        ({"messages": [*body()["messages"], {"role": "system", "content": "x"}]}, "messages.1.role"),
        ({"messages": [*body()["messages"], {"role": "tool", "content": "x", "tool_call_id": "1"}]},
         "messages.1.tool_call_id"),
        ({"messages": [*body()["messages"], {"role": "tool", "content": "x"}]}, "messages.1.role"),
        ({"messages": [*body()["messages"], {"role": "assistant", "content": "an answer"}]}, "messages"),
        ({"messages": [*body()["messages"], {"role": "assistant", "content": None}, {"role": "user", "content": "q"}]},
         "messages.1.content"),
        ({"messages": [*body()["messages"], {"role": "assistant", "content": "a"}, *body("b.mp4")["messages"]]},
         "messages.2.content.1"),
        ({"messages": [{"role": "system", "content": "be <|im_end|> terse"}, *body()["messages"]]},
         "messages.0.content"),
        ({"messages": [*body()["messages"], {"role": "assistant", "content": "a"},
                       {"role": "user", "content": "<|vision_start|>"}]}, "messages.2.content"),
        ({"messages": [{"role": "system", "content": "s" * 8000}, *body()["messages"]]}, "messages"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"messages": [{"role": "user", "content": "just text"}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]}, "messages.0.content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "a"}}]}]},
            "messages.0.content",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a"}}]}]},
            "messages.0.content.0.type",
        ),
        ({"ignore_eos": True, "model": "cosmos"}, None),
    ],
)
def test_bad_fields_name_the_field(patch, param):
    b = {**body(), **patch}
    if param is None:  # allowed here (allow_ignore_eos), refused by a default config
        chat_parsing.parse_chat_request(b, CFG)
        with pytest.raises(InvalidRequestError) as e:
            chat_parsing.parse_chat_request({**b, "model": "nvidia/Cosmos-Reason1-7B"}, AppConfig())
        assert e.value.param == "ignore_eos"
        return
    with pytest.raises((InvalidRequestError, NotFoundError)) as e:
        chat_parsing.parse_chat_request(b, CFG)
    assert e.value.param == param, e.value.message
    assert e.value.message


def test_not_an_object_is_400():
    with pytest.raises(InvalidRequestError):
        chat_parsing.parse_chat_request([1, 2], CFG)


def test_data_url_is_decoded_and_size_checked():
    raw = b"\x00\x00\x00\x18ftypmp42" * 10
    src = chat_video_url.clip_source("data:video/mp4;base64," + base64.b64encode(raw).decode(), CFG)
    assert src.data == raw
    small = AppConfig.model_validate({"limits": {"max_upload_bytes": 50}})
    with pytest.raises(PayloadTooLargeError) as e:
        chat_video_url.clip_source("data:video/mp4;base64," + base64.b64encode(raw).decode(), small)
    assert "limit is 50 bytes" in e.value.message


def test_a_browser_recorder_data_url_with_a_comma_in_its_codecs_is_decoded():
    # handed bug case: MediaRecorder labels its clips video/webm;codecs=vp8,opus (a comma before ;base64,)
    raw = (Path(__file__).resolve().parents[3] / "data" / "browser_recorder_vp8_opus.webm").read_bytes()
    url = "data:video/webm;codecs=vp8,opus;base64," + base64.b64encode(raw).decode()
    assert chat_video_url.clip_source(url, CFG).data == raw


@pytest.mark.parametrize(
    "url",
    [
        "data:video/mp4,notbase64",
        "data:image/png;base64,AAAA",
        "data:video/mp4;base64,@@@@",
        "data:;base64,",
        "data:abc",
        "ftp://example.com/a.mp4",
        "javascript:alert(1)",
    ],
)
def test_bad_video_urls_are_400(url):
    with pytest.raises(InvalidRequestError):
        chat_video_url.clip_source(url, CFG)


def test_paths_and_file_urls_become_path_sources():
    assert chat_video_url.clip_source("sub/clip.mp4", CFG).path == "sub/clip.mp4"
    assert chat_video_url.clip_source("file:///data/my%20clip.mp4", CFG).path == "/data/my clip.mp4"
    with pytest.raises(InvalidRequestError):
        chat_video_url.clip_source("file://remote-host/clip.mp4", CFG)


def test_response_shapes():
    done = Done(finish_reason="length", prompt_tokens=10, completion_tokens=2)
    c = openai_api.ChatCompletion.build(completion_id="chatcmpl-x", created=1, model="m", done=done, text="hi")
    c = c.model_dump()
    assert c["object"] == "chat.completion" and c["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert c["choices"][0]["finish_reason"] == "length"
    assert c["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    ids = {"id": "chatcmpl-x", "created": 1, "model": "m"}
    last = openai_api.ChunkChoice(delta=openai_api.ChoiceDelta(), finish_reason=openai_api.finish_reason("abort"))
    end = openai_api.ChatCompletionChunk(**ids, choices=[last]).model_dump()
    assert end["object"] == "chat.completion.chunk" and end["choices"][0]["finish_reason"] == "stop"
    assert end["choices"][0]["delta"] == {} and "usage" not in end
    first = openai_api.ChoiceDelta(role="assistant", content="").model_dump()
    assert first == {"role": "assistant", "content": ""}
    u = openai_api.ChatCompletionChunk(**ids, choices=[], usage=openai_api.CompletionUsage.of(None, 3)).model_dump()
    assert u["choices"] == [] and u["usage"]["total_tokens"] == 3
    card = openai_api.ModelCard(id="m", created=5)
    assert openai_api.ModelList(data=[card]).model_dump()["data"] == [
        {"id": "m", "object": "model", "created": 5, "owned_by": "cosmos-serve"}
    ]


def test_rtsps_and_other_schemes_are_refused_before_the_decoder():
    # One list of network schemes (serve_app.sources.rules.DEFAULT_PORTS) for both routes.
    assert set(chat_video_url.NETWORK_SCHEMES) == {"http", "https", "rtsp"}
    with pytest.raises(InvalidRequestError) as e:
        chat_video_url.clip_source("rtsps://cam.example/stream", CFG)
    assert e.value.param == chat_video_url.VIDEO_URL_PARAM and "rtsps" in e.value.message
