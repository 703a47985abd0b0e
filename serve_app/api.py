"""The HTTP API's request and response shapes (Ray-free; used by the ingress).

``POST /v1/video/query`` takes either ``multipart/form-data`` with a
``video`` file part, or ``application/json`` with ``video_path`` or
``video_url`` (http(s) or rtsp); both with ``question`` and the optional fields of :class:`QueryRequest`.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect, Request

from serve_app.config import AppConfig
from serve_app.decoder import SampleRequest
from serve_app.engines.base import SamplingOptions
from serve_app.guards import has_control_chars
from serve_app.prompt import check_user_text
from serve_app.errors import ClientClosedRequestError, InvalidRequestError, PayloadTooLargeError, UnsupportedMediaError
from serve_app.reasoning import split_reasoning
from serve_app.sources import ClipSource

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


class QueryRequest(BaseModel):
    """Fields of a clip query (multipart form fields or JSON keys)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    question: str = Field(..., min_length=1, description="The question about the clip.")
    video_path: str | None = Field(None, description="JSON only: a file under an allowed root.")
    video_url: str | None = Field(
        None,
        min_length=1,
        description="JSON only: an http(s):// URL of the clip, or an rtsp:// camera (a live capture of "
        "end_s, default sources.rtsp_capture_s, seconds).",
    )
    fps: float | None = Field(None, gt=0, le=30, description="Sampling rate in frames/s (default 4).")
    max_frames: int | None = Field(None, ge=2, description="Cap on sampled frames (default 128).")
    start_s: float | None = Field(None, ge=0, description="Window start in clip seconds.")
    end_s: float | None = Field(None, gt=0, description="Window end in clip seconds.")
    max_tokens: int | None = Field(None, ge=1, description="Output budget in tokens.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling mass.")
    repetition_penalty: float | None = Field(None, gt=0, le=2, description="Repetition penalty.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="RNG seed (0 … 2**63 - 1).")
    ignore_eos: bool = Field(False, description="Benchmark-only; needs model.allow_ignore_eos.")
    stream: bool = Field(False, description="Stream the answer as server-sent events.")
    camera_id: str | None = Field(None, max_length=128, description="Camera label for logs and metrics.")


def _validation_error(e: ValidationError) -> InvalidRequestError:
    err = e.errors()[0]
    param = ".".join(str(x) for x in err.get("loc", ())) or None
    msg = err.get("msg", "invalid value")
    if err.get("type") == "extra_forbidden":
        msg = "unknown field"
    return InvalidRequestError(f"{param}: {msg}" if param else msg, param=param)


def validate_query(fields: dict[str, Any], config: AppConfig) -> QueryRequest:
    """Validates query fields against the schema and the configured limits.

    Raises:
        InvalidRequestError (400): a field is missing, unknown, mistyped or out of range
            (the message names the field and the limit).
    """
    try:
        q = QueryRequest.model_validate(fields)
    except ValidationError as e:
        raise _validation_error(e) from None
    lim = config.limits
    if len(q.question) > lim.max_question_chars:
        raise InvalidRequestError(
            f"question is {len(q.question)} characters; the limit is {lim.max_question_chars}", param="question"
        )
    check_user_text(q.question, "question")
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


async def parse_query(request: Request, config: AppConfig) -> tuple[QueryRequest, ClipSource]:
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
        fields = parse_json_object(raw)
        q = validate_query(fields, config)
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


def sample_request(q: QueryRequest, config: AppConfig) -> SampleRequest:
    """The decoder's sampling settings for a query (config defaults filled in)."""
    return SampleRequest(
        fps=q.fps or config.decode.fps,
        max_frames=q.max_frames or config.decode.max_frames,
        start_s=q.start_s,
        end_s=q.end_s,
    )


def sampling_options(q: QueryRequest, config: AppConfig) -> SamplingOptions:
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


def new_request_id() -> str:
    """A fresh request id (``vq-`` + 24 hex digits)."""
    return "vq-" + uuid.uuid4().hex[:24]


RANDOM_WEIGHTS_NOTE = (
    "This model has random weights (a generated test checkpoint or vLLM dummy weights): "
    "the pipeline is real, the text is meaningless."
)


def query_response(
    *,
    request_id: str,
    model: str,
    random_weights: bool,
    text: str,
    finish_reason: str | None,
    video: dict,
    warnings: list[str],
    prompt_tokens: int | None,
    completion_tokens: int,
    video_tokens: int | None,
    timings: dict[str, float | None],
) -> dict:
    """The JSON body of a completed ``/v1/video/query``."""
    parsed = split_reasoning(text)
    body: dict[str, Any] = {
        "id": request_id,
        "object": "video.query",
        "model": model,
        "random_weights": random_weights,
        "answer": parsed.answer,
        "reasoning": parsed.reasoning,
        "format_followed": parsed.format_followed,
        "text": text,
        "finish_reason": finish_reason,
        "video": video,
        "warnings": list(warnings),
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": (prompt_tokens or 0) + completion_tokens,
            "video_tokens": video_tokens,
        },
        "timings": {k: (None if v is None else round(v, 2)) for k, v in timings.items()},
    }
    note = parsed.note()
    if note:
        body["format_note"] = note
    if random_weights:
        body["note"] = RANDOM_WEIGHTS_NOTE
    return body
