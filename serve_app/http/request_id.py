"""The request id of every HTTP request, from one small ASGI middleware.

Ray Serve's proxy gives each request an ``X-Request-Id`` (the client's, if it sent one,
else its own) and echoes it in the response header. :class:`RequestIdMiddleware` reads
it once and stores it in ``scope["state"]``; routes, error handlers and the auth
middleware read it with :func:`request_id_of`. Outside Serve (unit tests, another
server) a request without the header gets a fresh one (:func:`new_request_id`).

This id names the request in logs, metrics and responses only. It is the client's to
choose, so it never keys anything shared: the engine gets ids the server makes
(:func:`serve_app.model.generation.new_engine_request_id`), and what the app echoes (response
bodies) and logs is :func:`header_text` of it: UTF-8 (was: decoded as Latin-1, so ``é``
came back as ``Ã©``), non-printable characters escaped, at most :data:`MAX_REQUEST_ID_CHARS`
(was: a 10 KB id echoed in full). Ray's proxy echoes the header as it came in the response
header and answers a non-UTF-8 byte with its own plain-text 500 before the app runs; a
fronting proxy should replace the header (docs/security.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

STATE_KEY = "request_id"
#: Longest request id the app echoes and logs, characters (a cut one ends with ``…``).
MAX_REQUEST_ID_CHARS = 128


def header_text(scope: Mapping[str, Any], name: bytes, limit_chars: int) -> str | None:
    """A client header's value as the app may echo and log it, or None if absent.

    The raw bytes are decoded as UTF-8 (an invalid byte becomes ``\\xNN``), every non-printable
    character (controls, line and paragraph separators, bidi overrides …) becomes its escape
    (``\\n``, ``\\u202e``), and the result is cut to ``limit_chars`` characters, the last one
    ``…`` when cut. Header names are lower case bytes (ASGI).
    """
    raw = next((v for k, v in scope.get("headers", ()) if k == name), None)
    if raw is None:
        return None
    text = bytes(raw).decode("utf-8", errors="backslashreplace")
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= limit_chars else text[: limit_chars - 1] + "…"


def new_request_id() -> str:
    """A fresh request id (``vq-`` + 24 hex digits of a UUID4)."""
    return "vq-" + uuid.uuid4().hex[:24]


class RequestIdMiddleware:
    """Puts the request's id in ``scope["state"]["request_id"]`` (HTTP requests only).

    Args:
        app: the wrapped ASGI app.
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            rid = header_text(scope, b"x-request-id", MAX_REQUEST_ID_CHARS) or new_request_id()
            scope.setdefault("state", {})[STATE_KEY] = rid
        await self.app(scope, receive, send)


def request_id_of(scope: Mapping[str, Any]) -> str:
    """The id :class:`RequestIdMiddleware` stored for this request (a ``Request`` is a scope mapping).

    Raises:
        KeyError: the middleware did not run for this request (a wiring bug).
    """
    rid: str = scope["state"][STATE_KEY]
    return rid
