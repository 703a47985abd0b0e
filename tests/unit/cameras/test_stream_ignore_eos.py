"""ignore_eos on streams: benchmark-only, refused unless the server allows it, and passed to every question."""

from __future__ import annotations

import pytest

from serve_app.cameras.protocol import StreamCreate
from serve_app.cameras.rules import check_stream_limits
from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError


def test_ignore_eos_needs_the_servers_permission():
    spec = StreamCreate(url="x.mp4", questions=["q"], ignore_eos=True)
    with pytest.raises(InvalidRequestError) as e:
        check_stream_limits(spec, AppConfig())
    assert e.value.param == "ignore_eos" and "model.allow_ignore_eos" in e.value.message
    check_stream_limits(spec, AppConfig.model_validate({"model": {"allow_ignore_eos": True}}))
