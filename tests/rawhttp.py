"""Reading an HTTP/1.1 response from a raw socket: the attack tests hold requests half-sent, so they talk to the
server over plain sockets rather than an HTTP client (tests/integration/http/test_attacks.py,
tests/integration/cameras/test_attacks_cameras.py)."""

from __future__ import annotations

import socket


def read_response(sock: socket.socket, timeout_s: float = 60) -> tuple[int, dict[str, str], bytes]:
    """The response's status, lower-case headers and body (``Content-Length`` bytes; of an event stream, which
    has none, only what came with the head).

    Raises:
        ConnectionError: the server closed the connection before the response's head.
        OSError: the socket timed out (``timeout_s`` seconds between two reads) or failed.
    """
    sock.settimeout(timeout_s)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed without a response: {buf[:200]!r}")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    n = int(headers.get("content-length", "0"))
    while len(body) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split(" ")[1]), headers, body
