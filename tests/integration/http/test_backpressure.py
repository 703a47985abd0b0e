"""Back-pressure and cancellation on real Serve: bounded downstream queues answer a fast 503,
and a client that goes away frees the engine for the next request.

The engine is the weightless scripted one (``serve_app.testing.engines``: 10 ms per token), so
a request's length is set exactly by ``max_tokens``; decoding is the real PyAV decoder.
"""

import asyncio
from collections.abc import Callable

import httpx
import pytest
from httpx_sse import connect_sse

from serve_app.testing.local_serve import cpu_args as cpu_app_args
from serve_app.testing.local_serve import deploy

SCRIPTED = "serve_app.testing.engines:scripted_engine"
FIELDS = {"question": "What happens?", "end_s": "1"}


def scripted_args(decoder: dict, model_replica: dict) -> dict:
    return cpu_app_args(
        model={"backend": SCRIPTED, "checkpoint": None, "max_concurrent_requests": 1, "warmup": False},
        decoder=decoder,
        model_replica=model_replica,
    )


@pytest.fixture(scope="module")
def apps(serve_session):
    """Two small graphs: one whose decoder queue is the bottleneck, one whose model queue is."""
    from ray import serve

    deploy(
        "bp-decoder",
        "/bp-decoder",
        scripted_args(
            {"max_ongoing_requests": 1, "max_queued_requests": 1}, {"max_ongoing_requests": 1, "max_queued_requests": 1}
        ),
    )
    deploy(
        "bp-model",
        "/bp-model",
        scripted_args(
            {"max_ongoing_requests": 8, "max_queued_requests": -1},
            {"max_ongoing_requests": 1, "max_queued_requests": 1},
        ),
    )
    yield {"decoder": f"{serve_session}/bp-decoder", "model": f"{serve_session}/bp-model"}
    serve.delete("bp-decoder")
    serve.delete("bp-model")


async def burst(url: str, n: int, max_tokens: int, timeout_s: float = 120) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=timeout_s, limits=httpx.Limits(max_connections=n)) as client:
        return await asyncio.gather(
            *(client.post(f"{url}/v1/video/query", json={**FIELDS, "video_path": "intel_car-detection.mp4",
                                                          "max_tokens": max_tokens}) for _ in range(n))
        )


@pytest.mark.parametrize("bottleneck", ["decoder", "model"])
def test_full_downstream_queue_is_503_with_retry_after(apps, bottleneck):
    url = apps[bottleneck]
    # 16 requests of 2 s each against 1 running + 1 queued: an unbounded queue would answer all 16 with 200. How many
    # are turned away depends on when each reaches the model: they reach it over seconds, and each request that ends
    # lets one more in (2026-12-08, 2-core machine: 7 of 16 rejected in CI, 7-14 idle; with 5-s requests 8-10 of 16
    # over 32-43 s, so longer requests do not make the count steadier). A quarter is the bound asked.
    responses = asyncio.run(burst(url, 16, max_tokens=200))
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 503}, statuses
    rejected = [r for r in responses if r.status_code == 503]
    assert len(rejected) >= 4 and statuses.count(200) >= 1, statuses
    for r in rejected:
        assert r.headers["retry-after"] == "1"
        err = r.json()["error"]
        # Serve's BackPressureError ("queue full"), or, for a request that arrived while the ingress had the
        # pipeline marked full by an earlier one, the admission guard's refusal (arrival timing decides which)
        assert err["type"] == "overloaded" and ("queue full" in err["message"] or "queues are full" in err["message"])
    # ... and the service keeps serving.
    r = httpx.post(
        f"{url}/v1/video/query", json={**FIELDS, "video_path": "intel_car-detection.mp4", "max_tokens": 3}, timeout=60
    )
    assert r.status_code == 200, r.text


def long_request_then_short(url: str, abandon) -> httpx.Response:
    """Starts a 3000-token (30 s) generation, lets ``abandon`` drop it, then asks a short question.

    The engine runs one request at a time: if the abandoned one were still generating, the
    short request would wait ~30 s for it and hit its 15-s client timeout.
    """
    abandon(url)
    return httpx.post(
        f"{url}/v1/video/query", json={**FIELDS, "video_path": "intel_car-detection.mp4", "max_tokens": 3}, timeout=15
    )


def first_event_then_close(url: str, route: str, body: dict, is_first: Callable[[dict], bool]) -> None:
    """Streams ``body`` to ``route`` and closes the connection at the first event (its JSON, read by httpx-sse)
    for which ``is_first`` holds (leaving the block closes it mid-generation). Fails if the stream ended without
    such an event: then the generation was read to its end, not abandoned."""
    with httpx.Client(timeout=60) as client, connect_sse(client, "POST", f"{url}{route}", json=body) as events:
        assert events.response.status_code == 200
        for sse in events.iter_sse():
            if sse.data != "[DONE]" and is_first(sse.json()):
                return
    raise AssertionError(f"{route}: the stream ended before its first generated text")


def drop_stream_after_first_delta(url: str) -> None:
    body = {**FIELDS, "video_path": "intel_car-detection.mp4", "max_tokens": 3000, "stream": True}
    first_event_then_close(url, "/v1/video/query", body, lambda event: event.get("type") == "delta")


def drop_openai_stream_after_first_chunk(url: str) -> None:
    body = {
        "model": "tiny-random-qwen2_5_vl",
        "stream": True,
        "max_tokens": 3000,
        "end_s": 1,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "video_url", "video_url": {"url": "intel_car-detection.mp4"}},
                    {"type": "text", "text": "Go on."},
                ],
            }
        ],
    }
    # The chunks are compact JSON: the earlier test looked for '"content": "engine-' (with a space), never
    # matched, and read every one of the 3000 tokens (30 s) instead of closing after the first.
    first_event_then_close(url, "/v1/chat/completions", body,
                           lambda chunk: bool(chunk["choices"] and chunk["choices"][0]["delta"].get("content")))


def time_out_a_plain_request(url: str) -> None:
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            f"{url}/v1/video/query",
            json={**FIELDS, "video_path": "intel_car-detection.mp4", "max_tokens": 3000},
            timeout=2,
        )


@pytest.mark.parametrize(
    "abandon", [drop_stream_after_first_delta, drop_openai_stream_after_first_chunk, time_out_a_plain_request]
)
def test_client_disconnect_cancels_the_generation(apps, abandon):
    r = long_request_then_short(apps["model"], abandon)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3
