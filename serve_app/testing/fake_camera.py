"""A fake IP camera for tests, benches and the load tester: a minimal RTSP server on loopback
(RFC 2326, TCP-interleaved RTP).

It streams an H.264 clip encoded with PyAV (each frame carries its index as a row of
black/white blocks, :func:`coded_frame`), packetized per RFC 6184 (single NAL unit packets and
FU-A fragments). Modes reproduce what broken cameras do:

* ``"normal"``: answers and streams the clip;
* ``"silent"``: accepts the TCP connection and never answers;
* ``"stall"``: answers, streams ``stall_after_s`` seconds of video, then sends nothing
  while keeping the connection open;
* ``"redirect"``: answers OPTIONS, then ``RTSP/1.0 302 Moved Temporarily`` with
  ``Location: redirect_to`` to DESCRIBE (a camera sending clients elsewhere).

Options for live-camera tests: ``realtime=True`` sends each frame at its presentation time (a
real camera's pace; otherwise as fast as the socket takes it), ``loop=True`` starts the clip
again at its end with stream time and RTP sequence continuing (a camera that never ends), and
:meth:`FakeCamera.pause` / :meth:`FakeCamera.resume` make a stall that ends: while paused no
packet is sent and new connections get no answer; on resume both carry on.
Loopback only: the server binds ``host``, ``"127.0.0.1"`` (default) or ``"::1"``.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from fractions import Fraction
from typing import Any

import av
import numpy as np

#: Bits of the frame index drawn into each frame (tests/clipgen.py reads them back).
CODE_BITS = 10
RTP_CLOCK = 90_000
SDP = (
    "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=fake camera\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\na=control:*\r\n"
    "m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1\r\na=control:track1\r\n"
)


def coded_frame(index: int, width: int, height: int) -> np.ndarray:
    """``(height, width, 3) uint8``: a moving gradient with ``index`` written in the top quarter.

    Bit b of ``index`` (LSB first) is block b of a row of :data:`CODE_BITS` blocks:
    white = 1, black = 0.
    """
    y, x = np.mgrid[0:height, 0:width]
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[..., 0] = (x * 255 // max(width - 1, 1) + index * 3) % 256
    img[..., 1] = (y * 255 // max(height - 1, 1)) % 256
    img[..., 2] = 96
    band = max(1, height // 4)
    block = width // CODE_BITS
    for b in range(CODE_BITS):
        img[:band, b * block : (b + 1) * block] = 255 if (index >> b) & 1 else 0
    return img


def h264_access_units(
    seconds: float, fps: int = 10, size: tuple[int, int] = (320, 240)
) -> list[tuple[int, list[bytes]]]:
    """``[(rtp_timestamp, [nal, ...]), ...]``: an Annex-B H.264 clip split into NAL units per frame."""
    w, h = size
    cc = av.CodecContext.create("libx264", "w")
    cc.width, cc.height, cc.pix_fmt = w, h, "yuv420p"
    cc.time_base = Fraction(1, fps)
    cc.framerate = Fraction(fps)
    cc.options = {"preset": "ultrafast", "tune": "zerolatency", "g": str(fps)}
    units: list[tuple[int, list[bytes]]] = []

    def collect(packets: Iterable[av.Packet[Any]]) -> None:
        for p in packets:
            assert p.pts is not None  # the encoder times every packet
            data = bytes(p)
            nals = [n.lstrip(b"\x00") for n in data.split(b"\x00\x00\x01")]
            units.append((int(p.pts) * RTP_CLOCK // fps, [n for n in nals if n]))

    for i in range(int(seconds * fps)):
        frame = av.VideoFrame.from_ndarray(coded_frame(i, w, h), format="rgb24")
        frame.pts = i
        collect(cc.encode(frame))
    collect(cc.encode(None))
    return units


def rtp_packets(
    units: Iterable[tuple[int, list[bytes]]], ssrc: int = 0x1234ABCD, mtu: int = 1400, seq0: int = 0,
    ts_offset: int = 0,
) -> Iterator[tuple[float, bytes]]:
    """RTP packets (bytes) for the access units, with their stream time in seconds.

    ``seq0``: the first sequence number; ``ts_offset``: added to every RTP timestamp (90 kHz ticks).
    """
    seq = seq0
    for ts, nals in units:
        ts += ts_offset
        for j, nal in enumerate(nals):
            last_nal = j == len(nals) - 1
            if len(nal) <= mtu:
                payloads = [nal]
            else:  # FU-A (RFC 6184 §5.8)
                ind, typ = (nal[0] & 0xE0) | 28, nal[0] & 0x1F
                body = nal[1:]
                chunks = [body[k : k + mtu] for k in range(0, len(body), mtu)]
                payloads = []
                for c, chunk in enumerate(chunks):
                    head = typ | (0x80 if c == 0 else 0) | (0x40 if c == len(chunks) - 1 else 0)
                    payloads.append(bytes([ind, head]) + chunk)
            for k, payload in enumerate(payloads):
                marker = 0x80 if last_nal and k == len(payloads) - 1 else 0
                header = struct.pack("!BBHII", 0x80, marker | 96, seq & 0xFFFF, ts & 0xFFFFFFFF, ssrc)
                seq += 1
                yield ts / RTP_CLOCK, header + payload


class FakeCamera:
    """An RTSP server on ``127.0.0.1:port`` (see the module docstring for ``mode`` and the options).

    Use as a context manager; ``url`` is the stream's address.

    Args:
        mode: ``normal``, ``silent``, ``stall`` or ``redirect``.
        seconds: length of the clip, seconds.
        stall_after_s: ``stall`` mode: seconds of video sent before the stall.
        fps: frames per second of the clip.
        realtime: pace packets at their presentation time.
        loop: replay the clip forever (stream time keeps increasing).
        size: ``(width, height)`` of the frames, pixels.
        host: loopback address to bind, ``"127.0.0.1"`` or ``"::1"``.
        redirect_to: ``redirect`` mode: the ``Location`` the camera sends clients to.
    """

    def __init__(
        self,
        mode: str = "normal",
        seconds: float = 4.0,
        stall_after_s: float = 1.0,
        fps: int = 10,
        realtime: bool = False,
        loop: bool = False,
        size: tuple[int, int] = (320, 240),
        host: str = "127.0.0.1",
        redirect_to: str = "",
    ):
        self.mode, self.stall_after_s, self.redirect_to = mode, stall_after_s, redirect_to
        self.realtime, self.loop, self.fps = realtime, loop, fps
        self.seconds = seconds
        self.units = h264_access_units(seconds, fps, size) if mode not in ("silent", "redirect") else []
        self._server = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((host, 0))
        self._server.listen(8)
        self.port = self._server.getsockname()[1]
        self.url = f"rtsp://{f'[{host}]' if ':' in host else host}:{self.port}/live"
        self.connections = 0
        self.packets_sent = 0
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> FakeCamera:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops serving and closes every connection."""
        self._stop.set()
        self._running.set()
        self._server.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()

    def pause(self) -> None:
        """Stops sending (connections stay open; new ones get no answer) until :meth:`resume`."""
        self._running.clear()

    def resume(self) -> None:
        """Ends a :meth:`pause`: streams carry on, waiting connections are answered."""
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def _wait_running(self) -> bool:
        while not self._running.wait(0.1):
            if self._stop.is_set():
                return False
        return not self._stop.is_set()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            self._socks = [s for s in self._socks if s.fileno() != -1] + [conn]
            if self.mode != "silent":
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while not self._stop.is_set():
                while buf[:1] == b"$" and len(buf) >= 4:  # interleaved data from the client (RTCP)
                    n = struct.unpack("!H", buf[2:4])[0]
                    if len(buf) < 4 + n:
                        break
                    buf = buf[4 + n :]
                if b"\r\n\r\n" not in buf or buf[:1] == b"$":
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                    continue
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, url = lines[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
                body_len = int(headers.get("content-length", 0))
                buf = buf[body_len:]
                if not self._wait_running():  # a paused camera answers nothing
                    return
                self._answer(conn, method, url, headers.get("cseq", "0"))
        except OSError:
            return

    def _answer(self, conn: socket.socket, method: str, url: str, cseq: str) -> None:
        extra, body = "", ""
        if method == "OPTIONS":
            extra = "Public: OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER\r\n"
        elif method == "DESCRIBE" and self.mode == "redirect":
            conn.sendall(
                f"RTSP/1.0 302 Moved Temporarily\r\nCSeq: {cseq}\r\nLocation: {self.redirect_to}\r\n"
                "Content-Length: 0\r\n\r\n".encode("latin-1")
            )
            return
        elif method == "DESCRIBE":
            body = SDP
            extra = f"Content-Base: {url.rstrip('/')}/\r\nContent-Type: application/sdp\r\n"
        elif method == "SETUP":
            extra = "Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\nSession: 12345678;timeout=60\r\n"
        elif method in ("PLAY", "GET_PARAMETER", "TEARDOWN"):
            extra = "Session: 12345678\r\n" + ("Range: npt=0.000-\r\n" if method == "PLAY" else "")
        msg = f"RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\n{extra}Content-Length: {len(body)}\r\n\r\n{body}"
        conn.sendall(msg.encode("latin-1"))
        if method == "PLAY":
            threading.Thread(target=self._stream, args=(conn,), daemon=True).start()

    def _packets(self) -> Iterator[tuple[float, bytes]]:
        """``(stream time s, packet)`` over the clip, forever when looping."""
        seq, passes = 0, 0
        period = round(self.seconds * self.fps) * RTP_CLOCK // self.fps
        while True:
            n = 0
            for t, packet in rtp_packets(self.units, seq0=seq, ts_offset=passes * period):
                n += 1
                yield t, packet
            seq += n
            passes += 1
            if not self.loop or n == 0:
                return

    def _stream(self, conn: socket.socket) -> None:
        try:
            t0 = time.monotonic()
            paused_s = 0.0
            for t, packet in self._packets():
                if self.mode == "stall" and t >= self.stall_after_s:
                    break
                if not self._running.is_set():
                    p0 = time.monotonic()
                    if not self._wait_running():
                        return
                    paused_s += time.monotonic() - p0  # a real camera's clock: no burst of stale frames
                if self.realtime:
                    delay = t0 + paused_s + t - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        return
                if self._stop.is_set():
                    return
                conn.sendall(b"$\x00" + struct.pack("!H", len(packet)) + packet)
                self.packets_sent += 1
            self._stop.wait()  # keep the connection open: a stalled camera, or the end of the clip
        except OSError:
            return


def frame_times(fps: int = 10, seconds: float = 4.0) -> np.ndarray:
    """Stream time (s) of each frame the camera sends."""
    return np.arange(int(seconds * fps)) / fps
