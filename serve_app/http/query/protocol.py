"""The ``/v1/video/query`` request and response shapes (Ray-free; used by :mod:`serve_app.http`).

Requests: :class:`QueryRequest` (its clip and sampling fields, :class:`ClipQueryFields`,
are shared with the chat route), read by :func:`parse_query`. Responses are pydantic
models: :class:`QueryResponse`, and the stream's :class:`QueryClipEvent`,
:class:`QueryDeltaEvent` and :class:`QueryDoneEvent`.

``POST /v1/video/query`` takes either ``multipart/form-data`` with a
``video`` file part, or ``application/json`` with ``video_path`` or
``video_url`` (http(s) or rtsp); both with ``question`` and the optional fields of :class:`QueryRequest`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect, Request

from serve_app.config import AppConfig, LimitsConfig
from serve_app.errors import ClientClosedRequestError, InvalidRequestError, PayloadTooLargeError, UnsupportedMediaError
from serve_app.model.prompt import check_user_text
from serve_app.model.reasoning import split_reasoning
from serve_app.protocol import (
    GREEDY_TEMPERATURE_EPS,
    MIN_REPETITION_PENALTY,
    ClipInfo,
    ClipSource,
    Done,
    FrameSampling,
    SamplingOptions,
    VideoInfo,
)
from serve_app.text import has_control_chars

#: Multipart overhead allowed on top of the upload limit (boundaries, other fields), in bytes.
FORM_OVERHEAD_BYTES = 1 << 20
#: Largest JSON body of ``/v1/video/query`` in bytes: it names the clip, never carries it.
JSON_BODY_MAX_BYTES = 1 << 20
#: Largest RNG seed: a signed 64-bit integer, as torch's and vLLM's generators take it.
MAX_SEED = 2**63 - 1


async def read_body(request: Request, max_bytes: int) -> bytearray:
    """The request body, read in chunks and refused past ``max_bytes`` (declared or actual).

    One growing buffer (no list of chunks joined at the end: that held the body twice).

    Raises:
        PayloadTooLargeError (413): ``Content-Length`` or the bytes received exceed ``max_bytes``.
        ClientClosedRequestError (499): the client disconnected before the body was read.
    """
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLargeError(f"request body is {int(declared)} bytes; the limit is {max_bytes} bytes")
    body = bytearray()
    try:
        async for chunk in request.stream():
            if len(body) + len(chunk) > max_bytes:
                raise PayloadTooLargeError(f"request body exceeds the limit of {max_bytes} bytes")
            body += chunk
    except ClientDisconnect:
        raise ClientClosedRequestError("the client disconnected while sending the request body") from None
    return body


def require_json(request: Request) -> None:
    """Refuses a body that is not declared ``application/json`` (before reading it).

    Every JSON route that changes state requires it: a web page can send ``text/plain``,
    ``multipart/form-data`` or a form to another site without asking first (no CORS preflight),
    but not ``application/json``.

    Raises:
        UnsupportedMediaError (415): another or no ``Content-Type``.
    """
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        shown = repr(ctype[:64]) if ctype and ctype.isprintable() else "missing"
        raise UnsupportedMediaError(
            f"the request's content type is {shown}: this route takes a JSON body; send Content-Type: "
            "application/json",
            param="Content-Type",
        )


#: Longest JSON integer accepted, in digits (a signed 64-bit integer has at most 19; Python
#: refuses to convert more than 4,300 with a ValueError, which must not become a 500).
MAX_INT_DIGITS = 40


class OversizedInt:
    """A JSON integer of more than :data:`MAX_INT_DIGITS` digits: no field accepts it (400 naming the field)."""

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"<integer of {self.digits} digits>"


def _parse_int(text: str) -> int | OversizedInt:
    return int(text) if len(text) <= MAX_INT_DIGITS else OversizedInt(len(text))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(obj: Any, path: str = "") -> str | None:
    """The dotted path of the first string in ``obj`` holding a lone UTF-16 surrogate (a JSON
    ``"\\ud800"`` escape), or None. Such strings cannot be encoded as UTF-8 (paths, logs, tokenizers)."""
    if isinstance(obj, str):
        return (path or "body") if _SURROGATE.search(obj) else None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        if isinstance(k, str) and _SURROGATE.search(k):
            return f"{path}.{k!a}" if path else f"{k!a}"
        found = _lone_surrogate(v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None


def parse_json_object(raw: bytes | bytearray) -> dict[str, Any]:
    """A JSON request body that must be an object.

    Integers of more than :data:`MAX_INT_DIGITS` digits become :class:`OversizedInt` values,
    which field validation refuses (400 naming the field).

    Raises:
        InvalidRequestError (400): not UTF-8 JSON, nested too deeply to parse, not an object, or
            a string with a lone surrogate escape (names the field).
    """
    try:
        body = json.loads(raw, parse_int=_parse_int)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidRequestError(f"request body is not valid JSON ({e})") from None
    except RecursionError:
        raise InvalidRequestError("request body is not valid JSON (nested too deeply)") from None
    except ValueError as e:  # defence in depth: any other conversion limit
        raise InvalidRequestError(f"request body is not valid JSON ({type(e).__name__})") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("JSON body must be an object")
    bad = _lone_surrogate(body)
    if bad is not None:
        raise InvalidRequestError(
            f"{bad}: the string holds a lone UTF-16 surrogate escape (e.g. \\ud800), which is not a character",
            param=bad,
        )
    return body


class ClipQueryFields(BaseModel):
    """The fields the query and chat requests share: clip window, frame sampling, token sampling.

    Both routes validate these with the same bounds (the configured limits are checked
    afterwards by :func:`validate_query`).
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
        "vision encoding shared. Not with stream.",
    )
    video_path: str | None = Field(None, description="JSON only: a file under an allowed root.")
    video_url: str | None = Field(
        None,
        min_length=1,
        description="JSON only: an http(s):// URL of the clip, or an rtsp:// camera (a live capture of "
        "end_s, default sources.rtsp_capture_s, seconds).",
    )


