"""Reading a ``/v1/video/query`` request into validated fields and a clip source (Ray-free).

:func:`parse_query` reads either body shape (``multipart/form-data`` with a ``video`` file part, or
``application/json`` naming the clip); :func:`validate_query` checks the fields (the shapes of
:mod:`serve_app.http.query.protocol`) against the configured limits, for the chat route as well.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect, Request

from serve_app.config import AppConfig, LimitsConfig
from serve_app.errors import (
    ClientClosedRequestError,
    InvalidRequestError,
    PayloadTooLargeError,
    SizeLimit,
    UnsupportedMediaError,
)
from serve_app.http.json_body import parse_json_object, read_body, validation_error
from serve_app.http.query.protocol import FORM_OVERHEAD_BYTES, JSON_BODY_MAX_BYTES, QueryRequest
from serve_app.model.prompt import check_user_text
from serve_app.protocol import ClipSource
from serve_app.text import has_control_chars


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
    form_limit = SizeLimit(max_bytes, param="video", limit_name="upload limit", slack_bytes=FORM_OVERHEAD_BYTES)
    form_limit.check_declared(request.headers.get("content-length"))
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
            video_limit = SizeLimit(max_bytes, what="uploaded video", param="video")
            video_limit.check_size(upload.size)
            data = await upload.read()
            video_limit.check_size(len(data))
            return q, ClipSource(data=data, name=upload.filename or "video")
        finally:
            await form.close()
    raise UnsupportedMediaError(
        f"content type {ctype or '(none)'!r} is not supported: send multipart/form-data with a 'video' "
        "file, or application/json with video_path or video_url"
    )
