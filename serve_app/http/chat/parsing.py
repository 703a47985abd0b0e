"""A chat completions body read into a validated request in the clip pipeline's terms (Ray-free).

:func:`parse_chat_body` (bytes as read → the request and its clip source) and :func:`parse_chat_request`
(the decoded JSON → a :class:`ChatQuery`): the request shape (:mod:`serve_app.http.chat.protocol`),
the conversation (an optional system message, the user message with the clip, then text-only turns,
the last the user's), the stop strings, and the fields shared with ``/v1/video/query``, validated by
:func:`serve_app.http.query.parsing.validate_query` (every limit is that route's).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import ValidationError

from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError, NotFoundError
from serve_app.http.chat.protocol import MAX_STOP_CHARS, MAX_STOPS, ChatCompletionRequest, ChatMessage
from serve_app.http.chat.video_url import clip_source, video_url_param
from serve_app.http.json_body import parse_json_object, validation_error
from serve_app.http.query.parsing import validate_query
from serve_app.http.query.protocol import ClipQueryFields, QueryRequest
from serve_app.model.prompt import check_user_text
from serve_app.protocol import ClipSource, Turn

#: Roles that carry the system prompt (``developer`` is OpenAI's newer name for it).
SYSTEM_ROLES = ("system", "developer")


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
            limit of :func:`serve_app.http.query.parsing.validate_query` exceeded.
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


def parse_chat_body(raw: bytearray, config: AppConfig) -> tuple[ChatQuery, ClipSource]:
    """A chat completions body (bytes as read) → the validated request and its clip source.

    Holds one copy of a ``data:`` URL's clip at a time: ``raw`` is emptied once parsed (the
    caller's buffer too), and the returned :class:`ChatQuery` no longer holds the URL text.
    Peak memory is about 3.7 × the clip's size (the URL text, its base64 payload, the bytes),
    then 1 × (tests/integration/http/test_hostile_inputs.py measures it).

    Raises:
        See :func:`serve_app.http.json_body.parse_json_object`, :func:`parse_chat_request`,
        :func:`serve_app.http.chat.video_url.clip_source`.
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
