"""The ingress's request guards (serve_app.http.guards) driven as plain ASGI apps: no Ray, no sockets.

Also :class:`serve_app.http.shared_result.SharedResult` (the readiness check's shared call).
"""

import asyncio
import json

import pytest

from serve_app.errors import PayloadTooLargeError, ServeAppError, SizeLimit, declared_length, to_http
from serve_app.http.guards.admission import AdmissionGuard, mark_pipeline_full
from serve_app.http.guards.body import BodyGuard
from serve_app.http.guards.headers import ControlHeaderGuard
from serve_app.http.guards.request import client_key
from serve_app.http.shared_result import SharedResult
from serve_app.text import has_control_chars, log_safe


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


def test_control_headers_are_refused_whatever_their_spelling():
    guard = ControlHeaderGuard(
        body_reader(None), ["x-request-disconnect-disabled", "serve_multiplexed_model_id"], reject
    )
    for name in ("X-Request-Disconnect-Disabled", "serve-multiplexed-model-id", "SERVE_MULTIPLEXED_MODEL_ID"):
        status, _, body = asyncio.run(call(guard, scope(headers=[(name, "?1")]), chunks([])))
        assert status == 400
        err = json.loads(body)["error"]
        assert err["param"] == name.lower() and name.lower() in err["message"]
    status, _, _ = asyncio.run(call(guard, scope(headers=[("x-request-id", "abc")]), chunks([])))
    assert status == 200


def test_a_trickling_body_gets_408_and_a_steady_one_passes():
    guard = BodyGuard(reading_app, {}, timeout_s=0.2, min_rate_bytes_s=1000, large_body_bytes=10**9,
                      max_large_bodies=1, retry_after_s=1, reject=reject)
    status, _, body = asyncio.run(call(guard, scope(), chunks([1] * 100, gap_s=0.05)))
    assert status == 408 and json.loads(body)["error"]["type"] == "request_timeout"
    assert guard.state.timed_out == 1
    # 1000 bytes every 50 ms (20 kB/s) is far over the minimum rate: never cut off.
    status, _, body = asyncio.run(call(guard, scope(), chunks([1000] * 10, gap_s=0.05)))
    assert status == 200 and body == b"10000"


def test_a_body_is_cut_off_at_its_route_limit_while_it_streams():
    guard = BodyGuard(reading_app, {"/v1/video/query": 10_000}, timeout_s=5, min_rate_bytes_s=1,
                      large_body_bytes=10**9, max_large_bodies=1, retry_after_s=1, reject=reject)
    receive = chunks([4096] * 1000)  # ~4 MB chunked, no Content-Length
    status, _, body = asyncio.run(call(guard, scope(), receive))
    assert status == 413 and "10000 bytes" in json.loads(body)["error"]["message"]
    assert receive.counter["read"] <= 10_000 + 4096  # nothing read past the chunk that crossed the limit
    declared = scope(headers=[("content-length", "20000")])
    receive = chunks([4096] * 5)
    status, _, _ = asyncio.run(call(guard, declared, receive))
    assert status == 413 and receive.counter["read"] == 0  # refused before reading