def validation_error(e: ValidationError, unknown: str = "unknown field") -> InvalidRequestError:
    """The 400 for a pydantic validation failure, naming the field at fault.

    With unions (e.g. chat ``content``: text or a list of parts) pydantic reports every
    branch; the deepest error is the one about what the client sent, and the branch
    names (``list[ContentPart]``, ``str``) are dropped from the field path.

    Args:
        e: the validation error.
        unknown: the message for a field the model does not know.
    """
    err = max(e.errors(), key=lambda x: len(x.get("loc", ())))
    loc = [str(x) for x in err.get("loc", ())]
    param = ".".join(x for x in loc if not any(c in x for c in "[]()") and x != "str") or None
    msg = err.get("msg", "invalid value")
    if err.get("type") == "extra_forbidden":
        msg = unknown
    return InvalidRequestError(f"{param}: {msg}" if param else msg, param=param)


def asked_with_names(q: QueryRequest) -> list[tuple[str, str]]:
    """The questions of a query with their field names (``question``, or ``questions.0`` …)."""
    if q.questions is not None:
        return [(f"questions.{i}", text) for i, text in enumerate(q.questions)]
    return [("question", q.question or "")]


def check_questions(q: QueryRequest, lim: LimitsConfig) -> None:
    """``question`` or ``questions`` (not both, not neither), each within the limits.

    Raises:
        InvalidRequestError (400): naming ``question``, ``questions`` or ``questions.N`` and the limit.
    """
    if (q.question is None) == (q.questions is None):
        raise InvalidRequestError(
            "give question (one question) or questions (a JSON list of them), not both"
            if q.question is not None
            else "question is required (or questions: a JSON list of questions about the clip)",
            param="questions" if q.question is not None else "question",
        )
    if q.questions is not None:
        if len(q.questions) > lim.max_questions:
            raise InvalidRequestError(
                f"questions holds {len(q.questions)}; the limit is {lim.max_questions} (limits.max_questions)",
                param="questions",
            )
        if q.stream:
            raise InvalidRequestError(
                "stream takes one question: ask questions without stream, or one question per streamed request",
                param="questions",
            )
    for name, text in asked_with_names(q):
        if not text:
            raise InvalidRequestError(f"{name} is empty", param=name)
        if len(text) > lim.max_question_chars:
            raise InvalidRequestError(
                f"{name} is {len(text)} characters; the limit is {lim.max_question_chars}", param=name
            )
        check_user_text(text, name)


