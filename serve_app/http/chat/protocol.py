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
The body is read by :mod:`serve_app.http.chat.parsing` (every limit is the one of
``/v1/video/query``: the fields are validated by :func:`serve_app.http.query.parsing.validate_query`);
the ``video_url`` becomes a clip source in :mod:`serve_app.http.chat.video_url`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from serve_app.http.query.protocol import ClipQueryFields
from serve_app.protocol import Done

#: Most messages in one request (a conversation about one clip; the text is bounded by
#: ``limits.max_question_chars`` in all).
MAX_MESSAGES = 64
#: Most stop strings per request (OpenAI's limit) and the longest one, in characters.
MAX_STOPS = 4
MAX_STOP_CHARS = 256


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

    role: Literal["assistant"] = Field("assistant", description="Always assistant.")
    content: str = Field(..., description="The whole generated text (the <think> part included).")


class Choice(BaseModel):
    """The one choice of a ``chat.completion``."""

    index: int = Field(0, description="Always 0 (one choice).")
    message: AssistantMessage = Field(..., description="The answer.")
    logprobs: None = Field(None, description="Always null (log probabilities are not served).")
    finish_reason: Literal["stop", "length"] = Field(
        ..., description="length: max_tokens was reached; stop: otherwise (an end token or a stop string)."
    )


class ChatCompletion(BaseModel):
    """OpenAI's ``chat.completion`` object (``created``: Unix seconds)."""

    id: str = Field(..., description="chatcmpl-<request id>.")
    object: Literal["chat.completion"] = Field("chat.completion", description="Always chat.completion.")
    created: int = Field(..., description="When the request came, Unix seconds.")
    model: str = Field(..., description="The served model name.")
    choices: list[Choice] = Field(..., description="One choice.")
    usage: CompletionUsage = Field(..., description="Token counts.")

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

    role: Literal["assistant"] | None = Field(None, description="assistant, in the first chunk only.")
    content: str | None = Field(None, description="The text generated since the last chunk.")

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body = handler(self)
        return {k: v for k, v in body.items() if k in self.model_fields_set}


class ChunkChoice(BaseModel):
    """The one choice of a ``chat.completion.chunk``."""

    index: int = Field(0, description="Always 0 (one choice).")
    delta: ChoiceDelta = Field(..., description="What this chunk adds.")
    logprobs: None = Field(None, description="Always null (log probabilities are not served).")
    finish_reason: Literal["stop", "length"] | None = Field(
        None, description="In the last chunk with choices: as in chat.completion; null before."
    )


class ChatCompletionChunk(BaseModel):
    """OpenAI's ``chat.completion.chunk`` object; ``usage`` only on the usage-only last chunk."""

    id: str = Field(..., description="chatcmpl-<request id>, the same in every chunk.")
    object: Literal["chat.completion.chunk"] = Field(
        "chat.completion.chunk", description="Always chat.completion.chunk."
    )
    created: int = Field(..., description="When the request came, Unix seconds.")
    model: str = Field(..., description="The served model name.")
    choices: list[ChunkChoice] = Field(..., description="One choice; empty in the usage-only last chunk.")
    usage: CompletionUsage | None = Field(
        None, description="Token counts, in the last chunk only, with stream_options.include_usage."
    )

    @model_serializer(mode="wrap")
    def _omit_null_usage(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body: dict[str, Any] = handler(self)
        if body.get("usage") is None:
            body.pop("usage", None)
        return body


class ModelCard(BaseModel):
    """OpenAI's model object (``created``: Unix seconds)."""

    id: str = Field(..., description="The served model name (the model field of requests).")
    object: Literal["model"] = Field("model", description="Always model.")
    created: int = Field(..., description="When the ingress started, Unix seconds.")
    owned_by: str = Field("cosmos-serve", description="Always cosmos-serve.")


class ModelList(BaseModel):
    """``GET /v1/models``: the one served model."""

    object: Literal["list"] = Field("list", description="Always list.")
    data: list[ModelCard] = Field(..., description="The one served model.")
