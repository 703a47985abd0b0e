"""Refusals read from a request's headers alone, on every route: Ray Serve's control headers (400) and
state-changing requests that a web page of another site sent (403)."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from serve_app.errors import CrossSiteRequestError, InvalidRequestError
from serve_app.http.guards.request import Reject


class ControlHeaderGuard:
    """ASGI middleware: 400 for a request carrying any of ``headers`` (``_`` and ``-`` alike, any case).

    Ray's proxy acts on its control headers before the ingress runs; refusing them here
    turns the request away before it costs anything (a long generation that its client
    made uncancellable, a replica pinned by a session id). Fronting proxies should strip
    them as well (README, Security).

    Args:
        app: the wrapped ASGI app.
        headers: refused header names.
        reject: sends the error response.
    """

    def __init__(self, app: ASGIApp, headers: Iterable[str], reject: Reject):
        self.app = app
        self.refused = frozenset(_norm(h) for h in headers)
        self.reject = reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.refused:
            for name in Headers(scope=scope):
                if _norm(name) in self.refused:
                    shown = name.lower()
                    err = InvalidRequestError(
                        f"header {shown!r} is a Ray Serve control header and is not accepted from clients; "
                        "remove it",
                        param=shown,
                    )
                    await self.reject(scope, receive, send, err)
                    return
        await self.app(scope, receive, send)


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


# --------------------------------------------------------------------------- cross-site requests

#: Methods that change state: a web page of another site must not be able to send them here.
STATE_CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def origin_of(value: str) -> str | None:
    """``scheme://host[:port]`` of an ``Origin`` header or a configured origin, lower case, the default
    port left out; None for ``null`` or anything that is not an http(s) origin."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in ("http", "https") or not host:
        return None
    host = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return f"{scheme}://{host}" + (f":{port}" if port and port != default else "")


class CrossSiteGuard:
    """ASGI middleware: 403 for a state-changing request (POST, PUT, PATCH, DELETE) that a web page of
    another site sent (cross-site request forgery).

    A browser says where a request comes from: ``Sec-Fetch-Site`` (``same-origin``, ``same-site``,
    ``cross-site``, ``none``) and ``Origin``. A request is refused when ``Sec-Fetch-Site`` is
    ``cross-site`` or ``same-site``, or, without it, when ``Origin`` is present and is neither this
    server's own origin (its host and port are the request's ``Host``) nor one of ``allowed_origins``
    (``null``, a sandboxed or file page, is never allowed); an allowed origin passes either way.
    Requests without both headers (curl, SDKs, other servers) pass: only browsers send them, and a
    browser always does on a cross-site POST. A page of another site could otherwise register
    cameras and webhooks on a server without an API key (a ``text/plain`` or ``multipart/form-data``
    POST needs no CORS preflight).

    Args:
        app: the wrapped ASGI app.
        allowed_origins: origins whose pages may send such requests (``security.allowed_origins``).
        reject: sends the error response.
    """

    def __init__(self, app: ASGIApp, allowed_origins: Iterable[str], reject: Reject):
        self.app = app
        self.allowed = frozenset(o for o in (origin_of(x) for x in allowed_origins) if o)
        self.reject = reject

    def refuses(self, headers: Headers) -> bool:
        """Whether a state-changing request with these headers came from another site's page."""
        site = headers.get("sec-fetch-site", "").strip().lower()
        raw_origin = headers.get("origin")
        origin = origin_of(raw_origin) if raw_origin is not None else None
        if origin is not None and origin in self.allowed:
            return False
        if site in ("cross-site", "same-site"):
            return True
        if site in ("same-origin", "none"):  # the browser's own word: this origin, or the user typed it
            return False
        if raw_origin is None:
            return False  # not a browser's cross-site request (curl, SDKs)
        host = headers.get("host", "").strip().lower()
        return origin is None or origin.split("://", 1)[1] != _authority(host, origin.split("://", 1)[0])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        changes_state = scope["type"] == "http" and scope.get("method") in STATE_CHANGING_METHODS
        if changes_state and self.refuses(Headers(scope=scope)):
            err = CrossSiteRequestError(
                "cross-site request refused: a web page of another origin may not change this server's "
                "state (the request's Origin / Sec-Fetch-Site headers say so); list a trusted origin in "
                "security.allowed_origins. Requests without these browser headers (curl, SDKs) are not "
                "affected",
                param="Origin",
            )
            await self.reject(scope, receive, send, err)
            return
        await self.app(scope, receive, send)


def _authority(host: str, scheme: str) -> str:
    """A ``Host`` header as an origin's ``host[:port]`` (the scheme's default port left out)."""
    default = ":443" if scheme == "https" else ":80"
    return host[: -len(default)] if host.endswith(default) else host
