"""The project's error hierarchy and its one mapping to HTTP.

Every failure a client can cause or see is a :class:`ServeAppError` subclass
with an HTTP status, an error ``type`` and an optional ``param`` naming the
request field at fault. Errors cross ``DeploymentHandle`` calls as
:class:`ErrorInfo` values (never as raised exceptions), and
:func:`to_http` turns either into the one JSON error shape of every route::

    {"error": {"type": "...", "message": "...", "param": "..." | null}}
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, Literal, NoReturn

from pydantic import BaseModel, Field


class ServeAppError(Exception):
    """Base class. ``status`` is the HTTP status code, ``type`` the error kind."""

    status: int = 500
    type: str = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = dict(headers or {})

    def info(self) -> ErrorInfo:
        """This error as a picklable value for crossing deployment handles."""
        return ErrorInfo(
            status=self.status, type=self.type, message=self.message, param=self.param, headers=self.headers
        )


class InvalidRequestError(ServeAppError):
    """400: malformed request (missing field, wrong type, out-of-range option)."""

    status, type = 400, "invalid_request_error"


class AuthenticationError(ServeAppError):
    """401: an API key is configured and the request's key is missing or wrong."""

    status, type = 401, "authentication_error"


class ForbiddenSourceError(ServeAppError):
    """403: a clip source outside the allowed roots, or a forbidden network address."""

    status, type = 403, "forbidden_source"


class CrossSiteRequestError(ServeAppError):
    """403: a state-changing request sent by another site's web page (``Origin`` / ``Sec-Fetch-Site``)."""

    status, type = 403, "cross_site_request"


class NotFoundError(ServeAppError):
    """404: unknown route or a file under an allowed root that does not exist."""

    status, type = 404, "not_found"


class RequestTimeoutError(ServeAppError):
    """408: the request body did not arrive in time (security.body_timeout_s, body_min_rate_bytes_s)."""

    status, type = 408, "request_timeout"


class PayloadTooLargeError(ServeAppError):
    """413: upload bytes, clip duration or frame dimensions over a configured limit."""

    status, type = 413, "payload_too_large"


def declared_length(header: str | None) -> int | None:
    """A ``Content-Length`` header's byte count, or None (absent, or not all digits: a malformed header
    is the HTTP server's to refuse; the bytes received are still counted against the limit)."""
    return int(header) if header and header.isdigit() else None


@dataclasses.dataclass(frozen=True)
class SizeLimit:
    """A body-size limit and its 413s: the one ``Content-Length`` / body-size check of every body the
    server reads (request bodies: :class:`serve_app.http.guards.body.BodyGuard`,
    :func:`serve_app.http.json_body.read_body` (JSON routes, the streams API's too), the query route's
    form and uploaded file; fetched ``video_url`` bodies).

    Attributes:
        limit_bytes: the limit named in messages, bytes.
        what: what the body is, in messages (``"request body"``, ``"video_url content"``).
        param: the request field the 413 names, or None.
        limit_name: the limit's name in messages (``"limit"``, ``"upload limit"``).
        slack_bytes: bytes a declared length may exceed ``limit_bytes`` by (a multipart form's overhead
            around its file), bytes.
    """

    limit_bytes: int
    what: str = "request body"
    param: str | None = None
    limit_name: str = "limit"
    slack_bytes: int = 0

    def check_declared(self, header: str | None) -> int | None:
        """Refuses a declared length over the limit, before any byte is read; the length, or None
        (see :func:`declared_length`).

        Raises:
            PayloadTooLargeError (413): ``"{what} is N bytes; the {limit_name} is L bytes"``.
        """
        n = declared_length(header)
        self.check_size(n)
        return n

    def check_size(self, n_bytes: int | None) -> None:
        """Refuses a body of a known size (``n_bytes``; None: unknown, passes) over the limit.

        Raises:
            PayloadTooLargeError (413): ``"{what} is N bytes; the {limit_name} is L bytes"``.
        """
        if n_bytes is not None and n_bytes > self.limit_bytes + self.slack_bytes:
            raise PayloadTooLargeError(
                f"{self.what} is {n_bytes} bytes; the {self.limit_name} is {self.limit_bytes} bytes", param=self.param
            )

    def check_received(self, n_bytes: int) -> None:
        """Refuses a body once the bytes received (``n_bytes``) pass the limit.

        Raises:
            PayloadTooLargeError (413): ``"{what} exceeds the {limit_name} of L bytes"``.
        """
        if n_bytes > self.limit_bytes + self.slack_bytes:
            raise PayloadTooLargeError(
                f"{self.what} exceeds the {self.limit_name} of {self.limit_bytes} bytes", param=self.param
            )


