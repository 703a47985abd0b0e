"""What the request guards read of a request: its path below the mount point, its headers, its client.

Also :data:`Reject`, the callback through which every guard sends its refusal (the ingress's,
which counts and logs it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping

from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from serve_app.errors import ServeAppError

Reject = Callable[[Scope, Receive, Send, ServeAppError], Awaitable[None]]


def app_path(scope: Scope) -> str:
    """The request path below the app's mount point (Serve's route prefix is the ASGI ``root_path``)."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    return path or "/"


def header_map(scope: Scope) -> Headers:
    """The request's headers (Starlette's case-insensitive, read-only view of ``scope["headers"]``)."""
    return Headers(scope=scope)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request presents: ``Authorization: Bearer …`` first, then ``X-API-Key``; else None."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    key = headers.get("x-api-key", "").strip()
    return key or None


def client_key(scope: Scope, headers: Mapping[str, str], identity: str = "address", keys_on: bool = False) -> str:
    """The identity of a request's client for per-client limits.

    ``identity="api_key"`` with API keys on: a hash of the presented key (the key itself
    is never kept); otherwise the client's IP address as the ingress sees it (Ray's
    proxy passes the TCP peer: behind a fronting proxy, every client is the proxy).
    """
    if identity == "api_key" and keys_on:
        key = presented_key(headers)
        if key:
            return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]
    client = scope.get("client")
    host = client[0] if isinstance(client, (tuple, list)) and client else "unknown"
    return f"addr:{host}"
