"""A local HTTPS server and a name resolver that changes its answer, for the pinned-address tests.

* :class:`TlsServer`: HTTPS on ``127.0.0.1`` with a certificate for made-up names, issued by a
  throw-away CA (``trustme``); records each request's TLS server name (SNI), ``Host`` header,
  method, path and body. ``GET /clip`` serves bytes with byte ranges; ``POST`` answers 204.
* :class:`FlippingResolver`: ``socket.getaddrinfo`` that answers a name with one address the
  first time and another afterwards (a DNS answer that changes between check and connection);
  other names go to the real resolver.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import trustme


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args):
        pass

    def _record(self, body: bytes = b"") -> None:
        sni = getattr(self.connection, "sni", None)
        self.server.owner.requests.append(
            {"method": self.command, "path": self.path, "host": self.headers.get("Host"), "sni": sni, "body": body,
             "range": self.headers.get("Range")}
        )

    def do_GET(self):
        self._record()
        data = self.server.owner.body
        rng = self.headers.get("Range", "")
        start = int(rng.removeprefix("bytes=").split("-")[0]) if rng.startswith("bytes=") else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Type", self.server.owner.content_type)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data) - start))
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        with contextlib.suppress(OSError):  # the client closed early (it seeks, or has read what it needs)
            self.wfile.write(data[start:])

    def do_POST(self):
        self._record(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.send_response(204)
        self.end_headers()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: TlsServer

    def handle_error(self, request, client_address):
        pass  # failed handshakes (the wrong-name tests) and clients that hang up


class TlsServer:
    """HTTPS on 127.0.0.1 with a certificate for ``names`` (see the module docstring).

    Attributes:
        ca: the issuing CA; :attr:`client_context` trusts it (and nothing else).
        port: the listening port.
        requests: what arrived, in order (dicts: method, path, host, sni, body, range).
    """

    def __init__(self, names: list[str], body: bytes = b"", content_type: str = "video/mp4"):
        self.ca = trustme.CA()
        cert = self.ca.issue_cert(*names)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(ctx)

        def on_sni(sslsock, name, _ctx):
            sslsock.sni = name

        ctx.sni_callback = on_sni
        self.body, self.content_type = body, content_type
        self.requests: list[dict] = []
        self._srv = _Server(("127.0.0.1", 0), _Handler)
        self._srv.owner = self
        self._srv.socket = ctx.wrap_socket(self._srv.socket, server_side=True)
        self.port = self._srv.server_address[1]
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)

    @property
    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this server's CA only (hostname checking on)."""
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        return ctx

    def __enter__(self) -> TlsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._srv.shutdown()
        self._srv.server_close()


class FlippingResolver:
    """``socket.getaddrinfo`` answering ``name`` with ``first`` once, then ``later`` (see the module docstring).

    Attributes:
        calls: how many times ``name`` was resolved.
    """

    def __init__(self, name: str, first: str = "127.0.0.1", later: str = "127.0.0.2"):
        self.name, self.first, self.later = name, first, later
        self.calls = 0
        self._real = socket.getaddrinfo

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        if host != self.name:
            return self._real(host, port, family, type, proto, flags)
        address = self.first if self.calls == 0 else self.later
        self.calls += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 0)))]