def validate_query(fields: dict[str, Any], config: AppConfig) -> QueryRequest:
    """Validates query fields against the schema and the configured limits.

    Raises:
        InvalidRequestError (400): a field is missing, unknown, mistyped or out of range
            (the message names the field and the limit).
    """
    try:
        q = QueryRequest.model_validate(fields)
    except ValidationError as e:
        raise validation_error(e) from None
    lim = config.limits
    check_questions(q, lim)
    if q.camera_id is not None and has_control_chars(q.camera_id):
        raise InvalidRequestError("camera_id contains control characters (e.g. a newline)", param="camera_id")
    for name in ("video_url", "video_path"):
        value = getattr(q, name)
        if value is not None and len(value) > lim.max_url_chars:
            raise InvalidRequestError(
                f"{name} is {len(value)} characters; the limit is {lim.max_url_chars} (limits.max_url_chars)",
                param=name,
            )
    if q.max_frames is not None and q.max_frames > lim.max_frames:
        raise InvalidRequestError(f"max_frames is {q.max_frames}; the limit is {lim.max_frames}", param="max_frames")
    if q.max_tokens is not None and q.max_tokens > lim.max_tokens:
        raise InvalidRequestError(f"max_tokens is {q.max_tokens}; the limit is {lim.max_tokens}", param="max_tokens")
    if q.start_s is not None and q.end_s is not None and q.end_s <= q.start_s:
        raise InvalidRequestError(f"end_s ({q.end_s}) must be greater than start_s ({q.start_s})", param="end_s")
    if q.ignore_eos and not config.model.allow_ignore_eos:
        raise InvalidRequestError(
            "ignore_eos is a benchmark-only option and this server does not enable it "
            "(model.allow_ignore_eos: false)",
            param="ignore_eos",
        )
    return q


async def parse_query(request: Request, config: AppConfig) -> tuple[QueryRequest, ClipSource]:  # noqa: C901 - two body shapes (JSON, multipart) with their limits, each branch one documented 4xx
    """Reads a ``/v1/video/query`` request into validated fields and a clip source.

    Raises:
        InvalidRequestError (400): bad JSON or multipart, missing ``question``/clip, both clip kinds given.
        PayloadTooLargeError (413): the upload exceeds ``limits.max_upload_bytes``, or a JSON
            body exceeds :data:`JSON_BODY_MAX_BYTES`.
        UnsupportedMediaError (415): neither multipart/form-data nor JSON.
        ClientClosedRequestError (499): the client disconnected mid-body.
    """
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    max_bytes = config.limits.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes + FORM_OVERHEAD_BYTES:
        raise PayloadTooLargeError(
            f"request body is {int(declared)} bytes; the upload limit is {max_bytes} bytes", param="video"
        )
    if ctype == "application/json":
        try:
            raw = await read_body(request, JSON_BODY_MAX_BYTES)
        except PayloadTooLargeError as e:
            raise PayloadTooLargeError(
                f"{e.message} (JSON only names the clip: upload it as multipart field 'video', or "
                "send video_path or video_url)"
            ) from None
        q = validate_query(parse_json_object(raw), config)
        if q.video_path and q.video_url:
            raise InvalidRequestError("give either video_path or video_url, not both", param="video_url")
        if q.video_url:
            return q, ClipSource(url=q.video_url, name=q.video_url)
        if not q.video_path:
            raise InvalidRequestError(
                "a JSON request needs video_path or video_url (or upload the clip as multipart field 'video')",
                param="video_path",
            )
        return q, ClipSource(path=q.video_path, name=q.video_path)
    if ctype == "multipart/form-data":
        try:
            form = await request.form(max_files=1, max_fields=32)
        except ClientDisconnect:
            raise ClientClosedRequestError("the client disconnected while uploading") from None
        except (HTTPException, MultiPartException) as e:  # Starlette: no boundary, bad parts, too many parts
            detail = e.detail if isinstance(e, HTTPException) else e.message
            raise InvalidRequestError(
                f"malformed multipart body: {detail} (send one file part 'video' and at most 31 text fields, "
                "each under 1 MB)",
                param="video",
            ) from None
        try:
            fields: dict[str, Any] = {}
            upload = None
            for key, value in form.multi_items():
                if key == "video":
                    if isinstance(value, str):
                        raise InvalidRequestError("field 'video' must be a file part", param="video")
                    upload = value
                elif key in fields:
                    raise InvalidRequestError(f"field {key!r} given twice", param=key)
                else:
                    fields[key] = value
            q = validate_query(fields, config)
            if upload is None:
                raise InvalidRequestError("missing the clip: multipart file field 'video'", param="video")
            if q.video_path:
                raise InvalidRequestError("give either the 'video' file or video_path, not both", param="video_path")
            if q.video_url:
                raise InvalidRequestError("give either the 'video' file or video_url, not both", param="video_url")
            if upload.size is not None and upload.size > max_bytes:
                raise PayloadTooLargeError(
                    f"uploaded video is {upload.size} bytes; the limit is {max_bytes} bytes", param="video"
                )
            data = await upload.read()
            if len(data) > max_bytes:
                raise PayloadTooLargeError(
                    f"uploaded video is {len(data)} bytes; the limit is {max_bytes} bytes", param="video"
                )
            return q, ClipSource(data=data, name=upload.filename or "video")
        finally:
            await form.close()
    raise UnsupportedMediaError(
        f"content type {ctype or '(none)'!r} is not supported: send multipart/form-data with a 'video' "
        "file, or application/json with video_path or video_url"
    )


