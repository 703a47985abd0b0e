"""ASGI calls for the request-guard tests: a scope, a receive() that gives body chunks, apps that read or hold
a body, and the ingress's guard stack around an app (``serve_app.deployments.ingress_guards``). No Ray, no sockets.

A call returns ``(status, headers, body)``: ``int``, ``dict[str, str]`` (lower-case names), ``bytes``.
"""

import asyncio
import json

from serve_app.errors import ServeAppError, to_http
from serve_app.http.guards.admission import AdmissionGuard


async def reject(scope, receive, send, err: ServeAppError):
    status, body, headers = to_http(err)
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


def scope(path="/v1/video/query", headers=(), client=("10.0.0.1", 5000)):
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "root_path": "",
        "client": client,
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }


async def call(app, sc, receive):
    sent = []

    async def send(m):
        sent.append(m)

    await app(sc, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict((k.decode(), v.decode()) for k, v in start["headers"]), body


def body_reader(chunk_sizes):
    """An app that reads the whole body (as a route does) and answers 200 with its size."""

    async def app(sc, receive, send):
        n = 0
        while True:
            m = await receive()
            n += len(m.get("body", b""))
            if not m.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(n).encode()})

    return app


async def reading_app(sc, receive, send):
    try:
        await body_reader(None)(sc, receive, send)
    except ServeAppError as e:  # as the ingress's routes do: one mapping
        await reject(sc, receive, send, e)


def chunks(sizes, gap_s=0.0, forever=False):
    """A receive() giving body chunks of ``sizes``, ``gap_s`` apart; ``forever``: then never ends."""
    it = iter(sizes)
    counter = {"read": 0}

    async def receive():
        if gap_s:
            await asyncio.sleep(gap_s)
        try:
            n = next(it)
        except StopIteration:
            if forever:
                await asyncio.sleep(3600)
            return {"type": "http.request", "body": b"", "more_body": False}
        counter["read"] += n
        return {"type": "http.request", "body": b"x" * n, "more_body": True}

    receive.counter = counter
    return receive


def guard_for(app, paths, **kw):
    """An admission guard that admits only ``paths``, all of them clip routes."""
    return AdmissionGuard(app, lambda path: path not in paths, paths, **kw)


def hold_app(release: asyncio.Event, status=200):
    async def app(sc, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    return app


def configured_guards(app, **config):
    """The ingress's guard stack (serve_app.deployments.ingress_guards) around ``app``, API key off."""
    from starlette.middleware import Middleware

    from serve_app.config import AppConfig
    from serve_app.deployments.ingress_guards import guard_middleware
    from serve_app.http.auth import ApiKey

    cfg = AppConfig.model_validate(config)

    class PassThrough:
        def __init__(self, app):
            self.app = app

        async def __call__(self, sc, receive, send):
            await self.app(sc, receive, send)

    stack = guard_middleware(cfg, ApiKey(None), Middleware(PassThrough), reject)
    for m in reversed(stack):
        app = m.cls(app, *m.args, **m.kwargs)
    return app
