"""The stream registry without Ray: real readers (a looping file, the fake RTSP camera) and a fake model."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from fakes import FakeModel

from serve_app.cameras.held import jpeg_thumbnail
from serve_app.cameras.protocol import AlertEvent, AlertRule, AnswerEvent, StreamCreate
from serve_app.cameras.registry import StreamRegistry, redact
from serve_app.cameras.store import StreamStore
from serve_app.cameras.webhook import Webhooks
from serve_app.config import AppConfig
from serve_app.errors import ErrorInfo, NotFoundError, OverloadedError
from serve_app.protocol import ClipInfo, Delta, Done, VideoInfo
from serve_app.testing.fake_camera import FakeCamera
from serve_app.testing.polling import wait_for_async

DATA = Path(__file__).resolve().parents[2] / "data"
CLIP = "dashcam_0p4s.mp4"  # 0.4 s: a looping camera that wraps every 0.4 s of stream time


def config(tmp_path, **streams) -> AppConfig:
    return AppConfig.model_validate(
        {
            "sources": {"allowed_roots": [str(DATA)], "allow_private_networks": True, "rtsp_open_timeout_s": 1.0},
            "streams": {"db_path": str(tmp_path / "streams.sqlite"), "reconnect_initial_s": 0.2,
                        "reconnect_max_s": 0.5, "read_timeout_s": 1.0, **streams},
        }
    )


def run(coro):
    return asyncio.run(coro)


def test_looping_file_is_answered_window_by_window(tmp_path):
    cfg = config(tmp_path)
    model = FakeModel()

    async def main():
        store = StreamStore(cfg.streams.db_path)
        reg = StreamRegistry(cfg, model, store)
        spec = StreamCreate(url=CLIP, window_s=0.5, fps=4, questions=["anyone?", "what else?"], loop=True,
                            alert=AlertRule(keywords=["person"]), name="lobby")
        st = reg.create(spec)
        assert st.state == "connecting" and st.name == "lobby"
        ok = await wait_for_async(lambda: reg.status(st.id).windows_answered >= 3, 20)
        status = reg.status(st.id)
        batch = reg.events.since(0, st.id)
        await reg.close()
        return ok, status, batch, store

    ok, status, batch, store = run(main())
    assert ok, status
    assert status.state == "running" and status.frames_received > 0
    assert status.latency_ms.p95 is not None and status.freshness_s.p50 is not None
    answers = [e for e in batch.events if isinstance(e, AnswerEvent)]
    alerts = [e for e in batch.events if isinstance(e, AlertEvent)]
    assert {e.question_index for e in answers} == {0, 1}
    first = answers[0]
    assert first.answer == "yes, a person" and first.reasoning == "looked"
    assert first.random_weights and "meaningless" in first.note
    assert first.window.end_s - first.window.start_s == pytest.approx(0.5)
    assert first.window.wall_end >= first.window.wall_start
    assert alerts and alerts[0].matched == ["person"] and alerts[0].answer_event_id in {e.id for e in answers}
    # windows are cut in stream time past the file's 0.4 s: looping continues stream time
    assert max(e.window.end_s for e in answers) > 0.4
    clip = model.clips[0]
    assert clip.frames.ndim == 4 and clip.frames.shape[0] % 2 == 0 and clip.frames.shape[1] % 28 == 0
    assert len(clip.timestamps_s) == 2 and (clip.timestamps_s >= 0).all() and (clip.timestamps_s < 0.5).all()
    thumb = store.thumbnail(status.id)
    assert thumb is not None and thumb[:2] == b"\xff\xd8"  # JPEG
    assert store.count_answers(status.id) == status.windows_answered


def test_slow_model_drops_oldest_windows_and_counts_them(tmp_path):
    cfg = config(tmp_path)

    async def main():
        reg = StreamRegistry(cfg, FakeModel(delay_s=1.5), StreamStore(cfg.streams.db_path))
        st = reg.create(StreamCreate(url=CLIP, window_s=0.25, fps=4, questions=["q"], loop=True))
        ok = await wait_for_async(lambda: reg.status(st.id).windows_dropped.get("model_behind", 0) >= 2, 15)
        s = reg.status(st.id)
        await reg.close()
        return ok, s

    ok, s = run(main())
    assert ok, s
    assert len(s.windows_dropped) == 1  # only model_behind
    assert s.windows_cut >= s.windows_answered + s.windows_dropped["model_behind"]


@pytest.mark.parametrize("fail, reason", [(OverloadedError("busy").info(), "model_busy"),
                                          (ErrorInfo(500, "internal_error", "boom"), "model_error")])
def test_model_refusals_are_counted_and_reported(tmp_path, fail, reason):
    cfg = config(tmp_path)

    async def main():
        reg = StreamRegistry(cfg, FakeModel(fail=fail), StreamStore(cfg.streams.db_path))
        st = reg.create(StreamCreate(url=CLIP, window_s=0.25, fps=4, questions=["q"], loop=True))
        ok = await wait_for_async(lambda: reg.status(st.id).windows_dropped.get(reason, 0) >= 2, 15)
        s = reg.status(st.id)
        await reg.close()
        return ok, s

    ok, s = run(main())
    assert ok and s.windows_answered == 0 and s.last_error.startswith("model:"), s


CLIP_INFO = ClipInfo(
    video=VideoInfo(num_frames=2, frame_width=28, frame_height=28, timestamps_s=[0.0, 0.5], padded_frames=0, fps=2.0,
                    source_width=28, source_height=28, source_fps=2.0, duration_s=1.0, rotation_deg=0),
    warnings=(), decode_ms=1.0, video_tokens=1, model="m", random_weights=True,
)


@pytest.mark.parametrize("final", [Done("stop", 5, 1), OverloadedError("busy").info()], ids=["done", "error_value"])
def test_a_window_reads_the_model_stream_to_its_end(final):
    """Past the final chunk, so the model replica's call returns by itself and Serve logs and counts it
    (see serve_app.http.pipeline.ClipRun)."""
    returned = []

    async def model_stream():
        yield CLIP_INFO
        yield Delta("yes", 1)
        yield final
        returned.append(True)

    out = run(StreamRegistry._collect(model_stream()))
    assert returned == [True]
    assert out == ((CLIP_INFO, "yes", final) if isinstance(final, Done) else (final, "", None))


#: Stands for Serve's request context (a context variable): set while a request is handled.
REQUEST_ID = contextvars.ContextVar("request_id", default=None)


def test_windows_are_not_answered_in_the_registering_request_s_context(tmp_path):
    """The POST that registers a stream must not lend its request id to every later window's model call."""
    cfg = config(tmp_path)
    seen: list[str | None] = []

    class ContextModel(FakeModel):
        async def __call__(self, question, clip):
            seen.append(REQUEST_ID.get())
            async for chunk in super().__call__(question, clip):
                yield chunk

    async def main():
        reg = StreamRegistry(cfg, ContextModel(), StreamStore(cfg.streams.db_path))
        REQUEST_ID.set("req-that-registered")
        st = reg.create(StreamCreate(url=CLIP, window_s=0.25, fps=4, questions=["q"], loop=True))
        ok = await wait_for_async(lambda: reg.status(st.id).windows_answered >= 1, 15)
        await reg.close()
        return ok

    assert run(main()) and seen and set(seen) == {None}, seen