def frame_sampling_for(q: ClipQueryFields, config: AppConfig) -> FrameSampling:
    """The decoder's sampling settings for a query (config defaults filled in)."""
    return FrameSampling(
        fps=q.fps or config.decode.fps,
        max_frames=q.max_frames or config.decode.max_frames,
        start_s=q.start_s,
        end_s=q.end_s,
    )


def sampling_options(q: ClipQueryFields, config: AppConfig) -> SamplingOptions:
    """Generation settings for a query: request overrides over the recipe defaults."""
    d = config.model.sampling
    return SamplingOptions(
        max_tokens=q.max_tokens or d.max_tokens,
        temperature=d.temperature if q.temperature is None else q.temperature,
        top_p=q.top_p or d.top_p,
        repetition_penalty=q.repetition_penalty or d.repetition_penalty,
        seed=q.seed,
        ignore_eos=q.ignore_eos,
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
    usage: QueryUsage

    @classmethod
    def build(cls, question: str, info: ClipInfo, text: str, done: Done) -> QueryAnswer:
        """The answer ``text`` to ``question`` about the clip ``info``, finished with ``done``."""
        parsed = split_reasoning(text)
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
    object: Literal["video.query"] = "video.query"
    model: str = Field(..., description="The served model name.")
    random_weights: bool = Field(..., description="True when the text is meaningless (random weights).")
    answer: str | None = Field(..., description="The <answer> part of the text, if the model followed the format.")
    reasoning: str | None = Field(..., description="The <think> part of the text, if any.")
    format_followed: bool = Field(..., description="True when the text has the <think>/<answer> format.")
    text: str = Field(..., description="The whole generated text.")
    finish_reason: str | None = Field(..., description="stop, length or abort (the engine's); null if unknown.")
    video: VideoInfo
    warnings: list[str] = Field(..., description="Notes from decoding (e.g. where decoding stopped).")
    usage: QueryUsage
    timings: QueryTimings
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
        parsed = split_reasoning(text)
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

    type: Literal["clip"] = "clip"
    id: str = Field(..., description="The request id.")
    video: VideoInfo
    warnings: list[str]


class QueryDeltaEvent(BaseModel):
    """Newly generated text in a ``/v1/video/query`` stream."""

    type: Literal["delta"] = "delta"
    text: str


class QueryDoneEvent(QueryResponse):
    """Last event of a ``/v1/video/query`` stream: the whole response, with ``"type": "done"``."""

    type: Literal["done"] = "done"
