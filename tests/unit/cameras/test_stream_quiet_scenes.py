"""Quiet scenes' stream settings: the memory the measure costs, the settings refused. (Streams of still
and moving cameras through real readers: tests/integration/cameras/test_quiet_scenes_readers.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from serve_app.cameras.protocol import SkipUnchanged, StreamCreate
from serve_app.cameras.rules import stream_frame_bytes
from serve_app.config import AppConfig

DATA = Path(__file__).resolve().parents[2] / "data"


def config(tmp_path) -> AppConfig:
    return AppConfig.model_validate(
        {"sources": {"allowed_roots": [str(DATA), str(tmp_path)]},
         "streams": {"db_path": str(tmp_path / "streams.sqlite"), "read_timeout_s": 2.0}}
    )


def test_the_measure_counts_toward_the_stream_memory_budget(tmp_path):
    cfg = config(tmp_path)
    plain = StreamCreate(url="x.mp4", questions=["q"])
    quiet = StreamCreate(url="x.mp4", questions=["q"], skip_unchanged=SkipUnchanged())
    extra = stream_frame_bytes(quiet, cfg) - stream_frame_bytes(plain, cfg)
    assert 0 < extra < stream_frame_bytes(plain, cfg) * 0.05  # the grids: a few % of the frames at most


BAD_SKIP = [{"threshold": 0}, {"threshold": 1.5}, {"max_skip_s": 0}, {"max_skip_s": 1e9}, {"x": 1}]


@pytest.mark.parametrize("bad", BAD_SKIP)
def test_bad_skip_settings_are_refused(bad):
    with pytest.raises(ValidationError):
        StreamCreate(url="x.mp4", questions=["q"], skip_unchanged=bad)
