"""The benches' traffic API (loadtest.traffic) and their summaries, in virtual time over a mock transport."""

import asyncio
import itertools
import json

import httpx
import pytest
from clock import run_virtual

from loadtest import traffic
from loadtest.records import RequestRecord

DONE = {"type": "done", "usage": {"prompt_tokens": 100, "completion_tokens": 4}, "timings": {"decode_ms": 20.0}}


def server(service_s: float, seen: list, status: int = 200):
    """A mock server taking ``service_s`` virtual seconds per request; logs (time, request)."""

    async def handler(request: httpx.Request) -> httpx.Response:
        loop = asyncio.get_running_loop()
        seen.append((loop.time(), request))
        await asyncio.sleep(service_s)
        if status != 200:
            return httpx.Response(status, headers={"retry-after": "1"}, json={"error": {"type": "overloaded"}})
        if b'name="stream"\r\n\r\ntrue' in request.read():
            return httpx.Response(200, content=b'data: {"type": "delta", "text": "a"}\n\n'
                                  b"data: " + httpx.Response(200, json=DONE).content + b"\n\ndata: [DONE]\n\n",
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json={k: v for k, v in DONE.items() if k != "type"})

    return handler


def in_virtual_time(fn, handler, *args, **kwargs) -> list[RequestRecord]:
    def factory(settings):
        return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url=settings.target)

    async def main():
        return await fn("http://bench", *args, client_factory=factory, clock=asyncio.get_running_loop().time,
                        **kwargs)

    return run_virtual(main())


@pytest.fixture
def clip(tmp_path):
    p = tmp_path / "clip.mp4"
    p.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(100))
    return p


def test_a_batch_sends_every_query_once_with_its_span_and_all_at_once(clip):
    seen = []
    queries = [traffic.ClipQuery(clip, f"q{i}", start_s=i, end_s=i + 10) for i in range(4)]
    recs = in_virtual_time(traffic.batch, server(2.0, seen), queries, max_tokens=4, ignore_eos=True, stream=True)
    assert [t for t, _ in seen] == [0.0] * 4  # all in flight at once
    bodies = [r.read() for _, r in seen]
    for i in range(4):
        body = next(b for b in bodies if f'name="question"\r\n\r\nq{i}\r\n'.encode() in b)
        assert f'name="start_s"\r\n\r\n{i}\r\n'.encode() in body
        assert b'name="ignore_eos"\r\n\r\ntrue' in body and clip.read_bytes() in body
    assert all(r.ok and r.first_token_s == pytest.approx(2.0) and r.done_s == pytest.approx(2.0) for r in recs)
    assert [r.completion_tokens for r in recs] == [4] * 4 and all(r.decode_ms == 20.0 for r in recs)
    limited = in_virtual_time(traffic.batch, server(2.0, seen := []), queries, concurrency=2, max_tokens=4)
    assert sorted(r.window_index for r in limited) == [0, 1, 2, 3]
    assert sorted(t for t, _ in seen) == [0.0, 0.0, 2.0, 2.0]


def test_path_queries_send_json_with_the_clip_path(clip):
    seen = []
    query = traffic.ClipQuery(clip, "q", end_s=0.5, upload=False)
    recs = in_virtual_time(traffic.batch, server(0.1, seen), [query] * 2, max_tokens=4)
    assert len(recs) == 2 and all(r.ok for r in recs)
    body = json.loads(seen[0][1].read())
    assert body["video_path"] == str(clip.resolve()) and body["end_s"] == 0.5 and "start_s" not in body
    with pytest.raises(ValueError, match="one clip"):
        traffic.clip_feeds([query, traffic.ClipQuery(clip.with_name("other.mp4"), "q", upload=False)])


def test_closed_loop_clients_send_back_to_back_until_the_duration(clip):
    seen = []
    recs = in_virtual_time(traffic.closed_loop, server(1.0, seen), traffic.ClipQuery(clip, "q"), clients=3,
                           duration_s=4.5, max_tokens=4)
    assert len(recs) == 15 and all(r.ok for r in recs)  # sends at 0, 1, 2, 3, 4 s per client
    assert sorted({r.camera_id for r in recs}) == ["cam-0", "cam-1", "cam-2"]
    assert max(r.done_s for r in recs) == pytest.approx(5.0)  # the last answers are awaited


