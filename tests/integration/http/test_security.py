"""Security on the real CPU graph: the optional API key, and the source rules on the OpenAI route."""

import dataclasses
import os

import httpx
import openai
import pytest

from serve_app.protocol import ClipSource
from serve_app.testing.local_serve import TEST_API_KEY_ENV, deploy
from serve_app.testing.local_serve import cpu_args as cpu_app_args

MODEL = "tiny-random-qwen2_5_vl"


@pytest.fixture(scope="module")
def secure_app(serve_session):
    """The graph with ``api_key_env`` naming the session's test key variable, at /secure."""
    from ray import serve

    deploy("secure", "/secure", cpu_app_args(api_key_env=TEST_API_KEY_ENV))
    yield f"{serve_session}/secure"
    serve.delete("secure")


@pytest.fixture(scope="module")
def key():
    return os.environ[TEST_API_KEY_ENV]


def chat_body(url):
    return {
        "model": MODEL,
        "max_tokens": 2,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "video_url", "video_url": {"url": url}},
                    {"type": "text", "text": "What happens?"},
                ],
            }
        ],
    }


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/video/query"), ("GET", "/v1/unknown")],
)
@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong-key"}, {"X-API-Key": ""}, {"Authorization": "Basic abc"}]
)
def test_every_route_needs_the_key(secure_app, method, path, headers):
    r = httpx.request(method, f"{secure_app}{path}", headers=headers, json={}, timeout=30)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"
    assert r.headers["www-authenticate"] == "Bearer"


def test_health_and_readiness_checks_need_no_key(secure_app):
    assert httpx.get(f"{secure_app}/healthz", timeout=30).status_code == 200
    assert httpx.get(f"{secure_app}/readyz", timeout=30).status_code == 200


def test_right_key_works_with_the_openai_client_and_x_api_key(secure_app, key, data_dir):
    client = openai.OpenAI(base_url=f"{secure_app}/v1", api_key=key, max_retries=0, timeout=120)
    assert [m.id for m in client.models.list().data] == [MODEL]
    r = client.chat.completions.create(**{**chat_body("intel_car-detection.mp4"), "extra_body": {"end_s": 1}})
    assert r.choices[0].message.content is not None
    with open(data_dir / "intel_car-detection.mp4", "rb") as f:
        r = httpx.post(
            f"{secure_app}/v1/video/query",
            headers={"X-API-Key": key},
            files={"video": ("c.mp4", f, "video/mp4")},
            data={"question": "What happens?", "end_s": "1", "max_tokens": "2"},
            timeout=120,
        )
    assert r.status_code == 200, r.text
    wrong = openai.OpenAI(base_url=f"{secure_app}/v1", api_key=key + "x", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("../../../../etc/passwd", 403),
        ("/etc/passwd", 403),
        ("file:///etc/passwd", 403),
        ("intel_car-detection.mp4/../../../conftest.py", 403),
        ("%2e%2e/%2e%2e/etc/passwd", 404),  # not URL-decoded: a (missing) file name inside the root
    ],
)
def test_path_traversal_through_the_openai_route_is_refused(cpu_app, url, status):
    r = httpx.post(f"{cpu_app}/v1/chat/completions", json=chat_body(url), timeout=60)
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] == {403: "forbidden_source", 404: "not_found"}[status]
    assert r.json()["error"]["param"] == "messages.0.content.video_url"


def test_path_outside_roots_is_403_naming_the_rule(cpu_app):
    r = httpx.post(f"{cpu_app}/v1/chat/completions", json=chat_body("/etc/passwd"), timeout=60)
    assert r.status_code == 403
    assert "outside the allowed roots" in r.json()["error"]["message"]


URL_SOURCES = "url" in {f.name for f in dataclasses.fields(ClipSource)}


@pytest.mark.skipif(not URL_SOURCES, reason="URL clip sources (decode tier) not in this checkout yet")
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:1/clip.mp4",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/clip.mp4",
        "http://[::1]/clip.mp4",
        "http://localhost/clip.mp4",
        "rtsp://192.168.1.10/stream",
    ],
)
def test_private_address_urls_through_the_openai_route_are_refused(cpu_app, url):
    r = httpx.post(f"{cpu_app}/v1/chat/completions", json=chat_body(url), timeout=60)
    assert r.status_code == 403, r.text
    # the error names the chat request's field, not /v1/video/query's video_url
    assert r.json()["error"]["type"] == "forbidden_source"
    assert r.json()["error"]["param"] == "messages.0.content.video_url"


def test_unknown_url_scheme_is_400(cpu_app):
    r = httpx.post(f"{cpu_app}/v1/chat/completions", json=chat_body("gopher://example.com/clip"), timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.0.content.video_url"
