"""Issue 25's attacks on the camera side, performed against the real Serve graph on CPU over loopback.

Each test is an attack that got through before the fix (or its regression guard); each asserts
what matters (statuses, counts, what was admitted), never durations. Cameras that must hold no
frames are a closed port on loopback (their readers only reconnect). Bounded: every socket has a
timeout, every loop a count, every stream registered here is deleted.
"""

from __future__ import annotations

import httpx
import pytest

from serve_app.config import AppConfig
from serve_app.stream_protocol import StreamCreate
from serve_app.stream_rules import stream_frame_bytes
from serve_app.testing.local_serve import cpu_args, deploy

PREFIX = "/cameras"
DEAD_CAMERA = "rtsp://127.0.0.1:9/cam"  # refused at once: the reader reconnects with backoff, holds nothing


def app_args() -> dict:
    return cpu_args(
        model={"max_model_len": 4096},
        ingress={"num_cpus": 0, "max_ongoing_requests": 8},
        decoder={"num_cpus": 0, "num_replicas": 1, "max_ongoing_requests": 1, "max_queued_requests": 1},
        limits={"max_upload_bytes": 2_000_000, "retry_after_s": 5},
        sources={"allowed_networks": ["127.0.0.1/32"], "rtsp_open_timeout_s": 2, "rtsp_read_timeout_s": 2},
        security={"body_timeout_s": 2, "body_min_rate_bytes_s": 1000, "reserved_slots": 8},
        streams={"reconnect_initial_s": 5, "reconnect_max_s": 10},
        stream_worker={"num_cpus": 0, "num_replicas": 1},
    )


@pytest.fixture(scope="module")
def app(serve_session):
    from ray import serve

    deploy("cameras", PREFIX, app_args())
    yield serve_session + PREFIX
    serve.delete("cameras")


@pytest.fixture
def cleanup(app):
    """Deletes every stream registered during a test."""
    yield
    for s in httpx.get(f"{app}/v1/streams", timeout=30).json()["data"]:
        httpx.delete(f"{app}/v1/streams/{s['id']}", timeout=30)


def register(app: str, **body) -> httpx.Response:
    return httpx.post(f"{app}/v1/streams", json={"url": DEAD_CAMERA, "questions": ["q"], **body}, timeout=60)


# --- item 1: stream memory without bound -----------------------------------------------------------


def test_a_fleet_of_big_window_streams_stops_at_the_frame_memory_budget(app, cleanup):
    """64 streams of 60 s × 8 fps (480 frames, under limits.max_frames) were all accepted and cost
    ~367 MiB each; now such a window is over the stream cap, and big windows that pass it are
    admitted only while their frames fit streams.max_frame_memory_bytes."""
    wide = [register(app, window_s=60, fps=8) for _ in range(64)]
    assert {r.status_code for r in wide} == {400}
    assert all("streams.max_window_frames" in r.json()["error"]["message"] for r in wide)

    cfg = AppConfig.model_validate(app_args())
    need = stream_frame_bytes(StreamCreate(url=DEAD_CAMERA, questions=["q"], window_s=16, fps=8), cfg)
    fits = cfg.streams.max_frame_memory_bytes // need
    big = [register(app, window_s=16, fps=8) for _ in range(64)]
    statuses = [r.status_code for r in big]
    assert statuses == [201] * fits + [503] * (64 - fits)
    refused = big[-1]
    assert int(refused.headers["retry-after"]) >= 1
    err = refused.json()["error"]
    assert err["type"] == "overloaded" and "streams.max_frame_memory_bytes" in err["message"]
    assert len(httpx.get(f"{app}/v1/streams", timeout=30).json()["data"]) == fits
