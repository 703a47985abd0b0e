"""The decode tier on real Serve (CPU): URL and camera sources, bad input, autoscaling 1 → 2 → 1.

One application with an autoscaled decoder (short delays), the weightless
scripted engine (the model is not what is tested here) and loopback sources
allowed (the HTTP server and the fake camera run in this process).
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest

from serve_app.testing.fake_camera import FakeCamera
from serve_app.testing.local_serve import DATA, cpu_app_args, deploy
from serve_app.testing.polling import wait_for

APP, PREFIX = "decode-tier", "/decode-tier"
OPEN_S, READ_S = 2.0, 1.0
AUTOSCALING = {
    "min_replicas": 1,
    "max_replicas": 2,
    # 0.5: one clip in flight already asks for 2 replicas, so the test does not hinge on the
    # second concurrent request being counted in time (missed once in CI on a loaded 2-core machine).
    "target_ongoing_requests": 0.5,
    "upscale_delay_s": 1,
    "downscale_delay_s": 3,
    "metrics_interval_s": 1.0,
    "look_back_period_s": 10,  # tolerates late metric reports on a loaded 2-core machine
}
QUESTION = "What happens?"


@pytest.fixture(scope="module")
def app(serve_session):
    from ray import serve

    args = cpu_app_args(
        model={"backend": "serve_app.testing.engines:scripted_engine", "checkpoint": None, "warmup": False,
               "served_model_name": "scripted", "max_concurrent_requests": 8},
        decoder={"num_replicas": None, "autoscaling_config": AUTOSCALING, "max_ongoing_requests": 2},
        sources={"allowed_roots": [str(DATA)], "allow_private_networks": True,
                 "rtsp_open_timeout_s": OPEN_S, "rtsp_read_timeout_s": READ_S},
    )  # fmt: skip
    deploy(APP, PREFIX, args)
    yield f"{serve_session}{PREFIX}"
    serve.delete(APP)


@pytest.fixture(scope="module")
def clip_server():
    """Serves tests/data over HTTP on loopback."""

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(DATA), **kw)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def query(url, **fields):
    return httpx.post(f"{url}/v1/video/query", json={"question": QUESTION, "max_tokens": 2, **fields}, timeout=120)


def test_http_video_url_is_fetched_and_sampled(app, clip_server):
    r = query(app, video_url=f"{clip_server}/vtest_h264_bframes.mp4", start_s=10, end_s=20)
    assert r.status_code == 200, r.text
    ts = np.array(r.json()["video"]["timestamps_s"])
    assert len(ts) == 40 and ts[0] >= 9.875 and ts[-1] < 20
    r = query(app, video_url=f"{clip_server}/missing.mp4")
    assert r.status_code == 422 and r.json()["error"]["param"] == "video_url", r.text


def test_rtsp_camera_is_captured(app):
    with FakeCamera("normal", seconds=3.0) as cam:
        r = query(app, video_url=cam.url, end_s=2)
    assert r.status_code == 200, r.text
    video = r.json()["video"]
    assert video["num_frames"] == 8 and video["source_width"] == 320


def test_stalled_camera_is_504_within_the_timeout_and_frees_the_replica(app, data_dir):
    with FakeCamera("stall", seconds=4.0, stall_after_s=1.5) as cam:
        t0 = time.monotonic()
        r = query(app, video_url=cam.url, end_s=3)
        elapsed = time.monotonic() - t0
    assert r.status_code == 504, r.text
    err = r.json()["error"]
    assert err["type"] == "timeout" and err["param"] == "video_url" and "stopped sending" in err["message"]
    assert elapsed < OPEN_S + READ_S + 10
    # The replica is free again: two requests at once (its max_ongoing_requests) both succeed.
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: query(app, video_path="dashcam_0p4s.mp4"), range(2)))
    assert [x.status_code for x in results] == [200, 200]


@pytest.mark.parametrize(
    "name,body,status",
    [
        ("empty.mp4", b"", 422),
        ("noise.mp4", np.random.default_rng(0).bytes(20_000), 415),
        ("half.mp4", (DATA / "intel_bottle-detection.mp4").read_bytes()[:250_000], 422),
    ],
)
def test_bad_upload_is_4xx_and_the_next_request_succeeds(app, name, body, status):
    r = httpx.post(f"{app}/v1/video/query", files={"video": (name, body, "video/mp4")},
                   data={"question": QUESTION}, timeout=60)  # fmt: skip
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == "video" and r.json()["error"]["message"]
    ok = query(app, video_path="dashcam_0p4s.mp4")
    assert ok.status_code == 200, ok.text


def test_load_tester_url_cameras_name_the_url_and_window_and_the_server_fetches_it(app, clip_server, tmp_path):
    """Cameras given an http URL send JSON naming it with each window's start_s/end_s (no bytes)."""
    import json

    from loadtest.__main__ import main
    from loadtest.report import read_csv

    out = tmp_path / "url-run"
    rc = main([
        "--target", app, "--cameras", "2", "--source", f"{clip_server}/intel_car-detection.mp4",
        "--window-s", "2", "--fps", "2", "--max-tokens", "2", "--duration-s", "6",
        "--request-timeout-s", "60", "--drain-s", "60", "--out", str(out), "--no-live",
    ])  # fmt: skip
    assert rc in (0, 1)  # keeping up is a timing fact, not asserted
    records = read_csv(out / "requests.csv")
    assert len(records) >= 4 and all(r.ok and r.status == 200 for r in records), [r.error_message for r in records]
    assert {r.num_frames for r in records} == {4}  # each request's 2-s window of the URL's clip at 2 fps
    assert {r.bytes_sent for r in records} == {0}  # the request named the URL; the decode tier fetched it
    doc = json.loads((out / "results.json").read_text())
    assert doc["summary"]["errors"] == 0 and doc["windows"] == {}  # nothing was cut client-side