def test_open_loop_offers_the_rate_whatever_the_answers_and_keeps_refusals(clip):
    seen = []
    recs = in_virtual_time(traffic.open_loop, server(0.01, seen, status=503), traffic.ClipQuery(clip, "q"),
                           rate_rps=50, duration_s=20, max_tokens=4)
    assert 850 <= len(recs) <= 1150  # Poisson: 1000 expected, sd ≈ 32
    assert all(r.status == 503 and r.error_type == "overloaded" and r.retry_after_s == 1.0 for r in recs)
    assert len({r.camera_id for r in recs}) == 16
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(seen)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.02, rel=0.1)
    with pytest.raises(ValueError, match="rate"):
        asyncio.run(traffic.open_loop("http://bench", traffic.ClipQuery(clip, "q"), rate_rps=0, duration_s=1))


def test_paced_cameras_never_overlap_and_keep_their_period(clip):
    seen = []
    recs = in_virtual_time(traffic.paced, server(3.0, seen), traffic.ClipQuery(clip, "q"), cameras=2,
                           period_s=2.0, duration_s=9.5, max_tokens=4)
    cam0 = [round(r.sent_s, 6) for r in recs if r.camera_id == "cam-0"]
    cam1 = [round(r.sent_s, 6) for r in recs if r.camera_id == "cam-1"]
    assert cam0 == [0.0, 3.0, 6.0, 9.0] and cam1 == [1.0, 4.0, 7.0]  # 3-s answers delay each 2-s period


def test_the_virtual_clock_jumps_to_timers_without_waiting():
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.gather(asyncio.sleep(3600), asyncio.sleep(10))
        return loop.time()

    assert run_virtual(main()) == 3600.0  # returns at once (pytest's timeout would catch an hour)

    async def stuck():
        await asyncio.Event().wait()

    with pytest.raises(RuntimeError, match="deadlock"):
        run_virtual(stuck())


def chat_chunk(content=None, usage=None, choices=True):
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": {} if content is None else {"content": content}}] if choices else []}
    if usage:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def test_json_bodies_to_a_chat_route_read_openai_chunks():
    seen = []

    async def handler(request):
        seen.append((asyncio.get_running_loop().time(), request))
        await asyncio.sleep(0.5)
        body = (chat_chunk("") + chat_chunk("Hel") + chat_chunk("lo")
                + chat_chunk(usage={"prompt_tokens": 90, "completion_tokens": 2}, choices=False) + b"data: [DONE]\n\n")
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    bodies = [{"model": "m", "messages": [{"role": "user", "content": f"q{i}"}], "stream": True} for i in range(3)]
    recs = in_virtual_time(traffic.batch_json, handler, bodies)
    assert sorted(json.loads(r.read())["messages"][0]["content"] for _, r in seen) == ["q0", "q1", "q2"]
    assert all(r.url.path == "/v1/chat/completions" for _, r in seen)
    assert all(r.ok and r.delta_events == 2 and r.first_token_s == pytest.approx(0.5) for r in recs), recs
    assert [(r.prompt_tokens, r.completion_tokens, r.request_id) for r in recs] == [(90, 2, "chatcmpl-1")] * 3

    async def cut(request):
        return httpx.Response(200, content=chat_chunk("a"), headers={"content-type": "text/event-stream"})  # no [DONE]

    assert in_virtual_time(traffic.batch_json, cut, bodies[:1])[0].error_kind == "protocol"

    async def failing(request):
        return httpx.Response(200, content=b'data: {"error": {"type": "internal_error", "message": "boom"}}\n\n'
                              b"data: [DONE]\n\n", headers={"content-type": "text/event-stream"})

    err = in_virtual_time(traffic.batch_json, failing, bodies[:1])[0]
    assert err.error_kind == "stream" and err.error_type == "internal_error" and not err.ok