def test_large_bodies_are_limited_in_number():
    async def run():
        guard = BodyGuard(reading_app, {}, timeout_s=5, min_rate_bytes_s=1, large_body_bytes=1000,
                          max_large_bodies=2, retry_after_s=3, reject=reject)
        big = scope(headers=[("content-length", "5000")])
        holders = [asyncio.create_task(call(guard, big, chunks([100], forever=True))) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert guard.state.large_in_flight == 2
        declared = chunks([5000])
        third = await call(guard, big, declared)
        chunked = await call(guard, scope(), chunks([600, 600]))  # crosses the threshold while streaming
        small = await call(guard, scope(), chunks([500]))
        for t in holders:
            t.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        return guard, third, declared, chunked, small

    guard, third, declared, chunked, small = asyncio.run(run())
    assert third[0] == 503 and third[1]["retry-after"] == "3" and declared.counter["read"] == 0
    assert chunked[0] == 503 and small[0] == 200
    assert guard.state.large_in_flight == 0


def guard_for(app, paths, **kw):
    """An admission guard that admits only ``paths``, all of them clip routes."""
    return AdmissionGuard(app, lambda path: path not in paths, paths, **kw)


def hold_app(release: asyncio.Event, status=200):
    async def app(sc, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    return app


def test_admission_refuses_before_the_body_globally_and_per_client():
    async def run():
        release = asyncio.Event()
        guard = guard_for(hold_app(release), {"/v1/video/query"}, max_in_flight=3, max_per_client=2,
                               client_key=client_key, retry_after_s=2, reject=reject)
        a, b, c = ("10.0.0.1", 1), ("10.0.0.2", 1), ("10.0.0.3", 1)
        held = [asyncio.create_task(call(guard, scope(client=x), chunks([]))) for x in (a, a)]
        await asyncio.sleep(0.01)
        receive = chunks([100])
        same_client = await call(guard, scope(client=a), receive)
        other = asyncio.create_task(call(guard, scope(client=b), chunks([])))
        await asyncio.sleep(0.01)
        full = await call(guard, scope(client=c), chunks([]))
        release.set()
        done = await asyncio.gather(*held, other)
        return guard, same_client, receive, full, done

    guard, same_client, receive, full, done = asyncio.run(run())
    assert same_client[0] == 429 and same_client[1]["retry-after"] == "2" and receive.counter["read"] == 0
    assert json.loads(same_client[2])["error"]["type"] == "rate_limit_exceeded"
    assert full[0] == 503
    assert [d[0] for d in done] == [200, 200, 200]
    assert guard.state.in_flight == 0 and guard.state.per_client == {}
    assert guard.state.refused == {"client_limit": 1, "busy": 1}


def test_admission_passes_other_paths_untouched():
    async def run():
        release = asyncio.Event()
        guard = guard_for(hold_app(release), {"/v1/video/query"}, max_in_flight=1, max_per_client=None,
                               client_key=client_key, retry_after_s=1, reject=reject)
        held = asyncio.create_task(call(guard, scope(), chunks([])))
        await asyncio.sleep(0.01)
        health_guard = guard_for(body_reader(None), {"/v1/video/query"}, max_in_flight=0,
                                      max_per_client=None, client_key=client_key, retry_after_s=1, reject=reject)
        health = await call(health_guard, scope(path="/healthz"), chunks([]))
        release.set()
        await held
        return health

    assert asyncio.run(run())[0] == 200


def test_a_refusal_for_load_refuses_the_next_request_before_its_body_until_one_finishes():
    now = [100.0]

    async def run():
        statuses = iter([503, 200, 200])

        async def app(sc, receive, send):
            status = next(statuses)
            if status == 503:  # the route saw a full queue (BackPressureError)
                mark_pipeline_full(sc)
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        guard = guard_for(app, {"/q"}, max_in_flight=10, max_per_client=None, client_key=client_key,
                               retry_after_s=5, reject=reject, clock=lambda: now[0])
        first = await call(guard, scope("/q"), chunks([]))  # the pipeline answered 503
        receive = chunks([100])
        second = await call(guard, scope("/q"), receive)  # refused at once, body unread
        now[0] += 6  # past Retry-After: one request probes again
        third = await call(guard, scope("/q"), chunks([]))
        return guard, first, second, receive, third

    guard, first, second, receive, third = asyncio.run(run())
    assert first[0] == 503 and second[0] == 503 and receive.counter["read"] == 0
    assert guard.state.refused == {"saturated": 1}
    assert third[0] == 200  # came back: the next request is admitted
    assert guard.state.saturated_until == 0.0


def test_client_key_is_the_address_unless_keys_identify_clients():
    sc = scope(headers=[("authorization", "Bearer k1")], client=("10.1.2.3", 999))
    assert client_key(sc, {"authorization": "Bearer k1"}) == "addr:10.1.2.3"
    keyed = client_key(sc, {"authorization": "Bearer k1"}, "api_key", keys_on=True)
    assert keyed.startswith("key:") and "k1" not in keyed
    assert client_key(sc, {}, "api_key", keys_on=True) == "addr:10.1.2.3"
    assert client_key(sc, {"authorization": "Bearer k1"}, "api_key", keys_on=False) == "addr:10.1.2.3"


def test_shared_result_makes_one_call_for_concurrent_callers_and_reuses_it_for_the_ttl():
    now = [0.0]
    calls = []

    async def status():
        calls.append(1)
        await asyncio.sleep(0.01)
        return {"n": len(calls)}

    async def run():
        cache = SharedResult(status, ttl_s=1.0, clock=lambda: now[0])
        many = await asyncio.gather(*(cache.get() for _ in range(64)))
        now[0] = 0.5
        again = await cache.get()
        now[0] = 1.6
        later = await cache.get()
        return many, again, later, cache

    many, again, later, cache = asyncio.run(run())
    assert {m[1] for m in many} == {1} and again[1] == 1
    assert later[1] == 2 and cache.calls == 2 == len(calls)


def test_shared_result_does_not_keep_a_failure():
    n = [0]

    async def flaky():
        n[0] += 1
        if n[0] == 1:
            raise ConnectionError("controller away")
        return "ok"

    async def run():
        cache = SharedResult(flaky, ttl_s=10)
        with pytest.raises(ConnectionError):
            await cache.get()
        return await cache.get()

    assert asyncio.run(run()) == ("ok", 2)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("cam-1", "cam-1"),
        ("cam\n2026-01-01 INFO request forged -> 200", "cam\\n2026-01-01 INFO request forged -> 200"),
        ("a\r\x1b[2Jb\x00\x7f", "a\\r\\x1b[2Jb\\x00\\x7f"),
    ],
)
def test_log_safe_escapes_control_characters(value, shown):
    assert log_safe(value) == shown
    assert "\n" not in log_safe(value) and has_control_chars(value) == (value != "cam-1")