def test_definitions_survive_a_restart_and_delete_forgets(tmp_path):
    cfg = config(tmp_path)

    async def main():
        reg = StreamRegistry(cfg, FakeModel(), StreamStore(cfg.streams.db_path))
        sid = reg.create(StreamCreate(url=CLIP, window_s=0.25, fps=4, questions=["q"], loop=True)).id
        await reg.close()
        reg2 = StreamRegistry(cfg, FakeModel(), StreamStore(cfg.streams.db_path))
        assert reg2.resume() == 1
        ok = await wait_for_async(lambda: reg2.status(sid).windows_answered >= 1, 15)
        await reg2.delete(sid)
        with pytest.raises(NotFoundError):
            reg2.status(sid)
        deleted = [e for e in reg2.events.since(0).events if getattr(e, "state", None) == "deleted"]
        reg3 = StreamRegistry(cfg, FakeModel(), StreamStore(cfg.streams.db_path))
        return ok, deleted, reg3.resume()

    ok, deleted, resumed = run(main())
    assert ok and len(deleted) == 1 and resumed == 0


def test_max_streams_and_permanent_failures(tmp_path):
    cfg = config(tmp_path, max_streams=1)

    async def main():
        reg = StreamRegistry(cfg, FakeModel(), StreamStore(cfg.streams.db_path))
        st = reg.create(StreamCreate(url="no_such_file.mp4", questions=["q"]))
        with pytest.raises(OverloadedError):
            reg.create(StreamCreate(url=CLIP, questions=["q"]))
        ok = await wait_for_async(lambda: reg.status(st.id).state == "failed", 10)
        s = reg.status(st.id)
        await reg.close()
        return ok, s

    ok, s = run(main())
    assert ok and s.last_error.startswith("url 'no_such_file.mp4': no such file"), s


