"""The OpenAI-compatible chat API's request and response shapes (pure; used by the ingress).

``POST /v1/chat/completions`` takes OpenAI's Chat Completions body with one
user message whose content holds one ``video_url`` part (a ``data:`` URL with
base64 video, an ``http(s)://``/``rtsp://`` URL, or a file path under the
allowed roots, optionally as ``file://``) and text parts (the question).
Sampling fields follow OpenAI (``max_tokens``/``max_completion_tokens``,
``temperature``, ``top_p``, ``seed``, ``stream``, ``stream_options``); like
vLLM, extra fields passed with the client's ``extra_body`` add
``repetition_penalty``, ``ignore_eos`` and the clip options ``fps``,
``max_frames``, ``start_s``, ``end_s``, ``camera_id``.

Shapes follow OpenAI's API reference (Chat Completions: the ``chat.completion``
object, the ``chat.completion.chunk`` streaming object, ``GET /v1/models``).
Every limit is the one of ``/v1/video/query``: the fields are validated by
:func:`serve_app.api.validate_query`.
"""

from __future__ import annotations

import binascii
import dataclasses
import time
import uuid
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from serve_app.api import QueryRequest, parse_json_object, validate_query
from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from serve_app.sources import ClipSource

#: URL schemes fetched by the decoder (network sources).
NETWORK_SCHEMES = ("http", "https", "rtsp", "rtsps")
#: Media types accepted in a ``data:`` URL (an empty type is accepted too: the decoder sniffs the container).
DATA_MEDIA_PREFIXES = ("video/", "application/octet-stream")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class VideoURL(_Strict):
    """``{"url": "..."}`` of a ``video_url`` content part."""

    url: str = Field(..., min_length=1, description="data: URL, http(s)/rtsp URL, file:// URL or file path.")


class ContentPart(_Strict):
    """One part of a message's content: ``text`` or ``video_url``."""

    type: Literal["text", "video_url"] = Field(..., description="Part kind.")
    text: str | None = Field(None, description="The text of a text part.")
    video_url: VideoURL | None = Field(None, description="The clip of a video_url part.")


class ChatMessage(_Strict):
    """One chat message."""

    role: Literal["system", "developer", "user", "assistant", "tool"] = Field(..., description="Author role.")
    content: str | list[ContentPart] | None = Field(None, description="Text, or a list of content parts.")
    name: str | None = Field(None, description="Optional author name (ignored).")


class StreamOptions(_Strict):
    """OpenAI's ``stream_options``."""

    include_usage: bool = Field(False, description="Send a last chunk with token usage and no choices.")


class ChatCompletionRequest(_Strict):
    """The accepted body of ``POST /v1/chat/completions`` (unknown fields: 400)."""

    model: str = Field(..., min_length=1, description="Must name the served model (GET /v1/models).")
    messages: list[ChatMessage] = Field(..., min_length=1, description="One user message (optionally after system).")
    stream: bool = Field(False, description="Stream chat.completion.chunk objects as server-sent events.")
    stream_options: StreamOptions | None = Field(None, description="Streaming options.")
    max_tokens: int | None = Field(None, ge=1, description="Output budget in tokens (legacy name).")
    max_completion_tokens: int | None = Field(None, ge=1, description="Output budget in tokens.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling mass.")
    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="RNG seed (0 … 2**63 - 1).")
    n: Literal[1] = Field(1, description="Number of choices: only 1 is served.")
    stop: str | list[str] | None = Field(None, description="Stop sequences: not supported (must be empty).")
    user: str | None = Field(None, max_length=256, description="End-user label (logged).")
    # Extensions (vLLM-style extra_body fields).
    repetition_penalty: float | None = Field(None, gt=0, le=2, description="Repetition penalty.")
    ignore_eos: bool = Field(False, description="Benchmark-only; needs model.allow_ignore_eos.")
    fps: float | None = Field(None, gt=0, le=30, description="Sampling rate in frames/s.")
    max_frames: int | None = Field(None, ge=2, description="Cap on sampled frames.")
    start_s: float | None = Field(None, ge=0, description="Window start in clip seconds.")
    end_s: float | None = Field(None, gt=0, description="Window end in clip seconds.")
    camera_id: str | None = Field(None, max_length=128, description="Camera label for logs.")


