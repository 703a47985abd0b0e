"""The request id of every HTTP request, from one small ASGI middleware.

Ray Serve's proxy gives each request an ``X-Request-Id`` (the client's, if it sent one,
else its own) and echoes it in the response header. :class:`RequestIdMiddleware` reads
it once and stores it in ``scope["state"]``; routes, error handlers and the auth
middleware read it with :func:`request_id_of`. Outside Serve (unit tests, another
server) a request without the header gets a fresh one (:func:`new_request_id`).

This id names the request in logs, metrics and responses only. It is the client's to
choose, so it never keys anything shared: the engine gets ids the server makes
(:func:`serve_app.generation.new_engine_request_id`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

STATE_KEY = "request_id"


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
            rid = Headers(scope=scope).get("x-request-id") or new_request_id()
            scope.setdefault("state", {})[STATE_KEY] = rid
        await self.app(scope, receive, send)


def request_id_of(scope: Mapping[str, Any]) -> str:
    """The id :class:`RequestIdMiddleware` stored for this request (a ``Request`` is a scope mapping).

    Raises:
        KeyError: the middleware did not run for this request (a wiring bug).
    """
    return scope["state"][STATE_KEY]
