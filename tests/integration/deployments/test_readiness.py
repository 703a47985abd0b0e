"""Readiness (``GET /readyz``) while the model replica is replaced, against liveness (``/healthz``).

Serve only routes HTTP to an application once it first runs, so the not-ready window a
load balancer must see is a replacement: the scripted engine dies (``[die]``), the health
check fails, and the new replica takes ``START_DELAY_S`` to load. Meanwhile the ingress is
live but the application is not ready.
"""


import httpx
import pytest

from benchmarks import fault
from serve_app.testing.engines import DIE_MARKER
from serve_app.testing.local_serve import deploy
from serve_app.testing.polling import wait_for

pytestmark = pytest.mark.slow

APP, PREFIX = "readiness", "/readiness"
START_DELAY_S = 8.0


@pytest.fixture(scope="module")
def app(serve_session):
    from ray import serve

    deploy(APP, PREFIX, fault.fault_app_args(model={"engine_args": {"start_delay_s": START_DELAY_S}}), timeout_s=180)
    yield f"{serve_session}{PREFIX}"
    serve.delete(APP)


def ask(url: str, question: str) -> httpx.Response:
    body = {"video_path": "dashcam_0p4s.mp4", "question": question, "max_tokens": 2}
    return httpx.post(f"{url}/v1/video/query", json=body, timeout=60)


def poll_readyz(url: str, status: int, timeout_s: float) -> httpx.Response | None:
    return wait_for(lambda: (r := httpx.get(f"{url}/readyz", timeout=10)).status_code == status and r, timeout_s)


def test_readyz_is_503_while_the_model_replica_is_replaced_and_healthz_stays_200(app):
    r = httpx.get(f"{app}/readyz", timeout=10)
    assert r.status_code == 200, r.text
    ready = r.json()
    assert ready["status"] == "ready" and ready["running_replicas"]["VideoModel"] == 1, ready
    assert {"VideoDecoder", "VideoModel"} <= set(ready["running_replicas"])

    assert ask(app, f"Please {DIE_MARKER} now.").status_code == 503
    not_ready = poll_readyz(app, 503, 60)
    assert not_ready is not None, "/readyz never reported the missing model replica"
    err = not_ready.json()["error"]
    assert err["type"] == "not_ready" and "VideoModel" in err["message"] and "VideoDecoder" not in err["message"]
    assert not_ready.headers["retry-after"] == "5"
    assert httpx.get(f"{app}/healthz", timeout=10).status_code == 200  # live, not ready

    assert poll_readyz(app, 200, 120) is not None, "the application never became ready again"
    assert ask(app, "Still there?").status_code == 200  # ready means it serves
