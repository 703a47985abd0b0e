"""The ``/v1/video/query`` request and response shapes (Ray-free; used by :mod:`serve_app.http`).

Requests: :class:`QueryRequest` (its clip and sampling fields, :class:`ClipQueryFields`,
are shared with the chat route), read by :func:`serve_app.http.query.parsing.parse_query`;
:func:`frame_sampling_for` and :func:`sampling_options` turn them into the pipeline's settings.
Responses are pydantic models: :class:`QueryResponse`, and the stream's :class:`QueryClipEvent`,
:class:`QueryDeltaEvent` and :class:`QueryDoneEvent`.

``POST /v1/video/query`` takes either ``multipart/form-data`` with a
``video`` file part, or ``application/json`` with ``video_path`` or
``video_url`` (http(s) or rtsp); both with ``question`` and the optional fields of :class:`QueryRequest`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from serve_app.config import AppConfig
from serve_app.model.reasoning import split_reasoning
from serve_app.model.sampling_options import sampling_options as with_defaults
from serve_app.protocol import (
    GREEDY_TEMPERATURE_EPS,
    MIN_REPETITION_PENALTY,
    ClipInfo,
    Done,
    FrameSampling,
    SamplingOptions,
    VideoInfo,
)

#: Multipart overhead allowed on top of the upload limit (boundaries, other fields), in bytes.
FORM_OVERHEAD_BYTES = 1 << 20
#: Largest JSON body of ``/v1/video/query`` in bytes: it names the clip, never carries it.
JSON_BODY_MAX_BYTES = 1 << 20
#: Largest RNG seed: a signed 64-bit integer, as torch's and vLLM's generators take it.
MAX_SEED = 2**63 - 1


class ClipQueryFields(BaseModel):
    """The fields the query and chat requests share: clip window, frame sampling, token sampling.

    Both routes validate these with the same bounds (the configured limits are checked
    afterwards by :func:`serve_app.http.query.parsing.validate_query`).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    fps: float | None = Field(None, gt=0, le=30, description="Frame sampling rate in frames/s (default 4).")
    max_frames: int | None = Field(None, ge=2, description="Cap on sampled frames (default 128).")
    start_s: float | None = Field(None, ge=0, description="Window start in clip seconds.")
    end_s: float | None = Field(None, gt=0, description="Window end in clip seconds.")
    max_tokens: int | None = Field(None, ge=1, description="Output budget in tokens.")
    temperature: float | None = Field(
        None, ge=0, le=2, description=f"Sampling temperature (0 … 2; under {GREEDY_TEMPERATURE_EPS:g}: greedy)."
    )
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling mass.")
    repetition_penalty: float | None = Field(
        None, ge=MIN_REPETITION_PENALTY, le=2, description=f"Repetition penalty ({MIN_REPETITION_PENALTY} … 2)."
    )
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="RNG seed (0 … 2**63 - 1).")
    ignore_eos: bool = Field(False, description="Benchmark-only; needs model.allow_ignore_eos.")
    stream: bool = Field(False, description="Stream the answer as server-sent events.")
    camera_id: str | None = Field(None, max_length=128, description="Camera label for logs and metrics.")


class QueryRequest(ClipQueryFields):
    """Fields of a clip query (multipart form fields or JSON keys)."""

    question: str | None = Field(None, min_length=1, description="The question about the clip.")
    questions: list[str] | None = Field(
        None,
        min_length=1,
        description="JSON only, instead of question: several questions about the same clip (at most "
        "limits.max_questions), answered in one response (answers); the clip is decoded once and its "
        "prompt prefix and vision encoding reused by the later questions. Not with stream.",
    )
    video_path: str | None = Field(None, description="JSON only: a file under an allowed root.")
    video_url: str | None = Field(
        None,
        min_length=1,
        description="JSON only: an http(s):// URL of the clip, or an rtsp:// camera (a live capture of "
        "end_s, default sources.rtsp_capture_s, seconds).",
    )


def frame_sampling_for(q: ClipQueryFields, config: AppConfig) -> FrameSampling:
    """The decoder's sampling settings for a query (config defaults filled in)."""
    return FrameSampling(
        fps=q.fps or config.decode.fps,
        max_frames=q.max_frames or config.decode.max_frames,
        start_s=q.start_s,
        end_s=q.end_s,
        geometry=config.model.geometry,
    )


def sampling_options(q: ClipQueryFields, config: AppConfig) -> SamplingOptions:
    """Generation settings for a query: request overrides over the recipe defaults
    (:func:`serve_app.model.sampling_options.sampling_options`)."""
    return with_defaults(
        config.model.sampling, max_tokens=q.max_tokens, temperature=q.temperature, top_p=q.top_p,
        repetition_penalty=q.repetition_penalty, seed=q.seed, ignore_eos=q.ignore_eos,
    )


RANDOM_WEIGHTS_NOTE = (
    "This model has random weights (a generated test checkpoint or vLLM dummy weights): "
    "the pipeline is real, the text is meaningless."
)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class QueryUsage(BaseModel):
    """Token counts of a ``/v1/video/query`` answer."""

    prompt_tokens: int | None = Field(..., description="Prompt tokens (video tokens included); null if unknown.")
    completion_tokens: int = Field(..., description="Generated tokens.")
    total_tokens: int = Field(..., description="prompt_tokens (0 if unknown) + completion_tokens.")
    video_tokens: int | None = Field(..., description="Tokens the clip takes in the prompt.")