@dataclasses.dataclass(frozen=True)
class ChatQuery:
    """A validated chat request, in the terms of the clip pipeline.

    Attributes:
        query: the equivalent ``/v1/video/query`` fields (limits already checked).
        video_url: the clip's URL or path as given.
        include_usage: send a usage chunk at the end of a stream.
    """

    query: QueryRequest
    video_url: str
    include_usage: bool


def _validation_error(e: ValidationError) -> InvalidRequestError:
    # With unions (content: str | list of parts) pydantic reports every branch; the deepest
    # error is the one about what the client sent.
    err = max(e.errors(), key=lambda x: len(x.get("loc", ())))
    loc = [str(x) for x in err.get("loc", ())]
    # Drop pydantic's union-branch names ("list[ContentPart]", "str") from the field path.
    param = ".".join(x for x in loc if not any(c in x for c in "[]()") and x != "str") or None
    msg = err.get("msg", "invalid value")
    if err.get("type") == "extra_forbidden":
        msg = "unknown or unsupported field"
    return InvalidRequestError(f"{param}: {msg}" if param else msg, param=param)


def parse_chat_request(body: Any, config: AppConfig) -> ChatQuery:
    """Validates a chat completions body and maps it onto the clip pipeline.

    Args:
        body: the decoded JSON body.
        config: limits and the served model's name.

    Raises:
        InvalidRequestError (400): not an object, unknown field, out-of-range value,
            messages not one user turn with exactly one ``video_url`` and some text,
            ``stop`` given, or a limit of :func:`serve_app.api.validate_query` exceeded.
        NotFoundError (404): ``model`` is not the served model.
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("JSON body must be an object")
    try:
        req = ChatCompletionRequest.model_validate(body)
    except ValidationError as e:
        raise _validation_error(e) from None
    if req.model != config.model.name:
        raise NotFoundError(
            f"model {req.model!r} is not served here; this server serves {config.model.name!r}", param="model"
        )
    if req.stop:
        raise InvalidRequestError("stop sequences are not supported by this server", param="stop")
    question, video_url = _user_turn(req.messages)
    if req.max_tokens is not None and req.max_completion_tokens is not None and req.max_tokens != req.max_completion_tokens:
        raise InvalidRequestError(
            "max_tokens and max_completion_tokens differ; give one of them", param="max_completion_tokens"
        )
    fields = {
        "question": question,
        "max_tokens": req.max_completion_tokens or req.max_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "seed": req.seed,
        "repetition_penalty": req.repetition_penalty,
        "ignore_eos": req.ignore_eos,
        "fps": req.fps,
        "max_frames": req.max_frames,
        "start_s": req.start_s,
        "end_s": req.end_s,
        "stream": req.stream,
        "camera_id": req.camera_id,
    }
    try:
        query = validate_query({k: v for k, v in fields.items() if v is not None}, config)
    except InvalidRequestError as e:  # the question is the user message's text here
        if e.param == "question":
            e.param = "messages.0.content"
        raise
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return ChatQuery(query=query, video_url=video_url, include_usage=include_usage)


def _user_turn(messages: list[ChatMessage]) -> tuple[str, str]:
    """The question text and the video URL of the one user message."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    others = [(i, m.role) for i, m in enumerate(messages) if m.role != "user"]
    if others:
        i, role = others[0]
        raise InvalidRequestError(
            f"messages[{i}] has role {role!r}: this server answers one user message about one clip "
            "(the Cosmos-Reason1 system prompt is fixed by the server; multi-turn chat is not supported)",
            param=f"messages.{i}.role",
        )
    if len(users) != 1:
        raise InvalidRequestError(f"expected exactly one user message, got {len(users)}", param="messages")
    content = messages[users[0]].content
    if not isinstance(content, list):
        raise InvalidRequestError(
            "the user message must be a list of content parts with one video_url part and text parts",
            param="messages.0.content",
        )
    texts: list[str] = []
    videos: list[str] = []
    for j, part in enumerate(content):
        if part.type == "text":
            if part.text is None or part.video_url is not None:
                raise InvalidRequestError("a text part needs 'text' only", param=f"messages.0.content.{j}")
            texts.append(part.text)
        else:
            if part.video_url is None or part.text is not None:
                raise InvalidRequestError(
                    "a video_url part needs 'video_url': {'url': ...} only", param=f"messages.0.content.{j}"
                )
            videos.append(part.video_url.url)
    if len(videos) != 1:
        raise InvalidRequestError(
            f"the user message must hold exactly one video_url part, got {len(videos)}", param="messages.0.content"
        )
    question = "\n".join(t for t in texts if t.strip()).strip()
    if not question:
        raise InvalidRequestError("the user message has no question (text part)", param="messages.0.content")
    return question, videos[0]


