"""Live streams under faults, on real Serve with the scripted engine (no model to load) and the API
key on: the dashboard asks for the key once and never puts it in a URL; a camera that pauses for
20 s recovers by itself (reconnecting meanwhile); killing the stream worker's replica resumes
every registered stream from the SQLite database. Timing is measured by
``python -m benchmarks.cameras faults`` (results/stream_faults.json), not asserted here."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.replicas import kill_replica, replica_actor_names
from serve_app.testing.fake_camera import FakeCamera
from serve_app.testing.local_serve import TEST_API_KEY_ENV, cpu_app_args, deploy
from serve_app.testing.polling import wait_for

APP, PREFIX = "stream-faults", "/stream-faults"
PAUSE_S = 20.0
WAIT_S = 180.0  # generous: a 2-core machine shared with other tests


def _args(tmp):
    return cpu_app_args(
        api_key_env=TEST_API_KEY_ENV,
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


def auth() -> dict:
    return {"Authorization": f"Bearer {os.environ[TEST_API_KEY_ENV]}"}


def status(base: str, sid: str) -> dict:
    return httpx.get(f"{base}/v1/streams/{sid}", headers=auth(), timeout=30).json()


def test_dashboard_asks_for_the_key_once_and_keeps_it_out_of_urls(faults_app, data_dir):
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser test: install Debian's chromium (.ci/run does)")
        pytest.skip("Debian's chromium is not installed")
    from playwright.sync_api import sync_playwright

    assert httpx.get(f"{faults_app}/v1/streams", timeout=30).status_code == 401
    assert httpx.get(f"{faults_app}/dashboard", timeout=30).status_code == 200  # the page itself holds no data
    key = os.environ[TEST_API_KEY_ENV]
    with FakeCamera(seconds=2.0, fps=10, realtime=True, loop=True) as cam:
        body = {"url": cam.url, "name": "gate", "window_s": 1, "fps": 2, "questions": ["anyone?"]}
        sid = httpx.post(f"{faults_app}/v1/streams", headers=auth(), timeout=30, json=body).json()["id"]
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                try:
                    page = browser.new_page()
                    urls: list[str] = []
                    page.on("request", lambda r: urls.append(r.url))
                    page.goto(f"{faults_app}/dashboard")
                    page.wait_for_selector("#keybox:not([hidden])", timeout=60_000)
                    page.fill("#key", key)
                    page.click("#keyform button")
                    page.wait_for_selector(f'section.cam[data-stream="{sid}"][data-answered="1"]', timeout=120_000)
                    page.wait_for_selector("#conn:text-is('live')", timeout=60_000)  # not wait_for_function: CSP
                    page.reload()  # asked once: the key stays for this tab's session
                    page.wait_for_selector(f'section.cam[data-stream="{sid}"]', timeout=60_000)
                    assert page.locator("#keybox").is_hidden()
                finally:
                    browser.close()
        finally:
            httpx.delete(f"{faults_app}/v1/streams/{sid}", headers=auth(), timeout=30)
    assert urls and all(key not in u for u in urls)


def wait(pred, timeout_s: float, step_s: float = 0.5):
    return wait_for(pred, timeout_s, step_s)


def test_paused_camera_recovers_and_killed_worker_resumes(faults_app):
    with FakeCamera(seconds=4.0, fps=10, realtime=True, loop=True) as cam:
        r = httpx.post(f"{faults_app}/v1/streams", headers=auth(), json={
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
        # The killed replica may answer a status for some milliseconds after ray.kill returns, with its own
        # windows_answered: wait for the replacement before asking (counts restart with the new worker).
        replaced = wait(lambda: (names := replica_actor_names(APP, "StreamWorker")) and name not in names, WAIT_S)
        assert replaced, "Serve did not replace the killed stream worker"

        def resumed():
            try:
                s = status(faults_app, sid)
            except httpx.HTTPError:
                return None
            return s if s.get("id") == sid and s.get("windows_answered", 0) >= 1 else None

        s = wait(resumed, WAIT_S, step_s=1.0)
        assert s, "the stream did not resume after the worker replica was killed"
        httpx.delete(f"{faults_app}/v1/streams/{sid}", headers=auth(), timeout=30)
