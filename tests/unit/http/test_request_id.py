"""The request-id middleware: the id every route, error handler and log line uses."""

from __future__ import annotations

import asyncio
import re

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from serve_app.http.request_id import MAX_REQUEST_ID_CHARS, RequestIdMiddleware, request_id_of


def app() -> Starlette:
    async def echo(request):
        return PlainTextResponse(request_id_of(request))

    return Starlette(routes=[Route("/", echo)], middleware=[Middleware(RequestIdMiddleware)])


def test_the_proxys_header_is_the_request_id():
    with TestClient(app()) as client:
        assert client.get("/", headers={"x-request-id": "abc-1"}).text == "abc-1"


def test_a_request_without_one_gets_a_fresh_id():
    with TestClient(app()) as client:
        ids = {client.get("/").text for _ in range(3)}
    assert len(ids) == 3 and all(re.fullmatch(r"vq-[0-9a-f]{24}", i) for i in ids)


# --- issue 25 item 10: what the app echoes and logs is bounded and sanitised ------------------------


def echoed(raw: bytes) -> str:
    """The id the app echoes for a raw header value (straight ASGI: the test client re-encodes header bytes)."""
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "raw_path": b"/", "query_string": b"",
             "headers": [(b"host", b"t"), (b"x-request-id", raw)], "http_version": "1.1", "scheme": "http",
             "server": ("t", 80), "client": ("127.0.0.1", 1), "root_path": ""}  # fmt: skip
    asyncio.run(app()(scope, receive, send))
    assert sent[0]["status"] == 200  # never a 500 from the app
    return b"".join(m.get("body", b"") for m in sent[1:]).decode()


def test_a_10_kb_request_id_is_cut_to_the_limit():
    rid = echoed(b"a" * 10_000)
    assert len(rid) == MAX_REQUEST_ID_CHARS == 128 and rid == "a" * 127 + "…"
    assert echoed(b"b" * 128) == "b" * 128  # at the limit: as sent


def test_a_utf8_request_id_is_echoed_as_sent_not_mojibake():
    assert echoed("caméra-7-東京".encode()) == "caméra-7-東京"


def test_a_non_utf8_byte_is_escaped_not_a_500():
    assert echoed(b"id-\xff\xfe-x") == "id-\\xff\\xfe-x"


def test_control_and_invisible_characters_are_escaped():
    rid = echoed("a\tb\x1b[2J\u202ec\x7f".encode())
    assert rid == "a\\tb\\x1b[2J\\u202ec\\x7f" and rid.isprintable()
