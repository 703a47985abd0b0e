"""The request-id middleware: the id every route, error handler and log line uses."""

from __future__ import annotations

import re

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from serve_app.serving.request_id import RequestIdMiddleware, request_id_of


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
