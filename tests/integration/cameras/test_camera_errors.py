"""Issue 25, item 16: cameras that say what is wrong — permanent failures end in `failed` with the reason at
once, a failure that repeats ends there too, and registration errors speak of cameras, not clips."""

from __future__ import annotations

import asyncio
import socket
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from serve_app.cameras.opening import mp4_index_after_media
from serve_app.cameras.protocol import StreamCreate
from serve_app.cameras.registry import StreamRegistry
from serve_app.cameras.routes import validate_stream
from serve_app.cameras.store import StreamStore
from serve_app.config import AppConfig, SourcesConfig
from serve_app.errors import ServeAppError
from serve_app.sources.rules import check_url
from serve_app.testing.polling import wait_for_async

DATA = Path(__file__).resolve().parents[2] / "data"


def config(root: Path, tmp_path: Path, **streams) -> AppConfig:
    return AppConfig.model_validate({
        "sources": {"allowed_roots": [str(root)], "allow_private_networks": True, "rtsp_open_timeout_s": 0.5},
        "streams": {"db_path": str(tmp_path / "s.sqlite"), "reconnect_initial_s": 0.05, "reconnect_max_s": 0.1,
                    "read_timeout_s": 1.0, **streams},
    })  # fmt: skip


async def no_model(question, clip):  # pragma: no cover - these cameras never send a window
    raise AssertionError("not asked")
    yield


def watch(cfg: AppConfig, url: str, until_s: float = 20.0):
    """Registers ``url`` and returns its status once failed (or after ``until_s``), with the state events."""

    async def main():
        reg = StreamRegistry(cfg, no_model, StreamStore(cfg.streams.db_path))
        try:
            sid = reg.create(StreamCreate(url=url, questions=["q"], window_s=1, fps=1)).id
            await wait_for_async(lambda: reg.status(sid).state == "failed", until_s)
            states = [e.state for e in reg.events.since(0, sid).events if e.type == "state"]
            return reg.status(sid), states
        finally:
            await reg.close()

    return asyncio.run(main())


@pytest.fixture
def odd_files(tmp_path):
    """What a new user registers as a camera by mistake."""
    root = tmp_path / "cams"
    root.mkdir()
    (root / "notes.txt").write_text("these are my notes, not a video\n" * 10)
    (root / "live.m3u8").write_text("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\nseg0.ts\n")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "cam.sdp").write_text(f"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                                  f"m=video {port} RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n")  # fmt: skip
    (root / "empty.mp4").write_bytes(b"")
    return root


@pytest.mark.parametrize(("name", "reason"), [
    ("notes.txt", "not a readable video container"), ("live.m3u8", "not a readable video container"),
    ("cam.sdp", "not a readable video container"), ("empty.mp4", "the camera file is empty"),
])  # fmt: skip
def test_a_file_that_is_not_a_video_fails_at_once_with_the_reason(tmp_path, odd_files, name, reason):
    """Such files were accepted and stayed `reconnecting` forever (FFmpeg's invalid-data error on open
    counted as transient); a playlist or session description was opened without the clip routes'
    container allowlist."""
    status, states = watch(config(odd_files, tmp_path), name)
    assert status.state == "failed" and status.reconnects == 0, status
    assert states == ["connecting", "failed"]
    assert reason in status.last_error and str(odd_files) not in status.last_error


@pytest.fixture
def no_range_server(tmp_path):
    """An HTTP server without byte ranges serving an MP4 whose index is at its end, and one whose index is first."""
    root = tmp_path / "http"
    root.mkdir()
    (root / "index_last.mp4").write_bytes((DATA / "intel_bottle-detection.mp4").read_bytes())
    (root / "index_first.mp4").write_bytes((DATA / "intel_car-detection.mp4").read_bytes())

    class Handler(SimpleHTTPRequestHandler):  # Python's: no Range support, no Accept-Ranges
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_an_http_mp4_with_its_index_at_the_end_and_no_ranges_fails_at_once(tmp_path, no_range_server):
    status, _ = watch(config(DATA, tmp_path), no_range_server + "/index_last.mp4")
    assert status.state == "failed" and status.reconnects == 0, status
    assert "moov" in status.last_error and "faststart" in status.last_error


def test_the_mp4_index_position_is_read_from_the_first_boxes():
    assert mp4_index_after_media((DATA / "intel_bottle-detection.mp4").read_bytes()[:400])
    assert not mp4_index_after_media((DATA / "intel_car-detection.mp4").read_bytes()[:400])
    assert not mp4_index_after_media(b"")


def test_a_failure_that_repeats_ends_in_failed(tmp_path):
    """A camera that refuses every connection is retried streams.max_failed_connects times, then failed."""
    status, states = watch(config(DATA, tmp_path, max_failed_connects=3), "rtsp://127.0.0.1:9/cam")
    assert status.state == "failed" and status.reconnects == 2, status
    assert "3 connection attempts in a row" in status.last_error and "streams.max_failed_connects" in status.last_error
    assert states[0] == "connecting" and set(states[1:-1]) == {"reconnecting"} and states[-1] == "failed"


def resolver(names):
    def resolve(host, port, *a):
        if host not in names:
            raise socket.gaierror(-2, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in names[host]]

    return resolve


def test_an_unresolvable_host_is_not_a_clip_error():
    with pytest.raises(ServeAppError) as e:
        check_url("rtsp://nowhere.invalid/cam", SourcesConfig(), resolve=resolver({}))
    assert e.value.status == 422 and e.value.type == "unresolvable_host" and "clip" not in e.value.message


def test_an_unresolvable_camera_host_names_the_url(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", resolver({}))
    with pytest.raises(ServeAppError) as e:
        validate_stream({"url": "rtsp://nowhere.invalid/cam", "questions": ["q"]}, AppConfig())
    err = e.value
    assert (err.status, err.type, err.param) == (422, "unresolvable_host", "url")
    assert "url host 'nowhere.invalid'" in err.message and "video_url" not in err.message
