"""The real Serve graph on CPU, over HTTP: a real clip in, an answer out."""

import json

import httpx
import numpy as np
import pytest
from httpx_sse import EventSource

QUESTION = "Is anyone in this scene in danger?"


def post_clip(url, path, timeout=120, **fields):
    with open(path, "rb") as f:
        return httpx.post(
            f"{url}/v1/video/query",
            files={"video": (path.name, f, "video/mp4")},
            data={"question": QUESTION, **{k: str(v) for k, v in fields.items()}},
            timeout=timeout,
        )


def assert_on_grid(ts, start=0.0, fps=4.0):
    ts = np.asarray(ts)
    assert np.all(np.diff(ts) > 0), "timestamps must strictly increase"
    assert np.max(np.abs(ts - (start + np.round((ts - start) * fps) / fps))) <= 0.125


def test_real_clip_returns_an_answer_with_frames_on_the_grid(cpu_app, data_dir):
    r = post_clip(cpu_app, data_dir / "intel_car-detection.mp4")
    assert r.status_code == 200, r.text
    body = r.json()
    video = body["video"]
    assert video["num_frames"] == 122 and video["padded_frames"] == 1  # 30.16 s at 4 fps
    assert len(video["timestamps_s"]) == 121
    assert_on_grid(video["timestamps_s"])
    assert video["fps"] == 4
    assert body["model"] == "tiny-random-qwen2_5_vl" and body["random_weights"] is True
    assert "meaningless" in body["note"]
    assert body["usage"]["completion_tokens"] > 0 and body["usage"]["prompt_tokens"] > body["usage"]["video_tokens"]
    assert body["format_followed"] is False and body["answer"] is None and "format_note" in body
    for key in ("decode_ms", "queue_ms", "model_ms", "total_ms"):
        assert body["timings"][key] is not None and body["timings"][key] >= 0
    assert body["timings"]["total_ms"] >= body["timings"]["decode_ms"]
    assert r.headers["x-request-id"] == body["id"]


def test_ten_second_window_matches_the_benchmark_workload(cpu_app, data_dir):
    r = post_clip(cpu_app, data_dir / "intel_car-detection.mp4", start_s=10, end_s=20, max_tokens=4)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["video"]["num_frames"] == 40
    assert (body["video"]["frame_height"], body["video"]["frame_width"]) == (420, 756)
    assert_on_grid(body["video"]["timestamps_s"], start=10.0)
    assert body["usage"]["video_tokens"] == 8100
    assert body["usage"]["completion_tokens"] <= 4


def test_json_video_path_under_allowed_root(cpu_app):
    r = httpx.post(
        f"{cpu_app}/v1/video/query",
        json={"question": QUESTION, "video_path": "intel_car-detection.mp4", "end_s": 3, "max_tokens": 2},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert len(r.json()["video"]["timestamps_s"]) == 12


def test_corrupt_file_is_4xx_and_the_next_request_succeeds(cpu_app, data_dir, tmp_path):
    bad = tmp_path / "corrupt.mp4"
    bad.write_bytes((data_dir / "intel_car-detection.mp4").read_bytes()[:4096])  # index at the end: won't open
    r = post_clip(cpu_app, bad)
    assert 400 <= r.status_code < 500, r.text
    err = r.json()["error"]
    assert err["message"] and err["type"] and err["param"] == "video"
    ok = post_clip(cpu_app, data_dir / "intel_car-detection.mp4", end_s=2, max_tokens=2)
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(
    "kwargs,status,param",
    [
        ({"json": {"question": "q", "video_path": "../../../etc/passwd"}}, 403, "video_path"),
        ({"json": {"question": "q", "video_path": "nope.mp4"}}, 404, "video_path"),
        ({"json": {"question": "q"}}, 400, "video_path"),
        ({"json": {"video_path": "intel_car-detection.mp4"}}, 400, "question"),
        ({"json": {"question": "q", "video_path": "intel_car-detection.mp4", "fps": 0}}, 400, "fps"),
        ({"content": b"not json", "headers": {"content-type": "application/json"}}, 400, None),
        ({"content": b"hello", "headers": {"content-type": "text/plain"}}, 415, None),
    ],
)
def test_bad_requests_get_the_error_shape(cpu_app, kwargs, status, param):
    r = httpx.post(f"{cpu_app}/v1/video/query", timeout=60, **kwargs)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"type", "message", "param"} and err["param"] == param and err["message"]


