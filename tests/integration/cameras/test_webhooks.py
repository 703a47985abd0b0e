"""Issue 25 item 6: webhooks bounded in time, memory and number, retried through tenacity.

Each test was an attack on the old hand-written loop: a dripping endpoint never ended a delivery
(httpx's timeout is per read), 200-MB answers were read whole, 32 deliveries in flight (one slow
endpoint) skipped every stream's alerts without a visible count, and a 3xx was retried.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import httpx
import pytest

from serve_app.cameras.protocol import AlertRule, StreamCreate
from serve_app.cameras.registry import StreamRegistry
from serve_app.cameras.store import StreamStore
from serve_app.cameras.webhook import MAX_RESPONSE_BYTES, Webhooks
from serve_app.config import AppConfig
from serve_app.protocol import ClipInfo, Delta, Done, VideoInfo
from serve_app.testing.polling import wait_for_async

DATA = Path(__file__).resolve().parents[2] / "data"
HOOK = "http://127.0.0.1:9/hook"  # a literal: checked without DNS; the mock transport answers


def config(**streams) -> AppConfig:
    return AppConfig.model_validate({
        "sources": {"allow_private_networks": True, "allowed_roots": [str(DATA)]},
        "streams": {"db_path": None, "webhook_retries": 0, "webhook_timeout_s": 1.0, **streams},
    })  # fmt: skip


class Recorder:
    """Metrics: every (stream, outcome)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def webhook(self, stream_id: str, outcome: str) -> None:
        self.seen.append((stream_id, outcome))


def deliver(hooks: Webhooks, n: int = 1, stream_id: str = "str_a", limit_s: float = 30.0) -> None:
    async def main():
        for _ in range(n):
            hooks.send(HOOK, AlertRule(), stream_id)
        await asyncio.wait_for(hooks.drain(), limit_s)  # a delivery that never ends fails the test here

    asyncio.run(main())


