"""The admission guard (serve_app.http.guards.admission): requests refused before their body, globally, per
client and while the pipeline is full, and the subscriber cap under concurrency (issue 25, item 4)."""

import asyncio
import json

import pytest
from asgi_calls import body_reader, call, chunks, configured_guards, guard_for, hold_app, reject, scope

from serve_app.http.guards.admission import AdmissionGuard, mark_pipeline_full
from serve_app.http.guards.request import client_key


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


def test_client_key_is_the_address_unless_keys_identify_clients():
    sc = scope(headers=[("authorization", "Bearer k1")], client=("10.1.2.3", 999))
    assert client_key(sc, {"authorization": "Bearer k1"}) == "addr:10.1.2.3"
    keyed = client_key(sc, {"authorization": "Bearer k1"}, "api_key", keys_on=True)
    assert keyed.startswith("key:") and "k1" not in keyed
    assert client_key(sc, {}, "api_key", keys_on=True) == "addr:10.1.2.3"
    assert client_key(sc, {"authorization": "Bearer k1"}, "api_key", keys_on=False) == "addr:10.1.2.3"


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
