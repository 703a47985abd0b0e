"""A fake IP camera for tests: a minimal RTSP server on loopback (RFC 2326, TCP-interleaved RTP).

It streams an H.264 clip encoded with PyAV (frames carry their index, see
tests/clipgen.py), packetized per RFC 6184 (single NAL unit packets and
FU-A fragments). Modes reproduce what broken cameras do:

* ``"normal"``: answers and streams the whole clip;
* ``"silent"``: accepts the TCP connection and never answers;
* ``"stall"``: answers, streams ``stall_after_s`` seconds of video, then sends nothing
  while keeping the connection open;
* ``"redirect"``: answers OPTIONS, then ``RTSP/1.0 302 Moved Temporarily`` with
  ``Location: redirect_to`` to DESCRIBE (a camera sending clients elsewhere).

``host``: ``"127.0.0.1"`` or ``"::1"`` (both loopback).
"""

from __future__ import annotations

import socket
import struct
import threading
from fractions import Fraction

import av
import numpy as np
from clipgen import coded_frame

RTP_CLOCK = 90_000
SDP = (
    "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=fake camera\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\na=control:*\r\n"
    "m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1\r\na=control:track1\r\n"
)


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
    units = []

    def collect(packets):
        for p in packets:
            data = bytes(p)
            nals = [n.lstrip(b"\x00") for n in data.split(b"\x00\x00\x01")]
            units.append((int(p.pts) * RTP_CLOCK // fps, [n for n in nals if n]))

    for i in range(int(seconds * fps)):
        frame = av.VideoFrame.from_ndarray(coded_frame(i, w, h), format="rgb24")
        frame.pts = i
        collect(cc.encode(frame))
    collect(cc.encode(None))
    return units


def rtp_packets(units, ssrc: int = 0x1234ABCD, mtu: int = 1400):
    """RTP packets (bytes) for the access units, with their stream time in seconds."""
    seq = 0
    for ts, nals in units:
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
    """An RTSP server on ``127.0.0.1:port`` (see the module docstring for ``mode``).

    Use as a context manager; ``url`` is the stream's address.
    """

    def __init__(
        self,
        mode: str = "normal",
        seconds: float = 4.0,
        stall_after_s: float = 1.0,
        fps: int = 10,
        host: str = "127.0.0.1",
        redirect_to: str = "",
    ):
        self.mode, self.stall_after_s, self.redirect_to = mode, stall_after_s, redirect_to
        self.units = h264_access_units(seconds, fps) if mode not in ("silent", "redirect") else []
        self._server = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((host, 0))
        self._server.listen(8)
        self.port = self._server.getsockname()[1]
        self.url = f"rtsp://{f'[{host}]' if ':' in host else host}:{self.port}/live"
        self.connections = 0
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> "FakeCamera":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._server.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            self._socks.append(conn)
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

    def _stream(self, conn: socket.socket) -> None:
        try:
            for t, packet in rtp_packets(self.units):
                if self.mode == "stall" and t >= self.stall_after_s:
                    break
                conn.sendall(b"$\x00" + struct.pack("!H", len(packet)) + packet)
            self._stop.wait()  # keep the connection open: a stalled camera, or the end of the clip
        except OSError:
            return


def frame_times(fps: int = 10, seconds: float = 4.0) -> np.ndarray:
    """Stream time (s) of each frame the camera sends."""
    return np.arange(int(seconds * fps)) / fps