def test_an_endpoint_dripping_its_answer_is_cut_at_the_total_deadline():
    """Status line and a header byte every 0.2 s, forever: each read is within httpx's timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()
    conns = []

    def serve():
        conn, _ = srv.accept()
        conns.append(conn)
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        try:
            while not stop.wait(0.2):
                conn.sendall(b"X")
        except OSError:  # the client closed: the deadline worked
            pass

    threading.Thread(target=serve, daemon=True).start()
    hooks = Webhooks(config(webhook_timeout_s=1.0))
    url = f"http://127.0.0.1:{srv.getsockname()[1]}/hook"

    async def main():
        hooks.send(url, AlertRule(), "str_a")
        await asyncio.wait_for(hooks.drain(), 30)

    try:
        asyncio.run(main())
    finally:
        stop.set()
        srv.close()
        for c in conns:
            c.close()
    assert (hooks.delivered, hooks.failed) == (0, 1)
    assert hooks.counts_of("str_a").failed == 1


def test_a_huge_answer_is_read_a_few_kb_deep_then_dropped():
    sent = {"chunks": 0}

    async def body():
        for _ in range(3200):  # 200 MB in 64-KiB chunks
            sent["chunks"] += 1
            yield b"\0" * 65536

    hooks = Webhooks(config(), transport=httpx.MockTransport(lambda req: httpx.Response(200, content=body())))
    deliver(hooks)
    assert (hooks.delivered, hooks.failed) == (1, 0)
    assert sent["chunks"] * 65536 <= 2 * 65536 and MAX_RESPONSE_BYTES <= 65536


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_a_permanent_failure_neither_followed_nor_retried(status):
    calls: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(str(req.url))
        return httpx.Response(status, headers={"location": "http://10.0.0.1/inside"})

    hooks = Webhooks(config(webhook_retries=3), transport=httpx.MockTransport(handler))
    deliver(hooks)
    assert (hooks.delivered, hooks.failed) == (0, 1) and calls == [HOOK]


@pytest.mark.parametrize("status, attempts", [(404, 1), (400, 1), (500, 3), (503, 3), (429, 3), (408, 3)])
def test_only_transient_answers_are_retried(status, attempts, monkeypatch):
    monkeypatch.setattr("serve_app.cameras.webhook.BACKOFF_INITIAL_S", 0.001)
    calls: list[int] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(status)

    hooks = Webhooks(config(webhook_retries=2), transport=httpx.MockTransport(handler))
    deliver(hooks)
    assert len(calls) == attempts and hooks.failed == 1


def test_a_transient_failure_then_success_is_delivered(monkeypatch):
    monkeypatch.setattr("serve_app.cameras.webhook.BACKOFF_INITIAL_S", 0.001)
    answers = iter([httpx.Response(502), httpx.Response(204)])
    hooks = Webhooks(config(webhook_retries=2), transport=httpx.MockTransport(lambda req: next(answers)))
    deliver(hooks)
    assert (hooks.delivered, hooks.failed) == (1, 0)


def test_in_flight_limits_per_stream_and_in_all_skip_and_count():
    """One stream's slow endpoint takes its own places only; every skip is counted per stream and in metrics."""
    release = asyncio.Event()

    async def slow(req: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(204)

    metrics = Recorder()
    hooks = Webhooks(config(webhook_max_in_flight=3, webhook_max_in_flight_per_stream=2),
                     transport=httpx.MockTransport(slow), metrics=metrics)  # fmt: skip

    async def main():
        for _ in range(6):
            hooks.send(HOOK, AlertRule(), "str_a")  # 2 in flight, 4 skipped
        hooks.send(HOOK, AlertRule(), "str_b")  # its own place: in flight
        hooks.send(HOOK, AlertRule(), "str_c")  # 3 in flight in all: skipped
        await asyncio.sleep(0.2)
        release.set()
        await asyncio.wait_for(hooks.drain(), 30)

    asyncio.run(main())
    assert hooks.counts_of("str_a").model_dump() == {"delivered": 2, "failed": 0, "skipped": 4}
    assert hooks.counts_of("str_b").model_dump() == {"delivered": 1, "failed": 0, "skipped": 0}
    assert hooks.counts_of("str_c").model_dump() == {"delivered": 0, "failed": 0, "skipped": 1}
    assert sorted(metrics.seen) == sorted(
        [("str_a", "delivered")] * 2 + [("str_a", "skipped")] * 4 + [("str_b", "delivered"), ("str_c", "skipped")]
    )
    assert hooks._in_flight == {}  # every place given back


class AlwaysYes:
    """A model answering every window "yes" (an alert each time)."""

    async def __call__(self, question, clip):
        yield ClipInfo(video=VideoInfo.of(clip), warnings=(), decode_ms=clip.decode_ms, video_tokens=10,
                       model="fake", random_weights=True)  # fmt: skip
        yield Delta("yes", 1)
        yield Done("stop", 20, 1, queue_ms=0.0, model_ms=1.0, ttft_ms=1.0)


def test_skipped_alerts_show_in_the_stream_status():
    release = asyncio.Event()

    async def slow(req: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(204)

    cfg = config(webhook_max_in_flight_per_stream=1)
    hooks = Webhooks(cfg, transport=httpx.MockTransport(slow))

    async def main():
        reg = StreamRegistry(cfg, AlwaysYes(), StreamStore(None), webhooks=hooks)
        st = reg.create(StreamCreate(url="dashcam_0p4s.mp4", window_s=0.25, fps=4, questions=["q"], loop=True,
                                     alert=AlertRule(kind="yes"), webhook=HOOK))  # fmt: skip
        await wait_for_async(lambda: reg.status(st.id).webhooks.skipped >= 2, 30)
        status = reg.status(st.id)
        release.set()
        await reg.close()
        await asyncio.wait_for(hooks.drain(), 30)
        final = reg.status(st.id)
        await reg.delete(st.id)
        return status, final

    status, final = asyncio.run(main())
    assert status.webhooks.skipped >= 2 and status.alerts >= 3, status
    assert final.webhooks.delivered >= 1 and final.webhooks.skipped >= status.webhooks.skipped
    assert hooks.counts_of(status.id).skipped == 0  # forgotten with the stream