def test_log_safe_cuts_long_values():
    out = log_safe("x" * 10_000, limit=50)
    assert out.startswith("x" * 50) and len(out) < 80


def test_a_503_that_is_not_a_full_queue_does_not_refuse_the_next_request():
    """A replica that died under a request is a 503 too, but says nothing about the queues."""

    async def run():
        async def app(sc, receive, send):
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        guard = guard_for(app, {"/q"}, max_in_flight=10, max_per_client=None, client_key=client_key,
                               retry_after_s=60, reject=reject)
        await call(guard, scope("/q"), chunks([]))
        receive = chunks([10])
        await call(guard, scope("/q"), receive)
        return guard, receive

    guard, _receive = asyncio.run(run())
    assert guard.state.refused == {} and guard.state.saturated_until == 0.0


def test_an_abandoned_request_ends_the_saturation_too():
    """A request whose client gives up frees its slot down the pipeline (it is cancelled): after it,
    new requests are admitted again although the last answer was a 503 for load."""

    async def run():
        abandon = asyncio.Event()

        async def app(sc, receive, send):
            kind = sc["path"]
            if kind == "/q/held":
                await abandon.wait()
                raise asyncio.CancelledError  # the client went away: no response
            status = 503 if kind == "/q/full" else 200
            if status == 503:
                mark_pipeline_full(sc)
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        guard = guard_for(app, {"/q/held", "/q/full", "/q/ok"}, max_in_flight=10, max_per_client=None,
                               client_key=client_key, retry_after_s=60, reject=reject)
        held = asyncio.create_task(call(guard, scope("/q/held"), chunks([])))
        await asyncio.sleep(0.01)
        full = await call(guard, scope("/q/full"), chunks([]))
        refused = await call(guard, scope("/q/ok"), chunks([]))
        abandon.set()
        with pytest.raises(asyncio.CancelledError):
            await held
        admitted = await call(guard, scope("/q/ok"), chunks([]))
        return full, refused, admitted

    full, refused, admitted = asyncio.run(run())
    assert (full[0], refused[0], admitted[0]) == (503, 503, 200)


# --- issue 25, item 2: every route through the same gate -----------------------------------------------


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


def test_a_stream_registration_body_over_its_limit_is_413_before_it_is_read():
    async def run():
        guarded = configured_guards(reading_app)
        receive = chunks([10])
        sc = {**scope("/v1/streams", headers=[("content-length", str(10**6))]), "method": "POST"}
        return await call(guarded, sc, receive), receive

    (status, _, body), receive = asyncio.run(run())
    assert status == 413 and receive.counter["read"] == 0 and "65536" in json.loads(body)["error"]["message"]


def test_serve_slots_keep_the_reserved_ones_free_of_subscribers():
    """The subscriber cap (16) equalled the reserved health slots (16): 16 subscribers and 64 uploads held
    all 80. Serve's slots are now the admitted requests + the subscribers + the reserved ones."""
    from serve_app.config import AppConfig
    from serve_app.deployments.ingress_guards import ingress_slots

    cfg = AppConfig.model_validate({"ingress": {"max_ongoing_requests": 64}})
    assert ingress_slots(cfg) == 64 + cfg.streams.max_subscribers + cfg.security.reserved_slots
    off = AppConfig.model_validate({"ingress": {"max_ongoing_requests": 64}, "streams": {"max_streams": 0}})
    assert ingress_slots(off) == 64 + off.security.reserved_slots


# --- issue 25, item 4: the subscriber cap under concurrency -----------------------------------------------


@pytest.mark.parametrize("attempts", [40, 90])
def test_simultaneous_subscriptions_never_overshoot_the_cap(attempts):
    """40 of 40 and 46 of 90 simultaneous GET /v1/events got in with a cap of 16: the route checked the
    count, awaited the stream worker's first poll, then counted. The guard now takes the place first."""

    async def run():
        release = asyncio.Event()
        admitted = []

        async def events_app(sc, receive, send):
            await asyncio.sleep(0.01)  # the first poll of the stream worker
            admitted.append(1)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await release.wait()  # the event stream, until its client leaves
            await send({"type": "http.response.body", "body": b""})

        guarded = configured_guards(events_app, streams={"max_subscribers": 16})
        tasks = [asyncio.create_task(call(guarded, scope("/v1/events"), chunks([]))) for _ in range(attempts)]
        refused = []
        while len(admitted) + len(refused) < attempts:
            await asyncio.sleep(0.01)
            refused = [t for t in tasks if t.done()]
        statuses_refused = [t.result()[0] for t in refused]
        release.set()
        await asyncio.gather(*tasks)
        return len(admitted), statuses_refused, guarded

    admitted, refused, _ = asyncio.run(run())
    assert admitted == 16 and refused == [503] * (attempts - 16)


