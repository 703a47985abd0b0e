"""Observability on real Serve: the app's Prometheus metrics (scraped from Ray's metrics agent)
and log lines carrying the request id and the camera id."""

import re
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve_app.testing.polling import wait_for

CAMERA = "cam-metrics-7"


#: Ray Serve's own metrics the app relies on instead of counting requests itself.
SERVE_METRICS = ("ray_serve_num_http_requests_total", "ray_serve_replica_processing_queries")


def scrape(url: str) -> dict[str, list]:
    """Samples by name: ``{name: [(labels, value), ...]}`` (the app's ``ray_cosmos_*`` metrics and
    :data:`SERVE_METRICS`)."""
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for s in fam.samples:
            if s.name.startswith("ray_cosmos_") or s.name in SERVE_METRICS:
                out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(samples: dict, name: str, app: str = "cpu", **labels) -> float:
    return sum(
        v for lab, v in samples.get(name, [])
        if lab.get("application") == app and all(lab.get(k) == val for k, val in labels.items())
    )


def abandon_long_stream(url: str) -> None:
    body = {"question": "Go on.", "video_path": "intel_car-detection.mp4", "end_s": 2, "max_tokens": 3000,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{url}/v1/video/query", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if '"type":"delta"' in line.replace(" ", ""):
                break


@pytest.fixture(scope="module")
def traffic(cpu_app):
    """One good request (camera id in a header), one bad one, one abandoned mid-generation."""
    r = httpx.post(
        f"{cpu_app}/v1/video/query",
        headers={"X-Camera-Id": CAMERA},
        json={"question": "What happens?", "video_path": "intel_car-detection.mp4", "end_s": 2, "max_tokens": 5,
              "ignore_eos": True},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    bad = httpx.post(f"{cpu_app}/v1/video/query", json={"question": "?", "video_path": "x.mp4", "fps": 99}, timeout=30)
    assert bad.status_code == 400
    abandon_long_stream(cpu_app)
    return r.json()


def stage_failures(m: dict[str, list], traffic: dict) -> list[str]:
    """What the scrape ``m`` does not yet show of ``traffic`` (empty once every stage is exported).

    Values, not only names: Ray's agent exports each replica's metrics on its own cycle, so a
    name can be present (registered, or from another replica) before the value of this traffic is.
    """
    expected = {
        "ray_cosmos_decode_ms_count", "ray_cosmos_decode_frames_sum", "ray_cosmos_model_queue_depth",
        "ray_cosmos_model_queue_ms_count", "ray_cosmos_model_ms_count", "ray_cosmos_ttft_ms_count",
        "ray_cosmos_tokens_total", "ray_cosmos_errors_total", "ray_cosmos_request_ms_count",
        "ray_cosmos_model_requests_total", *SERVE_METRICS,
    }
    checks = {
        f"missing {sorted(expected - set(m))}": expected <= set(m),
        "no aborted model request": total(m, "ray_cosmos_model_requests_total", finish_reason="abort") >= 1,
        "model queue not drained": total(m, "ray_cosmos_model_queue_depth") == 0,
        "decode_frames_sum < 8": total(m, "ray_cosmos_decode_frames_sum") >= traffic["video"]["num_frames"] == 8,
        "decode_ms_count < 2": total(m, "ray_cosmos_decode_ms_count") >= 2,
        "completion tokens < 5": total(m, "ray_cosmos_tokens_total", kind="completion") >= 5,
        "prompt tokens short": total(m, "ray_cosmos_tokens_total", kind="prompt") >= traffic["usage"]["prompt_tokens"],
        "no length finish": total(m, "ray_cosmos_model_requests_total", finish_reason="length") >= 1,
        "no ttft / model time": total(m, "ray_cosmos_ttft_ms_count") >= 1 and total(m, "ray_cosmos_model_ms_sum") > 0,
        "fewer than 2 timed 200s": total(m, "ray_cosmos_request_ms_count", route="/v1/video/query", status="200") >= 2,
        "no timed 400": total(m, "ray_cosmos_request_ms_count", route="/v1/video/query", status="400") >= 1,
        # Request counts by status are Serve's (the app does not repeat them).
        "Serve counted < 2 200s": total(m, "ray_serve_num_http_requests_total", status_code="200") >= 2,
        "Serve counted no 400": total(m, "ray_serve_num_http_requests_total", status_code="400") >= 1,
        "no invalid_request_error": total(
            m, "ray_cosmos_errors_total", route="/v1/video/query", type="invalid_request_error"
        ) >= 1,
    }
    return [what for what, ok in checks.items() if not ok]


def test_metrics_endpoint_shows_every_stage(traffic, metrics_url):
    # Ray's agent exports every few seconds, each replica on its own cycle: wait for the values.
    def complete() -> dict[str, list] | None:
        m = scrape(metrics_url)
        return None if stage_failures(m, traffic) else m

    m = wait_for(complete, 90, step_s=2)
    if m is None:
        m = scrape(metrics_url)
        pytest.fail(f"after 90 s the metrics still show: {stage_failures(m, traffic)}")
    assert not any(name.startswith(("ray_cosmos_requests", "ray_cosmos_ingress_in_flight")) for name in m)
    labels = {k for lab, _ in m["ray_cosmos_model_ms_count"] for k in lab}
    assert {"deployment", "replica", "application"} <= labels


def serve_logs() -> Path:
    """This session's Serve log folder (one ``replica_<app>_<deployment>_<replica>.log`` per replica)."""
    import ray._private.worker as worker

    return Path(worker._global_node.get_session_dir_path()) / "logs" / "serve"


def test_logs_carry_request_id_and_camera_id(traffic):
    logs = serve_logs()
    rid = traffic["id"]

    def lines_of(deployment: str) -> list[str]:
        return [
            line for f in logs.glob(f"replica_cpu_{deployment}_*.log")
            for line in f.read_text(errors="replace").splitlines() if rid in line
        ]

    # The ingress writes its lines after the response has left: poll (generously, for a loaded 2-core machine).
    deadline = time.monotonic() + 90
    while True:
        found = {d: lines_of(d) for d in ("Ingress", "VideoDecoder", "VideoModel")}
        if (
            any(f"camera={CAMERA}" in line for line in found["Ingress"])
            and found["VideoDecoder"]
            and found["VideoModel"]
        ):
            break
        assert time.monotonic() < deadline, found
        time.sleep(1)
    # Downstream replicas' lines carry the same request id (Serve propagates it through handles), and the
    # model's call is logged as finished: the ingress reads the model stream to its end instead of cancelling
    # it after the Done chunk (a call cancelled there left no line at all; see serve_app.http.pipeline.ClipRun).
    assert any("CALL decode OK" in line for line in found["VideoDecoder"]), found
    assert any("CALL generate OK" in line for line in found["VideoModel"]), found


def test_every_answered_request_has_its_model_call_logged(cpu_app):
    """Each answered clip's model call is in the model replica's log as finished. Before the ingress read the
    model stream to its end, it cancelled the call after the Done chunk, and a call closed at its last yield
    left no line (about one request in fifteen on a loaded machine: several in a row make the test bite)."""
    rids = []
    for _ in range(8):
        r = httpx.post(f"{cpu_app}/v1/video/query", json={"question": "Anyone?", "video_path": "dashcam_0p4s.mp4",
                                                          "max_tokens": 2}, timeout=120)  # fmt: skip
        assert r.status_code == 200, r.text
        rids.append(r.json()["id"])
    logs = serve_logs()
    # The model's line is written before its last chunk reaches the ingress, so before the response: no wait.
    text = "\n".join(f.read_text(errors="replace") for f in logs.glob("replica_cpu_VideoModel_*.log"))
    missing = [rid for rid in rids if not re.search(rf"{rid} -- CALL generate OK", text)]
    assert not missing, missing
