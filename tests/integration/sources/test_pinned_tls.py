"""https to checked addresses: webhooks, clip URLs and camera streams connect where check_url looked.

A local TLS server on 127.0.0.1 holds a certificate for the made-up name ``camera.test`` (RFC 2606:
never resolvable), issued by a throw-away CA that the client trusts (``serve_app.sources.rules.TLS_VERIFY``).
Name resolution is patched (:class:`tls_server.FlippingResolver`): ``camera.test`` is 127.0.0.1 the
first time (the check) and 127.0.0.2 afterwards, where nothing listens. A request that arrives
therefore went to the checked address without a second lookup; the server records the SNI and
``Host`` it got (the name, not the address). A certificate for another name is refused.
"""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest
from tls_server import FlippingResolver, TlsServer

from serve_app.cameras.protocol import AlertEvent
from serve_app.cameras.webhook import Webhooks
from serve_app.config import AppConfig, SourcesConfig
from serve_app.errors import UnprocessableClipError
from serve_app.sources import rules as sources
from serve_app.sources.fetch import fetch_url
from serve_app.sources.http_source import PinnedHttpBody
from serve_app.sources.rules import check_url

pytestmark = pytest.mark.unit

NAME = "camera.test"
LOOPBACK = {"allowed_networks": ["127.0.0.1/32"], "url_read_timeout_s": 5.0, "url_connect_timeout_s": 2.0}


@pytest.fixture
def resolver(monkeypatch):
    r = FlippingResolver(NAME)
    monkeypatch.setattr(socket, "getaddrinfo", r)
    return r


def serve(cert_names: list[str], monkeypatch, body: bytes = b"") -> TlsServer:
    srv = TlsServer(cert_names, body=body)
    monkeypatch.setattr(sources, "TLS_VERIFY", srv.client_context)
    return srv


def alert() -> AlertEvent:
    return AlertEvent(id=2, stream_id="str_1", time=0.0, window_index=0, answer_event_id=1, matched=["yes"],
                      answer="yes", random_weights=True)


def deliver(url: str) -> Webhooks:
    cfg = AppConfig.model_validate({"sources": LOOPBACK, "streams": {"webhook_retries": 0, "webhook_timeout_s": 5}})
    hooks = Webhooks(cfg)

    async def main():
        hooks.send(url, alert())
        await hooks.drain()

    asyncio.run(main())
    return hooks


def test_pinned_request_parts():
    https = check_url("https://camera.test:8443/a?b=1", SourcesConfig(allow_private_networks=True),
                      resolve=lambda *a: [(2, 1, 6, "", ("10.1.2.3", 8443))])
    p = https.pinned()
    assert p.url == "https://10.1.2.3:8443/a?b=1"
    assert p.headers == {"Host": "camera.test:8443"} and p.extensions == {"sni_hostname": "camera.test"}
    http = check_url("http://camera.test/x", SourcesConfig(allow_private_networks=True),
                     resolve=lambda *a: [(10, 1, 6, "", ("fd00::1", 80, 0, 0))])
    assert http.pinned().url == "http://[fd00::1]:80/x" and http.pinned().extensions == {}
    assert http.pinned().headers == {"Host": "camera.test"}
    with pytest.raises(ValueError, match="not a checked address"):
        http.pinned("10.9.9.9")


def test_https_webhook_connects_to_the_checked_address_with_sni_and_host(monkeypatch, resolver):
    with serve([NAME], monkeypatch) as srv:
        hooks = deliver(f"https://{NAME}:{srv.port}/hook")
    assert hooks.delivered == 1 and hooks.failed == 0
    assert resolver.calls == 1  # the check; httpx did not look the name up again (it would get 127.0.0.2)
    (req,) = srv.requests
    assert req["method"] == "POST" and req["path"] == "/hook"
    assert req["sni"] == NAME and req["host"] == f"{NAME}:{srv.port}"
    assert b'"matched":["yes"]' in req["body"]