def test_camera_pause_reconnects_and_recovers(tmp_path):
    """A camera that stops sending for 3 s: state goes reconnecting, then running again, answers resume."""
    cfg = config(tmp_path)
    with FakeCamera(seconds=2.0, fps=10, realtime=True, loop=True) as cam:

        async def main():
            reg = StreamRegistry(cfg, FakeModel(), StreamStore(cfg.streams.db_path))
            st = reg.create(StreamCreate(url=cam.url, window_s=1.0, fps=2, questions=["q"]))
            assert await wait_for_async(lambda: reg.status(st.id).windows_answered >= 1, 20)
            cam.pause()
            assert await wait_for_async(lambda: reg.status(st.id).state == "reconnecting", 10)
            await asyncio.sleep(2.0)
            before = reg.status(st.id).windows_answered
            cam.resume()
            # answers resume and the reader settles on running: a reconnect right after the resume (joining
            # the looping stream mid-packet gives FFmpeg "Invalid data") may come before it does
            ok = await wait_for_async(
                lambda: reg.status(st.id).windows_answered > before and reg.status(st.id).state == "running", 30
            )
            s = reg.status(st.id)
            states = [e.state for e in reg.events.since(0, st.id).events if e.type == "state"]
            await reg.close()
            return ok, s, states

        ok, s, states = run(main())
    assert ok, s
    assert s.state == "running" and s.reconnects >= 1 and s.last_error
    assert states[:2] == ["connecting", "running"] and "reconnecting" in states and states[-1] == "running"


def test_webhook_delivers_with_retries_to_loopback(tmp_path):
    cfg = config(tmp_path, webhook_retries=2)
    got: list[dict] = []
    calls = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            calls["n"] += 1
            body = self.rfile.read(int(self.headers["content-length"]))
            if calls["n"] == 1:  # the first delivery fails: retried
                self.send_response(500)
            else:
                got.append(json.loads(body))
                self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/hook"

    async def main():
        hooks = Webhooks(cfg)
        reg = StreamRegistry(cfg, FakeModel(), StreamStore(cfg.streams.db_path), webhooks=hooks)
        st = reg.create(StreamCreate(url=CLIP, window_s=0.25, fps=4, questions=["q"], loop=True,
                                     alert=AlertRule(kind="yes"), webhook=url))
        ok = await wait_for_async(lambda: len(got) >= 1, 15)
        await reg.close()
        await hooks.drain()
        return ok, st.id, hooks

    try:
        ok, sid, hooks = run(main())
    finally:
        srv.shutdown()
    assert ok and got[0]["type"] == "alert" and got[0]["stream_id"] == sid and got[0]["matched"] == ["yes"]
    assert calls["n"] >= 2 and hooks.delivered >= 1


