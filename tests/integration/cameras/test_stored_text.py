"""Issue 25, item 11: control characters in a stream's stored text are refused; logged fields are escaped."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from serve_app.cameras.protocol import StreamCreate
from serve_app.cameras.reader import CameraReader
from serve_app.cameras.registry import StreamRegistry
from serve_app.cameras.routes import validate_stream
from serve_app.cameras.store import StreamStore
from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError
from serve_app.text import log_safe

DATA = Path(__file__).resolve().parents[2] / "data"
FORGED = "\n2026-01-01 00:00:00 INFO request forged -> 200"


def cfg(tmp_path=None) -> AppConfig:
    streams = {"db_path": str(tmp_path / "s.sqlite")} if tmp_path else {}
    return AppConfig.model_validate({
        "sources": {"allowed_roots": [str(DATA)], "allow_private_networks": True, "rtsp_open_timeout_s": 0.5},
        "streams": {"reconnect_initial_s": 0.2, "read_timeout_s": 0.5, **streams},
    })  # fmt: skip


@pytest.mark.parametrize(("field", "value"), [
    ("name", "cam" + FORGED), ("name", "cam\x1b[2J"), ("name", "cam\x00"), ("name", "cam\u2028x"),
    ("name", "cam\x85x"), ("name", "cam\tx"), ("url", "dashcam_0p4s.mp4\x1b[1A"),
    ("webhook", "http://192.0.2.1/h\x00ok"),
])  # fmt: skip
def test_control_characters_in_stored_text_are_refused(field, value):
    body = {"url": "dashcam_0p4s.mp4", "questions": ["q"], field: value}
    with pytest.raises(InvalidRequestError) as e:
        validate_stream(body, cfg())
    assert e.value.param == field and "control characters" in e.value.message
    assert value not in e.value.message


def test_a_question_may_have_lines_but_no_other_control_characters():
    assert validate_stream({"url": "dashcam_0p4s.mp4", "questions": ["Is anyone\nthere?\tAnswer yes or no."]}, cfg())
    with pytest.raises(InvalidRequestError) as e:
        validate_stream({"url": "dashcam_0p4s.mp4", "questions": ["ok", "bad\x1b[2J"]}, cfg())
    assert e.value.param == "questions.1"


def test_a_stored_name_with_a_newline_is_not_resumed(tmp_path):
    config = cfg(tmp_path)
    store = StreamStore(config.streams.db_path)
    store.add("str_forged", StreamCreate(url="dashcam_0p4s.mp4", questions=["q"], name="cam" + FORGED), 1.0)

    async def no_model(question, clip):  # pragma: no cover - never asked
        yield None

    async def main():
        reg = StreamRegistry(config, no_model, store)
        try:
            reg.resume()
            return reg.status("str_forged")
        finally:
            await reg.close()

    status = asyncio.run(main())
    assert status.state == "failed" and "name contains control characters" in status.last_error


def test_a_camera_s_log_lines_stay_one_line_each(caplog):
    """Definitions stored before the check still reach the reader's log lines: escaped there."""
    spec = StreamCreate(url="rtsp://127.0.0.1:9/cam", questions=["q"], name="cam" + FORGED)
    reader = CameraReader(spec, cfg(), lambda w: None, lambda state, error: None)
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        reader.start()
        for _ in range(100):  # until the first reconnect is logged (bounded)
            if any("reconnecting" in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.05)
        reader.stop()
        reader.join(5)
    lines = [r.getMessage() for r in caplog.records if "reconnecting" in r.getMessage()]
    assert lines and all("\n" not in line and "\\n2026-01-01" in line for line in lines)


def test_log_safe_escapes_every_line_breaker():
    for ch in ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", "\x1b", "\x00"):
        out = log_safe(f"a{ch}b")
        assert ch not in out and out.startswith("a\\") and "".join(out.split()) == out