def test_https_webhook_with_a_certificate_for_another_name_is_refused(monkeypatch, resolver):
    with serve(["other.test"], monkeypatch) as srv:
        hooks = deliver(f"https://{NAME}:{srv.port}/hook")
    assert hooks.delivered == 0 and hooks.failed == 1
    assert srv.requests == []  # the handshake failed: nothing was posted


def test_https_clip_url_downloads_from_the_checked_address(monkeypatch, resolver):
    with serve([NAME], monkeypatch, body=b"\x00" * 5000) as srv:
        data = fetch_url(f"https://{NAME}:{srv.port}/clip", SourcesConfig(**LOOPBACK), 10_000)
    assert data == b"\x00" * 5000
    assert resolver.calls == 1
    assert [(r["sni"], r["host"]) for r in srv.requests] == [(NAME, f"{NAME}:{srv.port}")]


def test_https_clip_url_with_a_certificate_for_another_name_is_422(monkeypatch, resolver):
    srv = serve(["other.test"], monkeypatch, body=b"x")
    with srv, pytest.raises(UnprocessableClipError, match="could not connect"):
        fetch_url(f"https://{NAME}:{srv.port}/clip", SourcesConfig(**LOOPBACK), 10_000)
    assert srv.requests == []


def test_camera_body_seeks_with_ranges_on_the_checked_address(monkeypatch, resolver):
    body = bytes(range(256)) * 8192  # 2 MiB: more than the first reads buffer
    with serve([NAME], monkeypatch, body=body) as srv:
        checked = check_url(f"https://{NAME}:{srv.port}/clip", SourcesConfig(**LOOPBACK))
        with PinnedHttpBody(checked, 2.0, 5.0) as f:
            assert f.seekable() and f.size == len(body)
            assert f.peek(4) == body[:4] and f.read(10) == body[:10]
            assert f.seek(-16, 2) == len(body) - 16 and f.read(100) == body[-16:]
            assert f.seek(3) == 3 and f.read(5) == body[3:8] and f.tell() == 8
    assert resolver.calls == 1
    assert [r["range"] for r in srv.requests] == [None, f"bytes={len(body) - 16}-", "bytes=3-"]
    assert all(r["sni"] == NAME for r in srv.requests)


def test_camera_body_with_a_certificate_for_another_name_fails_to_connect(monkeypatch, resolver):
    with serve(["other.test"], monkeypatch, body=b"x") as srv:
        checked = check_url(f"https://{NAME}:{srv.port}/clip", SourcesConfig(**LOOPBACK))
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            PinnedHttpBody(checked, 2.0, 5.0)
    assert srv.requests == []


def test_https_camera_stream_reads_from_the_checked_address(tmp_path, monkeypatch, resolver):
    """A whole camera over https: PyAV demuxes the pinned body (an MP4 whose moov is at the end: seeks)."""
    from fakes import FakeModel

    from serve_app.cameras.protocol import StreamCreate
    from serve_app.cameras.registry import StreamRegistry
    from serve_app.cameras.store import StreamStore
    from serve_app.testing.local_serve import DATA
    from serve_app.testing.polling import wait_for_async

    cfg = AppConfig.model_validate({"sources": LOOPBACK, "streams": {"db_path": str(tmp_path / "s.sqlite")}})
    clip = (DATA / "dashcam_0p4s.mp4").read_bytes()
    with serve([NAME], monkeypatch, body=clip) as srv:

        async def main():
            reg = StreamRegistry(cfg, FakeModel(), StreamStore(cfg.streams.db_path))
            st = reg.create(StreamCreate(url=f"https://{NAME}:{srv.port}/clip", window_s=0.2, fps=5, questions=["q"]))
            ok = await wait_for_async(lambda: reg.status(st.id).windows_answered >= 1, 20)
            s = reg.status(st.id)
            await reg.close()
            return ok, s

        t0 = time.monotonic()
        ok, s = asyncio.run(main())
    assert ok, (s, time.monotonic() - t0)
    assert resolver.calls >= 1 and srv.requests and all(r["sni"] == NAME for r in srv.requests)
