"""http(s) clip URLs against a local HTTP server: size and time limits, redirects, pinned addresses.

The server listens on loopback, so these tests allow private networks or
resolve made-up ``.test`` names (RFC 2606: never resolvable) to it with an
injected resolver; a download that works with such a name shows the client
connected to the checked address and did no lookup of its own.
"""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from serve_app.config import DecodeConfig, LimitsConfig, SourcesConfig
from serve_app.decode.clip import decode_clip
from serve_app.errors import ForbiddenSourceError, PayloadTooLargeError, UnprocessableClipError, UpstreamTimeoutError
from serve_app.protocol import FrameSampling
from serve_app.sources import rules as sources_module
from serve_app.sources.fetch import fetch_url

PRIVATE_OK = SourcesConfig(allow_private_networks=True, url_read_timeout_s=1.0, url_total_timeout_s=3.0)


class ClipServer(ThreadingHTTPServer):
    daemon_threads = True
    clip = b""
    hosts: list

    def handle_error(self, request, client_address):
        pass  # clients that hang up on purpose (size and time limits)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.hosts.append(self.headers.get("Host"))
        path = self.path
        if path == "/clip.mp4":
            self._send(200, self.server.clip)
        elif path == "/big-declared":
            self.send_response(200)
            self.send_header("Content-Length", str(10**12))
            self.end_headers()
        elif path == "/big-chunked":
            self.send_response(200)
            self.end_headers()
            for _ in range(64):
                self.wfile.write(b"x" * 65536)
        elif path == "/stall":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"x" * 10)
            self.wfile.flush()
            time.sleep(5)
        elif path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
        elif path.startswith("/redirect-to/"):
            self.send_response(302)
            self.send_header("Location", path[len("/redirect-to/") :].replace("|", "/"))
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._send(404, b"no")

    def _send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server(data_dir):
    srv = ClipServer(("127.0.0.1", 0), Handler)
    srv.clip = (data_dir / "dashcam_0p4s.mp4").read_bytes()
    srv.hosts = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()


def base(server, host="127.0.0.1"):
    return f"http://{host}:{server.server_address[1]}"


def resolver(mapping):
    def resolve(host, port, family=0, type=0, *args):
        if host not in mapping:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (mapping[host], port))]

    return resolve


def test_a_clip_url_downloads_and_decodes(server):
    data = fetch_url(base(server) + "/clip.mp4", PRIVATE_OK, 10_000_000)
    assert data == server.clip
    clip = decode_clip(data, FrameSampling(4, 128), DecodeConfig(), LimitsConfig())
    assert clip.num_frames == 2


def test_the_connection_goes_to_the_checked_address_with_the_original_host_header(server):
    calls = []
    res = resolver({"camera.test": "127.0.0.1"})

    def counting(*a):
        calls.append(a[0])
        return res(*a)

    data = fetch_url(base(server, "camera.test") + "/clip.mp4", PRIVATE_OK, 10_000_000, resolve=counting)
    assert data == server.clip
    assert calls == ["camera.test"]  # one lookup, by the checker; the client did none
    assert server.hosts[-1] == f"camera.test:{server.server_address[1]}"


def test_private_addresses_are_refused_before_connecting(server):
    n = len(server.hosts)
    with pytest.raises(ForbiddenSourceError, match="loopback"):
        fetch_url(base(server) + "/clip.mp4", SourcesConfig(), 10_000_000)
    with pytest.raises(ForbiddenSourceError, match="private"):
        res = resolver({"camera.test": "10.0.0.7"})
        fetch_url("http://camera.test/clip.mp4", SourcesConfig(), 10_000_000, resolve=res)
    assert len(server.hosts) == n  # nothing reached the server


def test_each_redirect_hop_is_checked_again(server, monkeypatch):
    # Treat 127.0.0.1 as public and 127.0.0.2 as private for this test.
    monkeypatch.setattr(sources_module, "address_kind", lambda a: None if a == "127.0.0.1" else "private")
    res = resolver({"public.test": "127.0.0.1", "internal.test": "127.0.0.2"})
    port = server.server_address[1]
    cfg = SourcesConfig(url_read_timeout_s=1.0)
    hop = f"http:||internal.test:{port}|clip.mp4"
    with pytest.raises(ForbiddenSourceError, match=r"internal\.test"):
        fetch_url(f"http://public.test:{port}/redirect-to/{hop}", cfg, 10_000_000, resolve=res)
    ok = f"http:||public.test:{port}|clip.mp4"
    assert fetch_url(f"http://public.test:{port}/redirect-to/{ok}", cfg, 10_000_000, resolve=res) == server.clip


def test_redirect_loops_stop_at_the_limit(server):
    with pytest.raises(UnprocessableClipError, match="redirected more than 3 times"):
        fetch_url(base(server) + "/loop", PRIVATE_OK, 10_000_000)


@pytest.mark.parametrize("path", ["/big-declared", "/big-chunked"])
def test_bodies_over_the_limit_are_413(server, path):
    with pytest.raises(PayloadTooLargeError, match=r"limit of 1000000 bytes|the limit is 1000000 bytes"):
        fetch_url(base(server) + path, PRIVATE_OK, 1_000_000)


def test_http_errors_are_422_naming_the_status(server):
    with pytest.raises(UnprocessableClipError, match="HTTP 404"):
        fetch_url(base(server) + "/missing.mp4", PRIVATE_OK, 1_000_000)


def test_a_stalled_server_is_504_after_the_read_timeout(server):
    t0 = time.monotonic()
    with pytest.raises(UpstreamTimeoutError, match="sent nothing for 1 s"):
        fetch_url(base(server) + "/stall", PRIVATE_OK, 1_000_000)
    assert time.monotonic() - t0 < 4.5  # the read limit (1 s), not the server's 5-s stall


def test_a_dripping_server_is_504_after_the_total_timeout(server):
    t0 = time.monotonic()
    with pytest.raises(UpstreamTimeoutError, match="longer than 3 s"):
        fetch_url(base(server) + "/drip", PRIVATE_OK, 1_000_000)
    assert time.monotonic() - t0 < 6  # the total limit (3 s), not the 20 s the drip would take


def test_refused_connections_are_422():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(UnprocessableClipError, match="could not connect"):
            fetch_url(f"http://127.0.0.1:{port}/a.mp4", PRIVATE_OK, 1_000_000)
