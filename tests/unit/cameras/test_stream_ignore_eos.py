"""ignore_eos on streams: benchmark-only, refused unless the server allows it, and passed to every question."""

from __future__ import annotations

import asyncio

import pytest
from fakes import LOOP_CLIP as CLIP
from fakes import RecordingModel

from serve_app.cameras.protocol import StreamCreate
from serve_app.cameras.registry import StreamRegistry
from serve_app.cameras.rules import check_stream_limits
from serve_app.cameras.store import StreamStore
from serve_app.config import AppConfig
from serve_app.errors import InvalidRequestError
from serve_app.testing.local_serve import DATA
from serve_app.testing.polling import wait_for_async


def test_ignore_eos_needs_the_servers_permission():
    spec = StreamCreate(url="x.mp4", questions=["q"], ignore_eos=True)
    with pytest.raises(InvalidRequestError) as e:
        check_stream_limits(spec, AppConfig())
    assert e.value.param == "ignore_eos" and "model.allow_ignore_eos" in e.value.message
    check_stream_limits(spec, AppConfig.model_validate({"model": {"allow_ignore_eos": True}}))


def test_every_question_of_a_window_is_asked_with_ignore_eos(tmp_path):
    cfg = AppConfig.model_validate({"sources": {"allowed_roots": [str(DATA)]},
                                    "streams": {"db_path": str(tmp_path / "s.sqlite")},
                                    "model": {"allow_ignore_eos": True}})
    seen = []
    recorder = RecordingModel()

    async def ask(question, clip):
        seen.append(question.sampling.ignore_eos)
        async for chunk in recorder(question, clip):
            yield chunk

    async def main():
        reg = StreamRegistry(cfg, ask, StreamStore(str(tmp_path / "s.sqlite")))
        st = reg.create(StreamCreate(url=CLIP, window_s=0.5, fps=4, loop=True, questions=["a?", "b?"],
                                     ignore_eos=True))
        await wait_for_async(lambda: reg.status(st.id).windows_answered >= 2, 30)
        await reg.close()

    asyncio.run(main())
    assert len(seen) >= 4 and all(seen)
