"""The body guard (serve_app.http.guards.body) and the one body-size check (serve_app.errors.SizeLimit):
slow bodies, bodies over their route's limit, and the number of large bodies at once."""

import asyncio
import json

import pytest
from asgi_calls import call, chunks, configured_guards, reading_app, reject, scope

from serve_app.errors import PayloadTooLargeError, SizeLimit, declared_length
from serve_app.http.guards.body import BodyGuard


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


def test_a_stream_registration_body_over_its_limit_is_413_before_it_is_read():
    async def run():
        guarded = configured_guards(reading_app)
        receive = chunks([10])
        sc = {**scope("/v1/streams", headers=[("content-length", str(10**6))]), "method": "POST"}
        return await call(guarded, sc, receive), receive

    (status, _, body), receive = asyncio.run(run())
    assert status == 413 and receive.counter["read"] == 0 and "65536" in json.loads(body)["error"]["message"]


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