def test_private_video_url_is_403_on_the_default_config(cpu_app):
    r = query(cpu_app, video_url="http://127.0.0.1:9/clip.mp4")
    assert r.status_code == 403, r.text
    assert r.json()["error"]["param"] == "video_url" and "loopback" in r.json()["error"]["message"]


def decoder_status():
    from ray import serve

    return serve.status().applications[APP].deployments["VideoDecoder"]


def running_decoders() -> int:
    return decoder_status().replica_states.get("RUNNING", 0)


def seconds_until(predicate, timeout_s: float) -> float | None:
    """Seconds until ``predicate()`` holds (polled every 0.25 s); None if not within ``timeout_s``."""
    t0 = time.monotonic()
    return time.monotonic() - t0 if wait_for(predicate, timeout_s) else None


def test_decoder_scales_up_under_concurrent_load_and_back_down(app):
    from ray import serve

    from serve_app.protocol import ClipSource, FrameSampling

    assert seconds_until(lambda: running_decoders() == 1, 30) is not None
    handle = serve.get_deployment_handle("VideoDecoder", app_name=APP)
    source, sampling = ClipSource(path="vtest_h264_bframes.mp4"), FrameSampling(4, 8)
    # Initialise the handle here, once. A handle first used from six threads at once creates six
    # routers under one handle id; the five idle ones keep reporting zero queued requests for that
    # id to the controller and can mask the busy one, so the decoder never scales (failed CI once).
    assert handle.decode.remote(source, sampling, "warm").result().num_frames == 8
    stop = threading.Event()
    done = []

    def client():
        while not stop.is_set():
            done.append(handle.decode.remote(source, sampling, "scale").result().num_frames)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(6)]
    for t in threads:
        t.start()
    try:
        up_s = seconds_until(lambda: running_decoders() == 2, 120)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert up_s is not None, f"the decoder did not scale to 2 replicas under 6 concurrent clients: {decoder_status()}"
    assert done and set(done) == {8}
    down_s = seconds_until(lambda: running_decoders() == 1, 120)
    assert down_s is not None, f"the decoder did not scale back to 1 replica once idle: {decoder_status()}"
