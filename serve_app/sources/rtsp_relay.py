"""A loopback relay that pins an RTSP session to one checked camera address and refuses redirects.

FFmpeg's RTSP client follows ``RTSP/1.0 301/302`` answers (``Location:``) to any
host, and has no option to stop it; only the first URL would pass the network
policy (:func:`serve_app.sources.rules.check_url`). So FFmpeg never talks to the camera
directly: it connects to :class:`RtspRelay` on ``127.0.0.1``, the relay connects to
the checked address and nowhere else, passes bytes through both ways, and reads
the camera's side as RTSP (RFC 2326 §10.12 interleaved ``$`` frames and RTSP
messages with ``Content-Length`` bodies). A 3xx answer is never passed on: the
relay records its ``Location`` and closes both connections, so the capture fails
with 403 and FFmpeg has no second address to connect to.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import struct
import threading
from urllib.parse import urlsplit

from serve_app.log_limit import LOG_LIMIT, get_logger

logger = get_logger(__name__)

#: Longest RTSP message head (status line + headers) accepted from a camera, in bytes.
MAX_HEAD_BYTES = 64 * 1024


class RtspRelay:
    """Relays one RTSP-over-TCP session between FFmpeg (on loopback) and ``(address, port)``.

    Args:
        address: the checked IP address of the camera.
        port: its TCP port.
        connect_timeout_s: seconds to wait for FFmpeg to connect and for the camera to accept.

    Attributes:
        port: the relay's own port on ``127.0.0.1`` (FFmpeg's URL uses it).
        redirect: the ``Location`` of a refused 3xx answer ("" when it had none), or None.
        upstream_error: why it could not (e.g. ``ConnectionRefusedError``), or None.

    Use as a context manager; :meth:`close` ends the session.
    """

    def url(self, camera_url: str) -> str:
        """``camera_url`` pointed at the relay (user info, path and query kept)."""
        parts = urlsplit(camera_url)
        userinfo = parts.netloc.rpartition("@")[0]
        return parts._replace(netloc=(userinfo + "@" if userinfo else "") + f"127.0.0.1:{self.port}").geturl()

    def __init__(self, address: str, port: int, connect_timeout_s: float):
        self.address, self.upstream_port = address, port
        self.connect_timeout_s = connect_timeout_s
        self.redirect: str | None = None
        self.upstream_error: OSError | None = None
        self._listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listen.bind(("127.0.0.1", 0))
        self._listen.listen(1)
        self._listen.settimeout(connect_timeout_s)
        self.port = self._listen.getsockname()[1]
        self._socks: list[socket.socket] = [self._listen]
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rtsp-relay", daemon=True)

    def __enter__(self) -> RtspRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes both connections and the listening socket (idempotent)."""
        self._closed.set()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()

    def _run(self) -> None:
        try:
            client, _ = self._listen.accept()
        except OSError:
            return
        self._socks.append(client)
        try:
            upstream = socket.create_connection((self.address, self.upstream_port), timeout=self.connect_timeout_s)
        except OSError as e:
            self.upstream_error = e
            LOG_LIMIT.log(logger, logging.INFO, f"rtsp relay {self.address}",
                          "rtsp relay: cannot reach the camera: %s", e.strerror or e)
            self.close()
            return
        self._socks.append(upstream)
        # Blocking sends with a limit (a peer that stops reading ends the session); reads only
        # after the selector says data is there.
        client.settimeout(self.connect_timeout_s)
        upstream.settimeout(self.connect_timeout_s)
        try:
            self._pump(client, upstream)
        except (OSError, ValueError) as e:  # a peer went away or timed out; a garbled camera stream
            LOG_LIMIT.log(logger, logging.INFO, f"rtsp relay {self.address}", "rtsp relay: session ended: %s", e)
        finally:
            self.close()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, "client")
        sel.register(upstream, selectors.EVENT_READ, "upstream")
        pending = bytearray()  # camera bytes not yet parsed into whole frames/messages
        try:
            while not self._closed.is_set():
                for key, _ in sel.select(timeout=0.5):
                    conn: socket.socket = key.fileobj  # type: ignore[assignment]  # only sockets are registered
                    data = conn.recv(65536)
                    if not data:
                        return
                    if key.data == "client":
                        upstream.sendall(data)
                    else:
                        pending += data
                        passed, stop = split_rtsp_stream(pending)
                        if passed:
                            client.sendall(bytes(pending[:passed]))
                            del pending[:passed]
                        if stop is not None:
                            self.redirect = stop
                            LOG_LIMIT.log(logger, logging.WARNING, f"rtsp relay {self.address}",
                                          "rtsp relay: the camera answered with a redirect; refused")
                            return
        finally:
            sel.close()


def split_rtsp_stream(buf: bytes | bytearray) -> tuple[int, str | None]:
    """How many leading bytes of a camera's RTSP-over-TCP stream are whole frames to pass on.

    The stream is a sequence of interleaved binary frames (``$``, channel, 16-bit length,
    payload; RFC 2326 §10.12) and RTSP messages (a head ending in a blank line, then
    ``Content-Length`` bytes). Parsing stops before a 3xx response.

    Returns:
        ``(n, redirect)``: ``buf[:n]`` is whole frames and messages; ``redirect`` is the
        ``Location`` of a 3xx response that follows them ("" without one), or None.

    Raises:
        ValueError: a message head longer than :data:`MAX_HEAD_BYTES`.
    """
    i = 0
    n = len(buf)
    while i < n:
        if buf[i] == 0x24:  # '$'
            if n - i < 4:
                break
            size = struct.unpack_from("!H", buf, i + 2)[0]
            if n - i < 4 + size:
                break
            i += 4 + size
            continue
        end = bytes(buf[i : i + MAX_HEAD_BYTES + 4]).find(b"\r\n\r\n")
        if end < 0:
            if n - i > MAX_HEAD_BYTES:
                raise ValueError("RTSP message head too long")
            break
        head = bytes(buf[i : i + end]).decode("latin-1")
        lines = head.split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        status = lines[0].split(" ")
        if status[0].startswith("RTSP/") and len(status) > 1 and status[1].startswith("3"):
            return i, headers.get("location", "")
        length = headers.get("content-length", "0")
        size = int(length) if length.isdigit() else 0
        if n - i < end + 4 + size:
            break
        i += end + 4 + size
    return i, None
