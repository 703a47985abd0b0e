"""Errors raised before a route runs: Starlette's HTTP exceptions and the API-key check.

Both leave in the one error shape (:func:`serve_app.http.context.error_response`).
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serve_app.errors import AuthenticationError, ErrorInfo, NotFoundError, ServeAppError
from serve_app.http.context import error_response
from serve_app.http.request_id import request_id_of
from serve_app.log_limit import get_logger
from serve_app.metrics import IngressMetrics
from serve_app.text import log_safe

logger = get_logger(__name__)


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's 404 (no route), 405 (wrong method, with ``Allow``) and others, in the error shape.

    Registered for :class:`HTTPException` (Starlette's handler type takes any exception).
    """
    if not isinstance(exc, HTTPException):
        raise exc
    if exc.status_code == 404:
        return error_response(NotFoundError(f"no route {request.method} {request.url.path}"))
    response = error_response(ErrorInfo(exc.status_code, "invalid_request_error", str(exc.detail)))
    for name, value in (exc.headers or {}).items():  # e.g. 405's Allow
        response.headers[name] = value
    return response


class AuthRejector:
    """Sends the error of a request refused before its route runs, counted and logged: the 401 of a
    request without the right API key (``WWW-Authenticate: Bearer``; metrics route ``auth``), or a
    refusal of the request guards (:mod:`serve_app.http.guards`; metrics route ``guard``).

    Args:
        metrics: the ingress's metrics (``error``).
    """

    def __init__(self, metrics: IngressMetrics):
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send, err: ServeAppError) -> None:
        """The ``reject`` callback of :class:`serve_app.http.auth.ApiKeyMiddleware` and the guards."""
        route = "auth" if isinstance(err, AuthenticationError) else "guard"
        self.metrics.error(route, err.type)  # Serve's serve_num_http_requests counts the request itself
        logger.info(
            "request %s: %s %s rejected: %s",
            log_safe(request_id_of(scope)), scope.get("method"), log_safe(scope.get("path")), err.message,
        )
        response = error_response(err)
        if isinstance(err, AuthenticationError):
            response.headers["WWW-Authenticate"] = "Bearer"
        await response(scope, receive, send)
