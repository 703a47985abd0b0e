"""``vllm bench serve --backend openai-chat --dataset-name sharegpt`` with ``"video"`` entries is a supported
way to benchmark ``/v1/chat/completions`` (examples/vllm_bench/).

vLLM is not installed on the CPU test machine, so the test builds the request exactly as vLLM's
``openai-chat`` backend does from a dataset entry (text part first, then ``process_video``'s
``video_url`` part; ``temperature`` 0, ``max_tokens``, ``stream`` with usage) and reads the answer
as it does (the first chunk with ``choices`` is the first token; content deltas are the text; the
usage chunk gives the output tokens), against the real ingress, decoder and model classes in this
process with the scripted engine.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
from inprocess import inprocess_app

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"
EXAMPLES = ROOT / "examples" / "vllm_bench"
MODEL = "cosmos-bench"


def process_video(video: str) -> dict:
    """vLLM's ``benchmarks.datasets.process_video`` for a string: ``file://`` before anything not a URL."""
    url = video if video.startswith(("http://", "https://", "file://")) else f"file://{video}"
    return {"type": "video_url", "video_url": {"url": url}}


def bench_payload(entry: dict, output_len: int) -> dict:
    """The body vLLM's openai-chat backend sends for a ShareGPT entry with a video."""
    content = [{"type": "text", "text": entry["conversations"][0]["value"]}, process_video(entry["video"])]
    return {
        "model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0.0,
        "max_tokens": output_len, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip


def read_like_vllm_bench(sse: str) -> dict:
    """What vllm bench takes from a stream: whether a first token came, the text, the output tokens."""
    first_token_seen, text, output_tokens = False, "", None
    for block in sse.split("\n\n"):
        chunk = block.strip().removeprefix("data: ")
        if not chunk or chunk == "[DONE]":
            continue
        data = json.loads(chunk)
        if choices := data.get("choices"):
            first_token_seen = True
            text += choices[0]["delta"].get("content") or ""
        elif usage := data.get("usage"):
            output_tokens = usage.get("completion_tokens")
    return {"success": first_token_seen, "text": text, "output_tokens": output_tokens}


def make_dataset(tmp_path: Path, *clips: str) -> list[dict]:
    out = tmp_path / "sharegpt_video.json"
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_dataset.py"), *clips, "--repeat", "2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def test_make_dataset_writes_sharegpt_entries_with_absolute_video_paths(tmp_path):
    data = make_dataset(tmp_path, "tests/data/dashcam_0p4s.mp4", "tests/data/vtest_h264_bframes.mp4")
    assert len(data) == 4 and len({e["id"] for e in data}) == 4
    for entry in data:
        assert [t["from"] for t in entry["conversations"]] == ["human", "gpt"]
        assert Path(entry["video"]).is_absolute() and Path(entry["video"]).is_file()


def test_the_example_file_has_the_same_shape():
    example = json.loads((EXAMPLES / "sharegpt_video.example.json").read_text())
    assert example and all(set(e) == {"id", "conversations", "video"} for e in example)
    assert all(e["video"].startswith("/") and len(e["conversations"]) >= 2 for e in example)


def test_vllm_bench_requests_are_answered_and_read_as_it_reads_them(tmp_path):
    data = make_dataset(tmp_path, "tests/data/dashcam_0p4s.mp4")
    args = {
        "model": {"backend": "serve_app.testing.engines:scripted_engine", "model_id": "scripted",
                  "served_model_name": MODEL, "warmup": False, "stream_interval_ms": 0},
        "sources": {"allowed_roots": [str(DATA)]},
    }  # fmt: skip

    async def main():
        async with inprocess_app(args) as (app, _):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return [await client.post("/v1/chat/completions", json=bench_payload(e, 4), timeout=60) for e in data]

    for r in asyncio.run(main()):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
        got = read_like_vllm_bench(r.text)
        assert got["success"] and got["text"].strip() and got["output_tokens"] == 4