def test_webhook_to_private_address_refused_without_permission(tmp_path):
    cfg = AppConfig.model_validate({"streams": {"db_path": str(tmp_path / "s.sqlite")}})
    hooks = Webhooks(cfg)

    async def main():
        hooks.send("http://127.0.0.1:9/x", AlertRule())
        await hooks.drain()

    run(main())
    assert hooks.failed == 1 and hooks.delivered == 0


def test_rtsp_stream_redirect_is_refused_and_never_followed(tmp_path):
    """A camera stream reaches RTSP cameras through the relay pinned to the checked address (as one-off
    captures do): a 302 to another host fails the stream and the target (on ::1, outside
    sources.allowed_networks) sees no connection."""
    cfg = AppConfig.model_validate({
        "sources": {"allowed_networks": ["127.0.0.1/32"], "rtsp_open_timeout_s": 1.0},
        "streams": {"db_path": str(tmp_path / "s.sqlite"), "reconnect_initial_s": 0.2, "read_timeout_s": 1.0},
    })  # fmt: skip
    with FakeCamera("normal", host="::1") as target, FakeCamera("redirect", redirect_to=target.url) as cam:

        async def main():
            reg = StreamRegistry(cfg, FakeModel(), StreamStore(cfg.streams.db_path))
            st = reg.create(StreamCreate(url=cam.url, window_s=0.5, fps=2, questions=["q"]))
            ok = await wait_for_async(lambda: reg.status(st.id).state == "failed", 20)
            s = reg.status(st.id)
            await reg.close()
            return ok, s

        ok, s = run(main())
        assert target.connections == 0 and cam.connections == 1
    assert ok, s
    assert "redirect" in s.last_error and "::1" not in s.last_error


def test_redact_and_thumbnail():
    assert redact("rtsp://user:pw@cam:554/x") == "rtsp://cam:554/x"
    assert redact("rtsp://cam/x@y") == "rtsp://cam/x@y"
    import numpy as np

    jpg = jpeg_thumbnail(np.zeros((252, 448, 3), np.uint8), 320)
    assert jpg[:2] == b"\xff\xd8" and len(jpg) < 20_000


@pytest.fixture(scope="module")
def http_cams(tmp_path_factory):
    """tests/data plus an HLS playlist and a redirect, over HTTP on loopback."""
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    root = tmp_path_factory.mktemp("http")
    (root / "clip.mp4").write_bytes((DATA / "intel_car-detection.mp4").read_bytes())
    (root / "live.m3u8").write_text("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\nhttp://10.0.0.1/seg0.ts\n")

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def do_GET(self):
            if self.path == "/moved":
                self.send_response(302)
                self.send_header("Location", "http://10.0.0.1/x.mp4")
                self.end_headers()
                return
            super().do_GET()

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.mark.parametrize("path, state, error", [
    ("/clip.mp4", "running", None),
    ("/live.m3u8", "failed", "HLS playlists are refused"),
    ("/moved", "failed", "redirects"),
])  # fmt: skip
def test_http_sources_progressive_mp4_read_hls_and_redirects_refused(tmp_path, http_cams, path, state, error):
    cfg = config(tmp_path)

    async def main():
        reg = StreamRegistry(cfg, FakeModel(), StreamStore(cfg.streams.db_path))
        st = reg.create(StreamCreate(url=http_cams + path, window_s=0.5, fps=2, questions=["q"]))
        want = (lambda: reg.status(st.id).windows_answered >= 1) if state == "running" else (
            lambda: reg.status(st.id).state == "failed")
        ok = await wait_for_async(want, 20)
        s = reg.status(st.id)
        await reg.close()
        return ok, s

    ok, s = run(main())
    assert ok, s
    if error:
        assert error in s.last_error