class QueryTimings(BaseModel):
    """Where the time of a ``/v1/video/query`` went, milliseconds (2 decimals; null: not measured)."""

    decode_ms: float | None = Field(..., description="Decoder wall time.")
    queue_ms: float | None = Field(..., description="Wait in the engine before generation started.")
    model_ms: float | None = Field(..., description="Generation time after the queue.")
    ttft_ms: float | None = Field(..., description="Time from the engine call to the first token.")
    total_ms: float | None = Field(..., description="Ingress wall time, request in to answer out.")


class QueryAnswer(BaseModel):
    """One question's answer in a ``/v1/video/query`` with ``questions``."""

    question: str = Field(..., description="The question, as asked.")
    answer: str | None = Field(..., description="The <answer> part of the text, if the model followed the format.")
    reasoning: str | None = Field(..., description="The <think> part of the text, if any.")
    format_followed: bool = Field(..., description="True when the text has the <think>/<answer> format.")
    text: str = Field(..., description="The whole generated text.")
    finish_reason: str | None = Field(..., description="stop, length or abort (the engine's); null if unknown.")
    usage: QueryUsage = Field(..., description="Token counts of this answer.")

    @classmethod
    def build(cls, question: str, info: ClipInfo, text: str, done: Done) -> QueryAnswer:
        """The answer ``text`` to ``question`` about the clip ``info``, finished with ``done``."""
        parsed = split_reasoning(text, info.reasoning_format)
        return cls(
            question=question,
            answer=parsed.answer,
            reasoning=parsed.reasoning,
            format_followed=parsed.format_followed,
            text=text,
            finish_reason=done.finish_reason,
            usage=QueryUsage(
                prompt_tokens=done.prompt_tokens,
                completion_tokens=done.completion_tokens,
                total_tokens=(done.prompt_tokens or 0) + done.completion_tokens,
                video_tokens=info.video_tokens,
            ),
        )


class QueryResponse(BaseModel):
    """The JSON body of a completed ``/v1/video/query`` (``format_note`` and ``note`` only when set)."""

    id: str = Field(..., description="The request id (also the X-Request-Id response header).")
    object: Literal["video.query"] = Field("video.query", description="Always video.query.")
    model: str = Field(..., description="The served model name.")
    random_weights: bool = Field(..., description="True when the text is meaningless (random weights).")
    answer: str | None = Field(..., description="The <answer> part of the text, if the model followed the format.")
    reasoning: str | None = Field(..., description="The <think> part of the text, if any.")
    format_followed: bool = Field(..., description="True when the text has the <think>/<answer> format.")
    text: str = Field(..., description="The whole generated text.")
    finish_reason: str | None = Field(..., description="stop, length or abort (the engine's); null if unknown.")
    video: VideoInfo = Field(..., description="What was sampled from the clip.")
    warnings: list[str] = Field(..., description="Notes from decoding (e.g. where decoding stopped).")
    usage: QueryUsage = Field(..., description="Token counts (the first question's, with questions).")
    timings: QueryTimings = Field(..., description="Where the time went.")
    format_note: str | None = Field(None, description="Why the format was not followed (omitted when it was).")
    note: str | None = Field(None, description="The random-weights note (omitted for real weights).")
    answers: list[QueryAnswer] | None = Field(
        None, description="With questions: one answer per question, in order (the top-level fields are the "
        "first one's); omitted for one question."
    )

    @model_serializer(mode="wrap")
    def _omit_unset_notes(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body: dict[str, Any] = handler(self)
        for key in ("format_note", "note", "answers"):
            if body.get(key) is None:
                body.pop(key, None)
        return body

    @classmethod
    def build(cls, request_id: str, info: ClipInfo, text: str, done: Done, total_ms: float) -> QueryResponse:
        """The body for ``text`` generated about the clip ``info``, finished with ``done``."""
        parsed = split_reasoning(text, info.reasoning_format)
        return cls(
            id=request_id,
            model=info.model,
            random_weights=info.random_weights,
            answer=parsed.answer,
            reasoning=parsed.reasoning,
            format_followed=parsed.format_followed,
            text=text,
            finish_reason=done.finish_reason,
            video=info.video,
            warnings=list(info.warnings),
            usage=QueryUsage(
                prompt_tokens=done.prompt_tokens,
                completion_tokens=done.completion_tokens,
                total_tokens=(done.prompt_tokens or 0) + done.completion_tokens,
                video_tokens=info.video_tokens,
            ),
            timings=QueryTimings(
                decode_ms=_ms(info.decode_ms),
                queue_ms=_ms(done.queue_ms),
                model_ms=_ms(done.model_ms),
                ttft_ms=_ms(done.ttft_ms),
                total_ms=_ms(total_ms),
            ),
            format_note=parsed.note() or None,
            note=RANDOM_WEIGHTS_NOTE if info.random_weights else None,
        )


class QueryClipEvent(BaseModel):
    """First event of a ``/v1/video/query`` stream: what was sampled."""

    type: Literal["clip"] = Field(
        "clip", description="The event's kind (the SSE events of this route carry no event name)."
    )
    id: str = Field(..., description="The request id.")
    video: VideoInfo = Field(..., description="What was sampled from the clip.")
    warnings: list[str] = Field(..., description="Notes from decoding (e.g. where decoding stopped).")


class QueryDeltaEvent(BaseModel):
    """Newly generated text in a ``/v1/video/query`` stream."""

    type: Literal["delta"] = Field("delta", description="The event's kind.")
    text: str = Field(..., description="The text generated since the last event.")


class QueryDoneEvent(QueryResponse):
    """Last event of a ``/v1/video/query`` stream: the whole response, with ``"type": "done"``."""

    type: Literal["done"] = Field("done", description="The event's kind.")
