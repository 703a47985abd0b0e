"""Golden response bodies: what clients see, pinned.

The real ingress, decoder and model deployment classes run in this process
(:mod:`inprocess`: stand-in handles that pickle what crosses them), with the scripted
engine and a real clip. Each case's status, content type and body (JSON, or the list
of server-sent events) must equal ``tests/data/golden/<case>.json``, after
normalising what changes between runs: timings (``*_ms``), ``created``, the
scripted engine's instance name and the checkout's path. Regenerate only for an intended, client-visible
change: ``GOLDEN_UPDATE=1 pytest tests/unit/http/test_golden_bodies.py``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
from pathlib import Path

import httpx
import pytest
from inprocess import inprocess_app

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"
DATA = Path(__file__).resolve().parents[2] / "data"
CLIP = "dashcam_0p4s.mp4"
MODEL = "cosmos-golden"
RID = "golden-request-1"
MS_KEYS = {"decode_ms", "queue_ms", "model_ms", "ttft_ms", "total_ms"}


def app_args() -> dict:
    return {
        "model": {
            "backend": "serve_app.testing.engines:scripted_engine",
            "model_id": "scripted",
            "served_model_name": MODEL,
            "warmup": False,
            "stream_interval_ms": 0,
            "allow_ignore_eos": True,
        },
        "sources": {"allowed_roots": [str(DATA)]},
    }


def normalise(value):
    """``value`` with run-dependent parts replaced by placeholders."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in MS_KEYS and isinstance(v, (int, float)):
                out[k] = "<ms>"
            elif k == "created" and isinstance(v, int):
                out[k] = "<unix>"
            else:
                out[k] = normalise(v)
        return out
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str):
        value = value.replace(str(DATA), "<data>")
        value = re.sub(r"engine-[0-9a-f]{8}", "engine-<hex>", value)
        return re.sub(r"\bvq-[0-9a-f]{24}\b", "vq-<hex>", value)
    return value


def decode_body(r: httpx.Response):
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        events = [block[len("data: "):] for block in r.text.split("\n\n") if block]
        assert all(not e.startswith("data: ") for e in events)
        return [e if e == "[DONE]" else json.loads(e) for e in events]
    return r.json()


def query(**fields):
    return ("POST", "/v1/video/query", {"json": {"question": "What happens?", "video_path": CLIP, **fields}})


def chat(url=CLIP, text="What happens?", **extra):
    content = [{"type": "text", "text": text}, {"type": "video_url", "video_url": {"url": url}}]
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}
    return ("POST", "/v1/chat/completions", {"json": body})


CASES = {
    "query_json": query(max_tokens=3),
    "query_json_window": query(max_tokens=2, start_s=0.1, end_s=0.3, fps=10),
    "query_sse": query(max_tokens=3, stream=True),
    "query_sse_engine_dies": ("POST", "/v1/video/query", {"json": {
        "question": "[die] now", "video_path": CLIP, "max_tokens": 3, "stream": True}}),
    "query_engine_dies": ("POST", "/v1/video/query", {"json": {
        "question": "[die] now", "video_path": CLIP, "max_tokens": 3}}),
    "query_multipart": ("POST", "/v1/video/query", {
        "files": {"video": ("c.mp4", (DATA / CLIP).read_bytes(), "video/mp4")},
        "data": {"question": "What happens?", "max_tokens": "2"}}),
    "query_error_not_found": query(video_path="nope.mp4"),
    "query_error_outside_roots": query(video_path="../../etc/passwd"),
    "query_error_validation": query(fps=0),
    "query_error_unknown_field": query(colour="red"),
    "query_error_both_sources": query(video_url="http://example.com/a.mp4"),
    "query_error_bad_json": ("POST", "/v1/video/query", {
        "content": b"{not json", "headers": {"content-type": "application/json"}}),
    "query_error_content_type": ("POST", "/v1/video/query", {
        "content": b"x", "headers": {"content-type": "text/plain"}}),
    "query_error_corrupt_upload": ("POST", "/v1/video/query", {
        "files": {"video": ("c.mp4", b"\x00" * 4096, "video/mp4")}, "data": {"question": "q"}}),
    "chat_completion": chat(max_completion_tokens=3),
    "chat_stream": chat(max_tokens=3, stream=True),
    "chat_stream_usage": chat(max_tokens=3, stream=True, stream_options={"include_usage": True}),
    "chat_stream_engine_dies": chat(text="[die] now", max_tokens=3, stream=True),
    "chat_data_url": chat(url="data:video/mp4;base64," + base64.b64encode((DATA / CLIP).read_bytes()).decode(),
                          max_tokens=2),
    "chat_error_model": ("POST", "/v1/chat/completions", {"json": {**chat()[2]["json"], "model": "other"}}),
    "chat_error_clip_not_found": chat(url="nope.mp4"),
    "chat_error_validation": chat(temperature=5),
    "chat_error_role": ("POST", "/v1/chat/completions", {"json": {
        "model": MODEL, "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}]}}),
    "chat_error_content_type": ("POST", "/v1/chat/completions", {
        "content": b"x", "headers": {"content-type": "text/plain"}}),
    "models_list": ("GET", "/v1/models", {}),
    "model_card": ("GET", f"/v1/models/{MODEL}", {}),
    "model_card_unknown": ("GET", "/v1/models/other", {}),
    "healthz": ("GET", "/healthz", {}),
    "no_route": ("GET", "/v1/nothing", {}),
    "wrong_method": ("GET", "/v1/video/query", {}),
}


async def _run(case: str) -> dict:
    method, path, kwargs = CASES[case]
    kwargs = dict(kwargs)
    async with inprocess_app(app_args()) as (app, _):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            headers = {"x-request-id": RID, **kwargs.pop("headers", {})}
            r = await client.request(method, path, headers=headers, timeout=60, **kwargs)
    return {
        "status": r.status_code,
        "content_type": r.headers.get("content-type"),
        "retry_after": r.headers.get("retry-after"),
        "allow": r.headers.get("allow"),
        "body": normalise(decode_body(r)),
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_response_body_matches_the_golden(case):
    got = asyncio.run(_run(case))
    path = GOLDEN / f"{case}.json"
    if os.environ.get("GOLDEN_UPDATE") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert path.exists(), f"no golden for {case}: run with GOLDEN_UPDATE=1 once, review, commit"
    assert got == json.loads(path.read_text())
