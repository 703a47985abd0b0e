"""serve_app.http.shared_result.SharedResult: the readiness check's shared call."""

import asyncio

import pytest

from serve_app.http.shared_result import SharedResult


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