#: The request field a chat request's clip errors name (the user message's video_url part).
VIDEO_URL_PARAM = "messages.0.content.video_url"
#: Params of clip errors raised by the shared pipeline (decoder, sources), in /v1/video/query terms.
CLIP_PARAMS = frozenset({"video", "video_path", "video_url"})


def clip_source(video_url: str, config: AppConfig) -> ClipSource:
    """The :class:`ClipSource` of a ``video_url``.

    ``data:`` URLs are decoded here (size checked first); network URLs and paths
    become sources whose rules (allowed roots, address checks) the decoder
    applies where it reads them, as for every route.

    Raises:
        InvalidRequestError (400): malformed ``data:`` URL, non-video media type,
            unknown scheme, or a network URL on a server without URL support.
        PayloadTooLargeError (413): the decoded clip would exceed ``limits.max_upload_bytes``.
    """
    param = VIDEO_URL_PARAM
    if video_url.startswith("data:"):
        return ClipSource(data=_data_url_bytes(video_url, config.limits.max_upload_bytes, param), name="data-url")
    limit = config.limits.max_url_chars
    if len(video_url) > limit:
        raise InvalidRequestError(
            f"video_url is {len(video_url)} characters; the limit is {limit} (limits.max_url_chars; "
            "data: URLs are bounded by limits.max_upload_bytes instead)",
            param=param,
        )
    try:
        parsed = urlparse(video_url)
        parsed.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as e:  # e.g. "http://[::1/a.mp4": Invalid IPv6 URL
        raise InvalidRequestError(f"video_url is not a valid URL ({e})", param=param) from None
    scheme = parsed.scheme.lower()
    if scheme in NETWORK_SCHEMES:
        if "url" not in {f.name for f in dataclasses.fields(ClipSource)}:
            raise InvalidRequestError(f"{scheme} URLs are not supported by this server version", param=param)
        return ClipSource(url=video_url, name=video_url)  # type: ignore[call-arg]
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidRequestError("file:// URLs must name a local path (file:///...)", param=param)
        path = unquote(parsed.path)
        return ClipSource(path=path, name=path)
    if scheme and len(scheme) > 1:  # "C:" style drive letters are not URLs
        raise InvalidRequestError(
            f"unsupported video_url scheme {scheme!r}: use data:, http(s)://, rtsp://, file:// or a path", param=param
        )
    return ClipSource(path=video_url, name=video_url)


