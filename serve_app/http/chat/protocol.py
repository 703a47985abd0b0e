"""The OpenAI-compatible chat API's request and response shapes (pure; used by the ingress).

``POST /v1/chat/completions`` takes OpenAI's Chat Completions body: an optional
``system`` (or ``developer``) message, which replaces the configured system prompt for
that request; a user message whose content holds one ``video_url`` part (a ``data:``
URL with base64 video, an ``http(s)://``/``rtsp://`` URL, or a file path under the
allowed roots, optionally as ``file://``) and text parts (the question); then, for a
conversation about that clip, text-only ``assistant`` and ``user`` messages, the last
one the user's (rendered with the model's chat template; the clip is decoded once).
Sampling fields follow OpenAI (``max_tokens``/``max_completion_tokens``,
``temperature``, ``top_p``, ``seed``, ``stop``, ``stream``, ``stream_options``); like
vLLM, extra fields passed with the client's ``extra_body`` add
``repetition_penalty``, ``ignore_eos`` and the clip options ``fps``,
``max_frames``, ``start_s``, ``end_s``, ``camera_id``.

Shapes follow OpenAI's API reference (Chat Completions: the ``chat.completion``
object, the ``chat.completion.chunk`` streaming object, ``GET /v1/models``).
Every limit is the one of ``/v1/video/query``: the fields are validated by
:func:`serve_app.http.query.protocol.validate_query`.
"""

from __future__ import annotations

import binascii
import dataclasses
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from serve_app.http.query.protocol import (
    ClipQueryFields,
    QueryRequest,
    parse_json_object,
    validate_query,
    validation_error,
)
from serve_app.model.prompt import check_user_text
from serve_app.protocol import ClipSource, Done, Turn
from serve_app.sources.rules import DEFAULT_PORTS

#: URL schemes fetched by the decoder (network sources): those :func:`serve_app.sources.rules.check_url` knows.
NETWORK_SCHEMES = tuple(DEFAULT_PORTS)
#: Media types accepted in a ``data:`` URL (an empty type is accepted too: the decoder sniffs the container).
DATA_MEDIA_PREFIXES = ("video/", "application/octet-stream")
#: Most messages in one request (a conversation about one clip; the text is bounded by
#: ``limits.max_question_chars`` in all).
MAX_MESSAGES = 64
#: Most stop strings per request (OpenAI's limit) and the longest one, in characters.
MAX_STOPS = 4
MAX_STOP_CHARS = 256
#: Roles that carry the system prompt (``developer`` is OpenAI's newer name for it).
SYSTEM_ROLES = ("system", "developer")


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
    (:class:`serve_app.http.query.protocol.ClipQueryFields`; ``repetition_penalty``, ``ignore_eos``,
    ``fps``, ``max_frames``, ``start_s``, ``end_s`` and ``camera_id`` are vLLM-style
    ``extra_body`` extensions).
    """

    model: str = Field(..., min_length=1, description="Must name the served model (GET /v1/models).")
    messages: list[ChatMessage] = Field(
        ...,
        min_length=1,
        max_length=MAX_MESSAGES,
        description="An optional system message, the user message with the clip, then text-only assistant and "
        "user turns (the last one the user's).",
    )
    stream_options: StreamOptions | None = Field(None, description="Streaming options.")
    max_completion_tokens: int | None = Field(None, ge=1, description="Output budget in tokens.")
    n: Literal[1] = Field(1, description="Number of choices: only 1 is served.")
    stop: str | list[str] | None = Field(
        None,
        description=f"Up to {MAX_STOPS} stop strings (1 to {MAX_STOP_CHARS} characters each): the answer ends "
        "before the first one generated, which is not returned; finish_reason stop (vLLM's semantics).",
    )
    user: str | None = Field(None, max_length=256, description="End-user label (logged).")


@dataclasses.dataclass(frozen=True)
class ChatQuery:
    """A validated chat request, in the terms of the clip pipeline.

    Attributes:
        query: the equivalent ``/v1/video/query`` fields (limits already checked); its
            ``question`` is the text of the user message that carries the clip.
        video_url: the clip's URL or path as given.
        include_usage: send a usage chunk at the end of a stream.
        system_prompt: the request's system message (replaces the configured prompt), or None.
        history: the turns after the clip's message (assistant and user, the last the user's).
        stop: the stop strings (empty: none).
    """

    query: QueryRequest
    video_url: str
    include_usage: bool
    system_prompt: str | None = None
    history: tuple[Turn, ...] = ()
    stop: tuple[str, ...] = ()
    clip_index: int = 0

    @property
    def video_param(self) -> str:
        """The request field clip errors name: the clip message's ``video_url`` part."""
        return video_url_param(self.clip_index)