def _multipart(parts: list[tuple[str, str | None, bytes]], boundary: str = "b0undary") -> bytes:
    out = b""
    for name, filename, data in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


CLIP_PART = ("video", "a.mp4", b"\x00" * 100)
MP = "multipart/form-data; boundary=b0undary"


@pytest.mark.parametrize(
    "ctype,body,words",
    [
        ("multipart/form-data", b"--x\r\n", "boundary"),
        (MP, b"garbage", "malformed multipart"),
        (MP, _multipart([CLIP_PART, ("video", "b.mp4", b"\x00" * 100), ("question", None, b"q")]), "files"),
        (MP, _multipart([CLIP_PART] + [(f"f{i}", None, b"x") for i in range(40)]), "fields"),
        (MP, _multipart([CLIP_PART, ("question", None, b"q" * 3_000_000)]), "size"),
    ],
)
def test_malformed_multipart_is_400_not_500(cpu_app, data_dir, ctype, body, words):
    r = httpx.post(f"{cpu_app}/v1/video/query", content=body, headers={"content-type": ctype}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == "video" and words in err["message"].lower()
    assert post_clip(cpu_app, data_dir / "dashcam_0p4s.mp4", max_tokens=2).status_code == 200


def test_a_chunked_json_body_is_capped_while_it_streams_in(cpu_app):
    # No Content-Length (chunked): the cap applies to the bytes received (was read whole: 600 MB took 200).
    def chunks():
        for _ in range(64):
            yield b" " * 65536  # 4 MiB of JSON whitespace in all
        yield b'{"question": "q", "video_path": "dashcam_0p4s.mp4"}'

    r = httpx.post(f"{cpu_app}/v1/video/query", content=chunks(), timeout=60,
                   headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 413, r.text
    assert "1048576" in r.json()["error"]["message"] and "multipart" in r.json()["error"]["message"]


def test_wrong_method_is_405_with_allow_and_wrong_content_type_is_415_on_both_routes(cpu_app):
    r = httpx.get(f"{cpu_app}/v1/video/query", timeout=30)
    assert r.status_code == 405 and r.headers["allow"] == "POST" and r.json()["error"]["message"]
    for route in ("/v1/video/query", "/v1/chat/completions"):
        r = httpx.post(f"{cpu_app}{route}", content=b"x", headers={"content-type": "text/plain"}, timeout=30)
        assert r.status_code == 415 and r.json()["error"]["type"] == "unsupported_media_type", r.text


def test_unknown_route_uses_the_error_shape(cpu_app):
    r = httpx.get(f"{cpu_app}/v1/nothing", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"


def test_streaming_sends_deltas_then_the_full_response(cpu_app, data_dir):
    with open(data_dir / "intel_car-detection.mp4", "rb") as f, httpx.stream(
        "POST",
        f"{cpu_app}/v1/video/query",
        files={"video": ("c.mp4", f, "video/mp4")},
        data={"question": QUESTION, "stream": "true", "end_s": "2", "max_tokens": "6", "ignore_eos": "true"},
        timeout=120,
    ) as r:
        assert r.status_code == 200
        events = [sse.data for sse in EventSource(r).iter_sse()]
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    assert parsed[0]["type"] == "clip" and parsed[-1]["type"] == "done"
    deltas = "".join(p["text"] for p in parsed if p["type"] == "delta")
    assert deltas == parsed[-1]["text"]
    assert parsed[-1]["usage"]["completion_tokens"] == 6  # ignore_eos fixes the length