class UnsupportedMediaError(ServeAppError):
    """415: not a video container/codec this server can decode (or wrong content type)."""

    status, type = 415, "unsupported_media_type"


class UnprocessableClipError(ServeAppError):
    """422: the clip opens but cannot yield a usable sequence of frames."""

    status, type = 422, "unprocessable_clip"


class UnresolvableHostError(UnprocessableClipError):
    """422: a source URL's host name does not resolve (a clip URL, a camera or a webhook)."""

    type = "unresolvable_host"


class OverloadedError(ServeAppError):
    """503: queues are full or a replica is unavailable; carries ``Retry-After``."""

    status, type = 503, "overloaded"

    def __init__(self, message: str, *, retry_after_s: int = 1, param: str | None = None):
        super().__init__(message, param=param, headers={"Retry-After": str(int(retry_after_s))})


class TooManyRequestsError(ServeAppError):
    """429: this client holds as many requests as it may (security.max_requests_per_client); ``Retry-After``."""

    status, type = 429, "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after_s: int = 1, param: str | None = None):
        super().__init__(message, param=param, headers={"Retry-After": str(int(retry_after_s))})


class NotReadyError(OverloadedError):
    """503: the application is still starting (a deployment has no running replica); ``Retry-After``."""

    type = "not_ready"


class ClientClosedRequestError(ServeAppError):
    """499 (nginx's convention): the client disconnected before its request was read; nobody
    receives the response, but logs and metrics must not count it as a server error (500)."""

    status, type = 499, "client_closed_request"


class UpstreamTimeoutError(ServeAppError):
    """504: a source (camera, URL) or a processing stage exceeded its time limit."""

    status, type = 504, "timeout"


@dataclasses.dataclass(frozen=True)
class ErrorInfo:
    """A client-visible error as a value (crosses ``DeploymentHandle`` calls)."""

    status: int
    type: str
    message: str
    param: str | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)

    def raise_(self) -> NoReturn:
        """Re-raises this value as the matching :class:`ServeAppError`."""
        err = ServeAppError(self.message, param=self.param, headers=self.headers)
        err.status, err.type = self.status, self.type
        raise err


def internal_error(request_id: str | None = None) -> ErrorInfo:
    """A 500 value for a real bug: a request id to find the log line, no stack trace."""
    rid = request_id or uuid.uuid4().hex
    return ErrorInfo(500, "internal_error", f"internal error; see server logs for request id {rid}")


class ErrorDetail(BaseModel):
    """The ``error`` object of every error body."""

    type: str = Field(..., description="Error kind, e.g. invalid_request_error (400) or payload_too_large (413).")
    message: str = Field(..., description="What was wrong and what the limit is; never the input's bytes.")
    param: str | None = Field(..., description="The request field at fault, or null.")


class ErrorResponse(BaseModel):
    """The JSON body of every error response: ``{"error": {"type", "message", "param"}}``."""

    error: ErrorDetail = Field(..., description="What went wrong.")


class ErrorEvent(ErrorResponse):
    """An error inside an event stream (``/v1/video/query`` with ``stream: true``; the stream events, as the
    ``error`` event that ends them): the error body plus ``"type": "error"``."""

    type: Literal["error"] = Field("error", description="The event's kind.")


def error_value(err: ServeAppError | ErrorInfo) -> ErrorInfo:
    """``err`` as a value (an :class:`ErrorInfo` is returned as it is)."""
    return err.info() if isinstance(err, ServeAppError) else err


def error_body(err: ServeAppError | ErrorInfo) -> ErrorResponse:
    """The JSON body of an error (exception or value)."""
    info = error_value(err)
    return ErrorResponse(error=ErrorDetail(type=info.type, message=info.message, param=info.param))


def to_http(err: ServeAppError | ErrorInfo) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Maps an error (exception or value) to ``(status, json_body, headers)``."""
    info = error_value(err)
    return info.status, error_body(info).model_dump(), dict(info.headers)
