"""Issue 25, item 14: one function tells a URL from a file path; a stream's URL scheme is normalised once."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve_app.cameras.routes import validate_stream
from serve_app.config import AppConfig
from serve_app.sources.rules import normalize_url, url_scheme

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.mark.parametrize(("value", "scheme"), [
    ("rtsp://cam/x", "rtsp"), ("HTTP://cam/x.mp4", "http"), ("Https://cam", "https"), ("ftp://x/y", "ftp"),
    ("dashcam_0p4s.mp4", None), ("/data/a.mp4", None), ("dir/a://b.mp4", None), ("://x", None),
])  # fmt: skip
def test_one_function_tells_a_url_from_a_path(value, scheme):
    assert url_scheme(value) == scheme


def test_normalize_url_lowers_only_the_scheme():
    assert normalize_url("HTTP://Cam.Example/Path/A.MP4") == "http://Cam.Example/Path/A.MP4"
    assert normalize_url("Dir/File.MP4") == "Dir/File.MP4"


def config(tmp_path) -> AppConfig:
    return AppConfig.model_validate({
        "sources": {"allowed_roots": [str(DATA)], "allowed_networks": ["127.0.0.1/32"], "rtsp_open_timeout_s": 0.5},
        "streams": {"db_path": str(tmp_path / "s.sqlite"), "reconnect_initial_s": 0.2, "read_timeout_s": 0.5},
    })  # fmt: skip


def test_a_registered_url_is_stored_with_its_scheme_in_lower_case(tmp_path):
    spec = validate_stream({"url": "RTSP://127.0.0.1:9/cam", "questions": ["q"],
                            "webhook": "HTTP://127.0.0.1:9/hook"}, config(tmp_path))  # fmt: skip
    assert spec.url == "rtsp://127.0.0.1:9/cam" and spec.webhook == "http://127.0.0.1:9/hook"
