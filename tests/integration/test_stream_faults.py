"""Live streams under faults, on real Serve with the scripted engine (no model to load): a camera
that pauses for 20 s recovers by itself (reconnecting meanwhile), and killing the stream worker's
replica resumes every registered stream from the SQLite database. Timing is measured by
``python -m serve_app.bench.stream_faults`` (results/stream_faults.json), not asserted here."""

from __future__ import annotations

import time

import httpx
import pytest

from conftest import cpu_app_args, deploy
from serve_app.bench.local_serve import kill_replica, replica_actor_names
from serve_app.testing.fake_camera import FakeCamera

pytestmark = pytest.mark.integration

APP, PREFIX = "stream-faults", "/stream-faults"
PAUSE_S = 20.0
WAIT_S = 180.0  # generous: a 2-core machine shared with other tests


def _args(tmp):
    return cpu_app_args(
        model={"backend": "serve_app.testing.engines:scripted_engine", "checkpoint": None, "warmup": False,
               "served_model_name": "scripted", "max_concurrent_requests": 8},
        sources={"allowed_roots": [], "allowed_networks": ["127.0.0.1/32"],
                 "rtsp_open_timeout_s": 2.0, "rtsp_read_timeout_s": 2.0},
        streams={"db_path": str(tmp / "streams.sqlite"), "read_timeout_s": 2.0,
                 "reconnect_initial_s": 0.5, "reconnect_max_s": 2.0},
    )  # fmt: skip


@pytest.fixture(scope="module")
def faults_app(serve_session, tmp_path_factory):
    from ray import serve

    deploy(APP, PREFIX, _args(tmp_path_factory.mktemp("streams")))
    yield f"{serve_session}{PREFIX}"
    serve.delete(APP)


def status(base: str, sid: str) -> dict:
    return httpx.get(f"{base}/v1/streams/{sid}", timeout=30).json()


def wait(pred, timeout_s: float, step_s: float = 0.5):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step_s)
    return pred()


def test_paused_camera_recovers_and_killed_worker_resumes(faults_app):
    with FakeCamera(seconds=4.0, fps=10, realtime=True, loop=True) as cam:
        r = httpx.post(f"{faults_app}/v1/streams", json={
            "url": cam.url, "name": "door", "window_s": 2, "fps": 2, "questions": ["anyone?"]}, timeout=30)  # fmt: skip
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert wait(lambda: status(faults_app, sid)["windows_answered"] >= 1, WAIT_S), status(faults_app, sid)

        # a 20-s stall that ends: reconnecting meanwhile, running and answering after
        cam.pause()
        assert wait(lambda: status(faults_app, sid)["state"] == "reconnecting", 30), status(faults_app, sid)
        time.sleep(PAUSE_S)
        during = status(faults_app, sid)
        assert during["state"] == "reconnecting" and during["last_error"]
        cam.resume()
        after = wait(lambda: (s := status(faults_app, sid))["state"] == "running"
                     and s["windows_answered"] > during["windows_answered"] and s, WAIT_S)  # fmt: skip
        assert after, status(faults_app, sid)
        assert after["reconnects"] >= 1

        # the worker's replica dies: Serve replaces it, the stream resumes from the database
        (name,) = replica_actor_names(APP, "StreamWorker")
        kill_replica(name)

        def resumed():
            try:
                s = status(faults_app, sid)
            except httpx.HTTPError:
                return None
            return s if s.get("id") == sid and s.get("windows_answered", 0) >= 1 else None

        s = wait(resumed, WAIT_S, step_s=1.0)
        assert s, "the stream did not resume after the worker replica was killed"
        assert replica_actor_names(APP, "StreamWorker") != [name]
        httpx.delete(f"{faults_app}/v1/streams/{sid}", timeout=30)