def parse_chat_request(body: Any, config: AppConfig) -> ChatQuery:
    """Validates a chat completions body and maps it onto the clip pipeline.

    Args:
        body: the decoded JSON body.
        config: limits and the served model's name.

    Raises:
        InvalidRequestError (400): not an object, unknown field, out-of-range value, messages
            not shaped as :func:`_conversation` needs, a message text with a chat-template control
            token, more text than ``limits.max_question_chars`` in all, bad ``stop`` strings, or a
            limit of :func:`serve_app.http.query.protocol.validate_query` exceeded.
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
    stop = _stop_strings(req.stop)
    conv = _conversation(req.messages)
    question, video_url = conv.question, conv.video_url
    texts = [question, *(t.text for t in conv.history)]
    if conv.system_prompt is not None:
        texts.append(conv.system_prompt)
    total = sum(len(t) for t in texts)
    if total > config.limits.max_question_chars:
        raise InvalidRequestError(
            f"the messages hold {total} characters of text; the limit is {config.limits.max_question_chars} "
            "(limits.max_question_chars)",
            param="messages",
        )
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
            e.param = f"messages.{conv.clip_index}.content"
        raise
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return ChatQuery(
        query=query,
        video_url=video_url,
        include_usage=include_usage,
        system_prompt=conv.system_prompt,
        history=conv.history,
        stop=stop,
        clip_index=conv.clip_index,
    )


def _stop_strings(stop: str | list[str] | None) -> tuple[str, ...]:
    """The request's stop strings as a tuple (a string is one; None or an empty list: none).

    Raises:
        InvalidRequestError (400): more than :data:`MAX_STOPS`, an empty one (vLLM refuses it too), one
            longer than :data:`MAX_STOP_CHARS`.
    """
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > MAX_STOPS:
        raise InvalidRequestError(f"{len(stops)} stop strings; at most {MAX_STOPS} are accepted", param="stop")
    for s in stops:
        if not s:
            raise InvalidRequestError("stop strings must not be empty", param="stop")
        if len(s) > MAX_STOP_CHARS:
            raise InvalidRequestError(
                f"a stop string is {len(s)} characters; the limit is {MAX_STOP_CHARS}", param="stop"
            )
    return stops


@dataclasses.dataclass(frozen=True)
class Conversation:
    """The messages of a chat request in the clip pipeline's terms.

    Attributes:
        question: the text of the user message that carries the clip.
        video_url: that message's clip (URL or path, as given).
        system_prompt: the system (or developer) message's text, or None.
        history: the messages after the clip's, as text turns.
        clip_index: the index of the clip's message in ``messages`` (0, or 1 after a system message).
    """

    question: str
    video_url: str
    system_prompt: str | None
    history: tuple[Turn, ...]
    clip_index: int


def _text_of(message: ChatMessage, i: int) -> str:
    """The text of a text-only message: its string, or its text parts joined by newlines.

    Raises:
        InvalidRequestError (400): no content, a part that is not text, or a chat-template control token.
    """
    param = f"messages.{i}.content"
    content = message.content
    if content is None:
        raise InvalidRequestError(f"messages[{i}] ({message.role}) has no content", param=param)
    if isinstance(content, str):
        text = content
    else:
        for j, part in enumerate(content):
            if part.type != "text" or part.text is None or part.video_url is not None:
                raise InvalidRequestError(
                    f"messages[{i}] ({message.role}) may hold text only: the clip goes in the first user message "
                    "(one clip per conversation)",
                    param=f"{param}.{j}",
                )
        text = "\n".join(part.text or "" for part in content)
    check_user_text(text, param)
    return text


def _conversation(messages: list[ChatMessage]) -> Conversation:
    """Reads the messages: ``[system], user (clip + question), (assistant | user)*``, the last one the user's.

    Raises:
        InvalidRequestError (400): a ``tool`` message, a system message that is not the first, the first
            other message not the user's, that message without exactly one ``video_url`` part or without
            text, a clip in a later message, a conversation that does not end with a user message, or a
            chat-template control token in any text.
    """
    system_prompt: str | None = None
    first = 0
    if messages[0].role in SYSTEM_ROLES:
        system_prompt = _text_of(messages[0], 0)
        first = 1
    for i, m in enumerate(messages):
        if m.role == "tool":
            raise InvalidRequestError(
                f"messages[{i}] has role 'tool': tools are not supported by this server", param=f"messages.{i}.role"
            )
        if m.role in SYSTEM_ROLES and i != 0:
            raise InvalidRequestError(
                f"messages[{i}] has role {m.role!r}: a system message may only come first", param=f"messages.{i}.role"
            )
    if first >= len(messages) or messages[first].role != "user":
        raise InvalidRequestError(
            "the first message after the system message must be the user's, with the clip (a video_url part) and "
            "the question",
            param=f"messages.{first}.role" if first < len(messages) else "messages",
        )
    question, video_url = _clip_message(messages[first], first)
    history = []
    for i in range(first + 1, len(messages)):
        m = messages[i]
        history.append(Turn(role="assistant" if m.role == "assistant" else "user", text=_text_of(m, i)))
    if history and history[-1].role != "user":
        raise InvalidRequestError(
            "the conversation must end with a user message (the question to answer)", param="messages"
        )
    return Conversation(
        question=question, video_url=video_url, system_prompt=system_prompt, history=tuple(history), clip_index=first
    )


def _clip_message(message: ChatMessage, i: int) -> tuple[str, str]:
    """The question text and the video URL of the user message that carries the clip."""
    param = f"messages.{i}.content"
    content = message.content
    if not isinstance(content, list):
        raise InvalidRequestError(
            "the first user message must be a list of content parts with one video_url part and text parts",
            param=param,
        )
    texts: list[str] = []
    videos: list[str] = []
    for j, part in enumerate(content):
        if part.type == "text":
            if part.text is None or part.video_url is not None:
                raise InvalidRequestError("a text part needs 'text' only", param=f"{param}.{j}")
            texts.append(part.text)
        else:
            if part.video_url is None or part.text is not None:
                raise InvalidRequestError("a video_url part needs 'video_url': {'url': ...} only", param=f"{param}.{j}")
            videos.append(part.video_url.url)
    if len(videos) != 1:
        raise InvalidRequestError(
            f"the first user message must hold exactly one video_url part, got {len(videos)}", param=param
        )
    question = "\n".join(t for t in texts if t.strip()).strip()
    if not question:
        raise InvalidRequestError("the first user message has no question (text part)", param=param)
    return question, videos[0]


#: The request field a chat request's clip errors name (the user message's video_url part), when that
#: message comes first (see :func:`video_url_param`).
VIDEO_URL_PARAM = "messages.0.content.video_url"


def video_url_param(clip_index: int) -> str:
    """The request field naming the ``video_url`` part of ``messages[clip_index]``."""
    return f"messages.{clip_index}.content.video_url"


#: Params of clip errors raised by the shared pipeline (decoder, sources), in /v1/video/query terms.
CLIP_PARAMS = frozenset({"video", "video_path", "video_url"})


def clip_source(video_url: str, config: AppConfig, param: str = VIDEO_URL_PARAM) -> ClipSource:
    """The :class:`ClipSource` of a ``video_url``.

    ``data:`` URLs are decoded here (size checked first); network URLs and paths
    become sources whose rules (allowed roots, address checks) the decoder
    applies where it reads them, as for every route.

    Args:
        video_url: the ``video_url`` part's URL or path.
        config: limits (``limits.max_upload_bytes``, ``limits.max_url_chars``).
        param: the request field errors name.

    Raises:
        InvalidRequestError (400): malformed ``data:`` URL, non-video media type,
            unknown scheme, or a network URL on a server without URL support.
        PayloadTooLargeError (413): the decoded clip would exceed ``limits.max_upload_bytes``.
    """
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
        See :func:`serve_app.http.query.protocol.parse_json_object`, :func:`parse_chat_request`, :func:`clip_source`.
    """
    body = parse_json_object(raw)
    if isinstance(raw, bytearray):
        raw.clear()
    chat = parse_chat_request(body, config)
    del body
    source = clip_source(chat.video_url, config, chat.video_param)
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