def parse_chat_body(raw: bytearray, config: AppConfig) -> tuple[ChatQuery, ClipSource]:
    """A chat completions body (bytes as read) → the validated request and its clip source.

    Holds one copy of a ``data:`` URL's clip at a time: ``raw`` is emptied once parsed (the
    caller's buffer too), and the returned :class:`ChatQuery` no longer holds the URL text.
    Peak memory is about 3.7 × the clip's size (the URL text, its base64 payload, the bytes),
    then 1 × (tests/unit/test_hostile_inputs.py measures it).

    Raises:
        See :func:`serve_app.api.parse_json_object`, :func:`parse_chat_request`, :func:`clip_source`.
    """
    body = parse_json_object(raw)
    if isinstance(raw, bytearray):
        raw.clear()
    chat = parse_chat_request(body, config)
    del body
    source = clip_source(chat.video_url, config)
    if source.data is not None:
        chat = dataclasses.replace(chat, video_url="data:")
    return chat, source


def _data_url_bytes(url: str, max_bytes: int, param: str) -> bytes:
    comma = url.find(",", 5)
    if comma < 0:
        raise InvalidRequestError("malformed data: URL (no ',')", param=param)
    header = url[5:comma]
    parts = header.split(";")
    media = parts[0].strip().lower()
    if "base64" not in (p.strip().lower() for p in parts[1:]):
        raise InvalidRequestError("a data: URL must be base64-encoded (data:video/mp4;base64,...)", param=param)
    if media and not media.startswith(DATA_MEDIA_PREFIXES):
        raise InvalidRequestError(f"data: URL media type {media!r} is not a video type", param=param)
    decoded_len = (len(url) - comma - 1) * 3 // 4
    if decoded_len > max_bytes:
        raise PayloadTooLargeError(
            f"video in the data: URL is about {decoded_len} bytes; the limit is {max_bytes} bytes", param=param
        )
    try:
        # binascii reads an ASCII str in place (base64.b64decode would first copy it to bytes)
        data = binascii.a2b_base64(url[comma + 1 :], strict_mode=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidRequestError(f"data: URL is not valid base64 ({e})", param=param) from None
    if not data:
        raise InvalidRequestError("data: URL holds no bytes", param=param)
    return data


def new_completion_id() -> str:
    """A fresh completion id (``chatcmpl-`` + 24 hex digits)."""
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def finish_reason(reason: str | None) -> str:
    """OpenAI's finish reason for an engine's (``stop``, ``length``; ``abort`` and unknown: ``stop``)."""
    return "length" if reason == "length" else "stop"


def usage(prompt_tokens: int | None, completion_tokens: int) -> dict:
    """OpenAI's ``usage`` object (token counts)."""
    p = prompt_tokens or 0
    return {"prompt_tokens": p, "completion_tokens": completion_tokens, "total_tokens": p + completion_tokens}


def chat_completion(
    *, completion_id: str, created: int, model: str, text: str, reason: str | None, prompt_tokens: int | None,
    completion_tokens: int,
) -> dict:
    """A ``chat.completion`` object (``created``: Unix seconds)."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish_reason(reason),
            }
        ],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def chat_chunk(
    *, completion_id: str, created: int, model: str, delta: dict | None = None, reason: str | None = None,
    usage_obj: dict | None = None,
) -> dict:
    """A ``chat.completion.chunk`` object.

    ``delta=None`` with ``usage_obj`` gives the usage-only last chunk (``choices: []``);
    ``reason`` marks the chunk that ends the choice.
    """
    chunk: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
    }
    if delta is not None:
        chunk["choices"] = [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason(reason) if reason is not None else None,
            }
        ]
    if usage_obj is not None:
        chunk["usage"] = usage_obj
    return chunk


def model_card(model: str, created: int | None = None) -> dict:
    """``GET /v1/models/{model}``: OpenAI's model object (``created`` in Unix seconds)."""
    return {"id": model, "object": "model", "created": int(created or time.time()), "owned_by": "cosmos-serve"}


def models_list(model: str, created: int | None = None) -> dict:
    """``GET /v1/models``: the one served model."""
    return {"object": "list", "data": [model_card(model, created)]}
