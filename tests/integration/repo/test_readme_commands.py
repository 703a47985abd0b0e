"""The README's CPU commands, run as written against the session's CPU graph.

Each command is cut from README.md (not copied here), only ``http://127.0.0.1:8000`` is replaced
by the test server's URL, and it runs from the project root as a new user would run it: the curls
through ``bash``, the ``openai`` example through this venv's Python.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
from readme_text import README, code_blocks, section

ROOT = Path(__file__).resolve().parents[3]
README_URL = "http://127.0.0.1:8000"


def run_bash(script: str, url: str, timeout_s: float = 300) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace(README_URL, url)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def curl_commands(block: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("curl ")]


def test_the_clip_curls_answer(cpu_app):
    cmds = [c for b in code_blocks(section(README, "Ask about a clip"), "bash") for c in curl_commands(b)]
    assert len(cmds) >= 2  # the upload and the video_path window
    for cmd in cmds:
        body = json.loads(run_bash(cmd, cpu_app))
        assert "error" not in body, body
        assert body["object"] == "video.query" and body["random_weights"] is True
        assert body["usage"]["completion_tokens"] > 0 and body["video"]["num_frames"] > 0
    windowed = json.loads(run_bash(cmds[-1], cpu_app))
    timestamps_s = windowed["video"]["timestamps_s"]  # its start_s/end_s (0-10 s) reached the decoder
    assert min(timestamps_s) >= 0 and max(timestamps_s) < 10.0 and len(timestamps_s) >= 30


def test_the_openai_example_runs_with_the_official_client(cpu_app):
    (example,) = code_blocks(section(README, "OpenAI-compatible API"), "python")
    done = subprocess.run(
        [sys.executable, "-c", example.replace(README_URL, cpu_app)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any("completion_tokens" in line for line in lines), lines[-3:]  # the usage chunk came last
    assert any(line not in ("None", "") and "completion_tokens" not in line for line in lines)  # some text


def test_the_camera_loop_registers_four_cameras(cpu_app):
    (block,) = [b for b in code_blocks(section(README, "Watch cameras"), "bash") if "for f in" in b]
    loop = block[block.index("for f in") : block.index("done") + len("done")]
    out = run_bash(loop, cpu_app, timeout_s=120)
    streams = [json.loads(line) for line in out.splitlines() if line.strip()]
    try:
        assert len(streams) == 4, out
        for s in streams:
            assert "error" not in s, s
            assert s["state"] in {"connecting", "running"}
        names = {s["name"] for s in streams}
        assert "bgslibrary_video02_highway_cctv" in names
    finally:
        for s in streams:
            if "id" in s:
                httpx.delete(f"{cpu_app}/v1/streams/{s['id']}", timeout=30)
