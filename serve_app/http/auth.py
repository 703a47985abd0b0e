"""The optional API key: read from an environment variable, compared in constant time.

A key is configured by naming an environment variable (``AppConfig.api_key_env``,
default ``COSMOS_SERVE_API_KEY``) that holds it in the ingress replica's
environment; the key itself never appears in a config file. Unset or empty:
authentication is off. Clients send it as OpenAI clients do
(``Authorization: Bearer <key>``) or as ``X-API-Key: <key>``.

:class:`ApiKeyMiddleware` enforces it on every route except the exempt ones
(the health check), before routing, so no route can forget it.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from serve_app.errors import AuthenticationError
from serve_app.http.guards.request import app_path, presented_key
from serve_app.log_limit import get_logger

logger = get_logger(__name__)


class ApiKey:
    """A configured API key (or none).

    Args:
        key: the expected key; ``None`` or empty disables authentication.
    """

    def __init__(self, key: str | None):
        self._key = key.encode() if key else None

    @classmethod
    def from_env(cls, env_name: str | None, environ: Mapping[str, str] | None = None) -> ApiKey:
        """The key held by environment variable ``env_name`` (unset, empty or no name: disabled)."""
        env = os.environ if environ is None else environ
        return cls(env.get(env_name, "").strip() if env_name else None)

    @property
    def enabled(self) -> bool:
        """True when requests must carry the key."""
        return self._key is not None

    def check(self, headers: Mapping[str, str]) -> None:
        """Checks a request's headers (a Starlette ``Headers``, or any mapping with lower-case names).

        The comparison is ``hmac.compare_digest`` (constant time in the key's
        content), so response timing does not reveal how much of a guess matched.

        Raises:
            AuthenticationError (401): authentication is on and the key is missing or wrong.
        """
        if self._key is None:
            return
        given = presented_key(headers)
        if given is None:
            raise AuthenticationError(
                "missing API key: send 'Authorization: Bearer <key>' (or 'X-API-Key: <key>')"
            )
        if not hmac.compare_digest(given.encode(), self._key):
            raise AuthenticationError("invalid API key")


class ApiKeyMiddleware:
    """ASGI middleware: rejects HTTP requests without the right key, except on exempt paths.

    Args:
        app: the wrapped ASGI app.
        api_key: the configured key (disabled: the middleware passes everything through).
        exempt_paths: paths (below the app's route prefix) served without a key, e.g. ``{"/healthz"}``.
        reject: builds and sends the error response, ``reject(scope, receive, send, error)``
            (the ingress uses its one error format and counts the error).
    """

    def __init__(
        self,
        app: ASGIApp,
        api_key: ApiKey,
        exempt_paths: Iterable[str],
        reject: Callable[[Scope, Receive, Send, AuthenticationError], Awaitable[None]],
    ):
        self.app = app
        self.api_key = api_key
        self.exempt = frozenset(exempt_paths)
        self.reject = reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.api_key.enabled or app_path(scope) in self.exempt:
            await self.app(scope, receive, send)
            return
        try:
            self.api_key.check(Headers(scope=scope))
        except AuthenticationError as e:
            await self.reject(scope, receive, send, e)
            return
        await self.app(scope, receive, send)