def test_a_subscription_that_fails_gives_its_place_back():
    async def run():
        async def failing(sc, receive, send):
            raise RuntimeError("the stream worker is gone")

        async def ok(sc, receive, send):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        guard = AdmissionGuard(failing, lambda p: False, (), max_in_flight=10, max_per_client=None,
                               client_key=client_key, retry_after_s=1, reject=reject,
                               subscriber=lambda p: p == "/v1/events", max_subscribers=1)
        with pytest.raises(RuntimeError):
            await call(guard, scope("/v1/events"), chunks([]))
        guard.app = ok
        return await call(guard, scope("/v1/events"), chunks([])), guard.state

    answer, state = asyncio.run(run())
    assert answer[0] == 200 and state.subscribers == 0


# --- issue 25, item 8: cross-site request forgery ------------------------------------------------------


@pytest.mark.parametrize(("method", "headers", "refused"), [
    ("POST", {"origin": "https://evil.example"}, True),
    ("POST", {"sec-fetch-site": "cross-site"}, True),
    ("POST", {"sec-fetch-site": "same-site", "origin": "http://other.local:8000"}, True),
    ("POST", {"origin": "null"}, True),  # a sandboxed iframe or a file:// page
    ("DELETE", {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}, True),
    ("PUT", {"origin": "http://127.0.0.1:8001"}, True),  # another port is another origin
    ("POST", {"origin": "http://127.0.0.1:8000"}, False),  # the dashboard's own origin
    ("POST", {"origin": "http://127.0.0.1:8000", "sec-fetch-site": "same-origin"}, False),
    ("POST", {"sec-fetch-site": "none"}, False),  # typed by the user
    ("POST", {}, False),  # curl, SDKs
    ("POST", {"origin": "https://cams.example.com", "sec-fetch-site": "cross-site"}, False),  # allowed
    ("POST", {"origin": "HTTPS://Cams.Example.com:443"}, False),
    ("GET", {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}, False),  # reads change nothing
])  # fmt: skip
def test_state_changing_requests_from_other_sites_are_refused(method, headers, refused):
    from serve_app.http.guards.headers import CrossSiteGuard

    async def run():
        guard = CrossSiteGuard(body_reader(None), ["https://cams.example.com/"], reject)
        sc = {**scope("/v1/streams", headers=[("host", "127.0.0.1:8000"), *headers.items()]), "method": method}
        receive = chunks([10])
        return await call(guard, sc, receive), receive

    (status, _, body), receive = asyncio.run(run())
    if refused:
        err = json.loads(body)["error"]
        assert status == 403 and err["type"] == "cross_site_request" and receive.counter["read"] == 0
        assert "security.allowed_origins" in err["message"] and "evil" not in err["message"]
    else:
        assert status == 200


def test_the_origin_of_a_header_or_a_setting():
    from serve_app.http.guards.headers import origin_of

    assert origin_of("HTTP://Example.COM:80/") == "http://example.com"
    assert origin_of("https://[::1]:8443") == "https://[::1]:8443"
    assert origin_of("null") is None and origin_of("file:///x") is None and origin_of("http://[::1") is None


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


# ----------------------------------------------------- the one body-size check (serve_app.errors.SizeLimit)


def test_one_size_limit_gives_every_body_the_same_413s():
    limit = SizeLimit(100, param="video")
    assert limit.check_declared("100") == 100 and limit.check_declared(None) is None
    assert limit.check_declared("1e9") is None and declared_length("-5") is None  # malformed: counted as received
    with pytest.raises(PayloadTooLargeError, match=r"^request body is 101 bytes; the limit is 100 bytes$") as e:
        limit.check_declared("101")
    assert e.value.status == 413 and e.value.param == "video"
    with pytest.raises(PayloadTooLargeError, match=r"^request body exceeds the limit of 100 bytes$"):
        limit.check_received(101)
    limit.check_received(100)
    form = SizeLimit(100, limit_name="upload limit", slack_bytes=10)
    assert form.check_declared("110") == 110
    with pytest.raises(PayloadTooLargeError, match=r"is 111 bytes; the upload limit is 100 bytes"):
        form.check_declared("111")
