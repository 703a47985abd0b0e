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
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from serve_app.api import ClipQueryFields, QueryRequest, parse_json_object, validate_query, validation_error
from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from serve_app.protocol import ClipSource, Done
from serve_app.sources import DEFAULT_PORTS

#: URL schemes fetched by the decoder (network sources): those :func:`serve_app.sources.check_url` knows.
NETWORK_SCHEMES = tuple(DEFAULT_PORTS)
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


class ChatCompletionRequest(ClipQueryFields):
    """The accepted body of ``POST /v1/chat/completions`` (unknown fields: 400).

    OpenAI's fields, plus the clip and sampling fields shared with ``/v1/video/query``
    (:class:`serve_app.api.ClipQueryFields`; ``repetition_penalty``, ``ignore_eos``,
    ``fps``, ``max_frames``, ``start_s``, ``end_s`` and ``camera_id`` are vLLM-style
    ``extra_body`` extensions).
    """

    model: str = Field(..., min_length=1, description="Must name the served model (GET /v1/models).")
    messages: list[ChatMessage] = Field(..., min_length=1, description="One user message (optionally after system).")
    stream_options: StreamOptions | None = Field(None, description="Streaming options.")
    max_completion_tokens: int | None = Field(None, ge=1, description="Output budget in tokens.")
    n: Literal[1] = Field(1, description="Number of choices: only 1 is served.")
    stop: str | list[str] | None = Field(None, description="Stop sequences: not supported (must be empty).")
    user: str | None = Field(None, max_length=256, description="End-user label (logged).")


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
        raise validation_error(e, unknown="unknown or unsupported field") from None
    if req.model != config.model.name:
        raise NotFoundError(
            f"model {req.model!r} is not served here; this server serves {config.model.name!r}", param="model"
        )
    if req.stop:
        raise InvalidRequestError("stop sequences are not supported by this server", param="stop")
    question, video_url = _user_turn(req.messages)
    both = req.max_tokens is not None and req.max_completion_tokens is not None
    if both and req.max_tokens != req.max_completion_tokens:
        raise InvalidRequestError(
            "max_tokens and max_completion_tokens differ; give one of them", param="max_completion_tokens"
        )
    shared = req.model_dump(include=set(ClipQueryFields.model_fields))
    fields = {**shared, "question": question, "max_tokens": req.max_completion_tokens or req.max_tokens}
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
        return ClipSource(url=video_url, name=video_url)
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
    """The bytes of a base64 ``data:`` URL (RFC 2397), checked against ``max_bytes``.

    The data starts after the comma that follows ``;base64``: browsers label MediaRecorder clips
    ``video/webm;codecs=vp8,opus``, whose parameter holds a comma of its own.

    Raises:
        InvalidRequestError (400): no comma, not base64, a non-video media type, invalid base64, empty.
        PayloadTooLargeError (413): more than ``max_bytes`` once decoded.
    """
    marker = url[:4096].lower().find(";base64,")
    comma = marker + len(";base64") if marker >= 0 else url.find(",", 5)
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


def finish_reason(reason: str | None) -> Literal["stop", "length"]:
    """OpenAI's finish reason for an engine's (``stop``, ``length``; ``abort`` and unknown: ``stop``)."""
    return "length" if reason == "length" else "stop"


class CompletionUsage(BaseModel):
    """OpenAI's ``usage`` object (token counts)."""

    prompt_tokens: int = Field(..., description="Prompt tokens, video tokens included (0 if unknown).")
    completion_tokens: int = Field(..., description="Generated tokens.")
    total_tokens: int = Field(..., description="prompt_tokens + completion_tokens.")

    @classmethod
    def of(cls, prompt_tokens: int | None, completion_tokens: int) -> CompletionUsage:
        """Usage from the engine's counts (an unknown prompt length counts 0)."""
        p = prompt_tokens or 0
        return cls(prompt_tokens=p, completion_tokens=completion_tokens, total_tokens=p + completion_tokens)


class AssistantMessage(BaseModel):
    """The answer's message in a ``chat.completion``."""

    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    """The one choice of a ``chat.completion``."""

    index: int = 0
    message: AssistantMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"]


class ChatCompletion(BaseModel):
    """OpenAI's ``chat.completion`` object (``created``: Unix seconds)."""

    id: str = Field(..., description="chatcmpl-<request id>.")
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage

    @classmethod
    def build(cls, *, completion_id: str, created: int, model: str, done: Done, text: str) -> ChatCompletion:
        """The completion of ``text``, finished with ``done``."""
        return cls(
            id=completion_id,
            created=created,
            model=model,
            choices=[Choice(message=AssistantMessage(content=text), finish_reason=finish_reason(done.finish_reason))],
            usage=CompletionUsage.of(done.prompt_tokens, done.completion_tokens),
        )


class ChoiceDelta(BaseModel):
    """The ``delta`` of a chunk: ``{"role", "content"}`` first, ``{"content"}`` then, ``{}`` last.

    Only the fields set are sent (``model_dump(exclude_unset=True)`` semantics, see
    :class:`ChatCompletionChunk`).
    """

    role: Literal["assistant"] | None = None
    content: str | None = None

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body = handler(self)
        return {k: v for k, v in body.items() if k in self.model_fields_set}


class ChunkChoice(BaseModel):
    """The one choice of a ``chat.completion.chunk``."""

    index: int = 0
    delta: ChoiceDelta
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class ChatCompletionChunk(BaseModel):
    """OpenAI's ``chat.completion.chunk`` object; ``usage`` only on the usage-only last chunk."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None

    @model_serializer(mode="wrap")
    def _omit_null_usage(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body: dict[str, Any] = handler(self)
        if body.get("usage") is None:
            body.pop("usage", None)
        return body


class ModelCard(BaseModel):
    """OpenAI's model object (``created``: Unix seconds)."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "cosmos-serve"


class ModelList(BaseModel):
    """``GET /v1/models``: the one served model."""

    object: Literal["list"] = "list"
    data: list[ModelCard]
