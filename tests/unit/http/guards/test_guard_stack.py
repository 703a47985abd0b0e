"""The ingress's whole guard stack (serve_app.deployments.ingress_guards): every route through the same gate
(issue 25, item 2), Serve's slots, and a client disconnect as a normal end (issue 25, item 15)."""

import asyncio
import json

import pytest
from asgi_calls import body_reader, call, chunks, configured_guards, hold_app, scope


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/streams"), ("DELETE", "/v1/streams/str_1"), ("GET", "/v1/streams"), ("GET", "/"),
    ("POST", "/v1/video/query"), ("POST", "/v1/chat/completions"), ("POST", "/v1/nowhere"),
])  # fmt: skip
def test_every_route_but_health_and_subscriptions_is_admitted_before_its_body(method, path):
    """80 slow POST /v1/streams bodies took every Serve slot (only the two clip routes were admitted), so
    /healthz timed out; now every route counts against ingress.max_ongoing_requests, before its body."""

    async def run():
        release = asyncio.Event()
        held_app = hold_app(release)

        async def app(sc, receive, send):  # the slow registrations wait; everything else answers at once
            if sc["method"] == "POST" and sc["path"] == "/v1/streams":
                await held_app(sc, receive, send)
            else:
                await body_reader(None)(sc, receive, send)

        guarded = configured_guards(app, ingress={"max_ongoing_requests": 2})
        held = [asyncio.create_task(call(guarded, {**scope("/v1/streams", client=(f"10.0.0.{i}", 1)), "method": "POST"},
                                         chunks([1], forever=True))) for i in range(2)]  # fmt: skip
        await asyncio.sleep(0.01)
        receive = chunks([100])
        refused = await call(guarded, {**scope(path), "method": method}, receive)
        health = [await call(guarded, {**scope(p), "method": "GET"}, chunks([])) for p in
                  ("/healthz", "/readyz", "/v1/models", "/v1/models/m", "/v1/events", "/v1/streams/str_1/events")]
        release.set()
        await asyncio.gather(*held)
        return refused, receive, health

    refused, receive, health = asyncio.run(run())
    assert refused[0] == 503 and receive.counter["read"] == 0
    assert "ingress.max_ongoing_requests" in json.loads(refused[2])["error"]["message"]
    assert all(h[0] == 200 for h in health)


def test_the_per_client_limit_counts_requests_with_a_body_on_every_route():
    async def run():
        release = asyncio.Event()
        guarded = configured_guards(hold_app(release), security={"max_requests_per_client": 1})
        held = asyncio.create_task(call(guarded, {**scope("/v1/streams"), "method": "POST"}, chunks([])))
        await asyncio.sleep(0.01)
        second = await call(guarded, {**scope("/v1/video/query"), "method": "POST"}, chunks([]))
        listing = asyncio.create_task(call(guarded, {**scope("/v1/streams"), "method": "GET"}, chunks([])))
        await asyncio.sleep(0.01)
        release.set()
        return second, await listing, await held

    second, listing, held = asyncio.run(run())
    assert second[0] == 429 and listing[0] == 200 and held[0] == 200


def test_serve_slots_keep_the_reserved_ones_free_of_subscribers():
    """The subscriber cap (16) equalled the reserved health slots (16): 16 subscribers and 64 uploads held
    all 80. Serve's slots are now the admitted requests + the subscribers + the reserved ones."""
    from serve_app.config import AppConfig
    from serve_app.deployments.ingress_guards import ingress_slots

    cfg = AppConfig.model_validate({"ingress": {"max_ongoing_requests": 64}})
    assert ingress_slots(cfg) == 64 + cfg.streams.max_subscribers + cfg.security.reserved_slots
    off = AppConfig.model_validate({"ingress": {"max_ongoing_requests": 64}, "streams": {"max_streams": 0}})
    assert ingress_slots(off) == 64 + off.security.reserved_slots


# --- issue 25, item 15: a client disconnect is a normal end --------------------------------------------


def test_a_client_gone_mid_event_stream_ends_the_stream_normally():
    """Ray's replica raises TaskCancelledError from receive() once the client is gone: the event stream
    (Starlette listens for the disconnect) failed with it and the request was logged as failed."""
    from ray.exceptions import TaskCancelledError
    from starlette.responses import StreamingResponse

    ticks = []

    async def events():
        while True:
            ticks.append(1)
            yield b": keep-alive\n\n"
            await asyncio.sleep(0.01)

    async def app(sc, receive, send):
        await StreamingResponse(events(), media_type="text/event-stream")(sc, receive, send)

    async def run():
        guarded = configured_guards(app, streams={"max_subscribers": 1})
        calls = {"n": 0}

        async def receive():
            calls["n"] += 1
            await asyncio.sleep(0.05)
            raise TaskCancelledError()  # the proxy cancelled the read: the client went away

        sent = []

        async def send(m):
            sent.append(m)

        await guarded(scope("/v1/events") | {"method": "GET"}, receive, send)  # returns: no exception
        again = await call(guarded, scope("/v1/events") | {"method": "GET"}, receive)  # its place is free
        return sent, again

    sent, again = asyncio.run(run())
    assert sent[0]["status"] == 200 and ticks
    assert again[0] == 200


def test_a_client_gone_mid_body_is_a_disconnect_not_an_error():
    from ray.exceptions import TaskCancelledError
    from starlette.requests import ClientDisconnect, Request

    seen = []

    async def app(sc, receive, send):
        try:
            await Request(sc, receive).body()
        except ClientDisconnect:
            seen.append("disconnect")
            return

    async def run():
        async def receive():
            raise TaskCancelledError()

        await configured_guards(app)(scope("/v1/streams") | {"method": "POST"}, receive, lambda m: asyncio.sleep(0))

    asyncio.run(run())
    assert seen == ["disconnect"]
