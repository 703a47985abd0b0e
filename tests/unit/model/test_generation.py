"""The model deployment's work without Ray (:func:`serve_app.model.generation.answer_stream`) over fake
engines, and the ids that reach the engine (issue 13: server-made, never the client's)."""

from __future__ import annotations

import asyncio
import re

import httpx
import numpy as np
import pytest
from inprocess import inprocess_app

from serve_app.config import ModelConfig
from serve_app.errors import NotFoundError
from serve_app.model.engines.base import EngineDeadError, GenerationChunk
from serve_app.model.generation import answer_stream
from serve_app.protocol import ClipInfo, ClipQuestion, DecodedClip, Delta, Done, ErrorInfo, SamplingOptions
from serve_app.testing.engines import RecordingEngine, ScriptedEngine

SAMPLING = SamplingOptions(max_tokens=3, temperature=0.0, top_p=1.0, repetition_penalty=1.0)
CLIENT_ID = "client-chosen-id"


def clip() -> DecodedClip:
    return DecodedClip(
        frames=np.zeros((2, 56, 84, 3), np.uint8), timestamps_s=np.array([0.0, 0.5]), fps=2.0,
        source_width=84, source_height=56, source_fps=2.0, duration_s=1.0, warnings=("w",), decode_ms=3.0,
    )


class FailingEngine(ScriptedEngine):
    """Yields one token, then raises ``error``; records aborts."""

    def __init__(self, error: BaseException):
        super().__init__(ModelConfig())
        self.error, self.aborted = error, []

    async def generate(self, request):
        yield GenerationChunk(queue_ms=1.0)
        yield GenerationChunk(text="a", completion_tokens=1)
        raise self.error

    async def abort(self, request_id):
        self.aborted.append(request_id)


async def collect(engine, clip_or_error, question="q?"):
    stream = answer_stream(engine, ClipQuestion(CLIENT_ID, question, SAMPLING), clip_or_error,
                           model_name="m", system_prompt="s")
    return [c async for c in stream]


def test_the_stream_is_clipinfo_deltas_done():
    chunks = asyncio.run(collect(ScriptedEngine(ModelConfig()), clip()))
    assert isinstance(chunks[0], ClipInfo) and isinstance(chunks[-1], Done)
    info, done = chunks[0], chunks[-1]
    assert (info.video.num_frames, info.video.frame_width, info.warnings, info.model) == (2, 84, ("w",), "m")
    assert info.video_tokens == 2 // 2 * (56 // 28) * (84 // 28)  # (T/2)·(H/28)·(W/28) tokens
    deltas = [c for c in chunks if isinstance(c, Delta)]
    assert len(deltas) == 3 and deltas[-1].completion_tokens == done.completion_tokens == 3
    assert done.finish_reason == "length" and done.model_ms >= 0 and done.ttft_ms is not None


def test_a_decoder_error_is_the_only_chunk():
    err = NotFoundError("no such file", param="video_path").info()
    assert asyncio.run(collect(ScriptedEngine(ModelConfig()), err)) == [err]


@pytest.mark.parametrize(("error", "status"), [(EngineDeadError("gone"), 503), (RuntimeError("bug"), 500)])
def test_engine_failures_become_error_values_and_abort_the_request(error, status):
    engine = FailingEngine(error)
    chunks = asyncio.run(collect(engine, clip()))
    assert isinstance(chunks[-1], ErrorInfo) and chunks[-1].status == status
    assert "bug" not in chunks[-1].message
    assert len(engine.aborted) == 1 and engine.aborted[0] != CLIENT_ID


def test_a_consumer_that_leaves_aborts_the_generation_in_the_engine():
    engine = ScriptedEngine(ModelConfig())
    aborted = []
    original = engine.abort

    async def abort(request_id):
        aborted.append(request_id)
        await original(request_id)

    engine.abort = abort

    async def go():
        stream = answer_stream(engine, ClipQuestion(CLIENT_ID, "q", SAMPLING), clip(), model_name="m",
                               system_prompt="s")
        async for chunk in stream:
            if isinstance(chunk, Delta):
                break
        await stream.aclose()

    asyncio.run(go())
    assert len(aborted) == 1 and aborted[0].startswith("gen-")


def test_ids_reaching_the_engine_are_fresh_server_uuids_not_the_client_id():
    engine = RecordingEngine(ModelConfig())

    async def go():
        for _ in range(2):
            await collect(engine, clip())

    asyncio.run(go())
    (id1, uuid1), (id2, uuid2) = engine.seen
    assert id1 != id2 and uuid1 != uuid2
    for rid, media in engine.seen:
        assert re.fullmatch(r"gen-[0-9a-f]{32}", rid) and media == f"clip-{rid}"
        assert CLIENT_ID not in rid and CLIENT_ID not in media


def test_questions_sharing_a_clip_reach_the_engine_with_its_media_uuid_and_their_own_ids():
    engine = RecordingEngine(ModelConfig())

    async def go():
        for clip_id in ("a1" * 16, "a1" * 16, "b2" * 16):
            stream = answer_stream(engine, ClipQuestion(CLIENT_ID, "q?", SAMPLING, clip_id=clip_id), clip(),
                                   model_name="m", system_prompt="s")
            _ = [c async for c in stream]

    asyncio.run(go())
    ids = [rid for rid, _ in engine.seen]
    media = [m for _, m in engine.seen]
    assert len(set(ids)) == 3  # each question is its own engine request
    assert media == ["clip-" + "a1" * 16, "clip-" + "a1" * 16, "clip-" + "b2" * 16]


def test_two_http_requests_with_the_same_x_request_id_reach_the_engine_with_different_ids(data_dir):
    """Issue 13 item 2 over the whole graph (ingress → decoder → model → engine, values pickled)."""
    args = {
        "model": {"backend": "serve_app.testing.engines:recording_engine", "model_id": "rec", "warmup": False},
        "sources": {"allowed_roots": [str(data_dir)]},
    }
    body = {"question": "q", "video_path": "dashcam_0p4s.mp4", "max_tokens": 2}

    async def go():
        async with inprocess_app(args) as (app, model):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                rs = [await client.post("/v1/video/query", json=body, headers={"x-request-id": CLIENT_ID})
                      for _ in range(2)]
            return rs, list(model.engine.seen)

    responses, seen = asyncio.run(go())
    assert [r.status_code for r in responses] == [200, 200]
    assert [r.json()["id"] for r in responses] == [CLIENT_ID, CLIENT_ID]  # echoed
    assert len(seen) == 2 and seen[0] != seen[1]
    assert all(CLIENT_ID not in rid and CLIENT_ID not in media for rid, media in seen)
    assert [r.json()["text"] for r in responses] == [f"{rid} {media}" for rid, media in seen]


def test_stopping_the_model_replica_shuts_its_engine_down_once():
    """Serve calls ``__del__`` when a replica stops and awaits what it returns (Ray 2.60:
    ``UserCallableWrapper.call_destructor``); the garbage collector's later call does nothing."""
    from serve_app.deployments.model import VideoModel

    calls = []

    async def go():
        model = VideoModel.func_or_class.__new__(VideoModel.func_or_class)
        await model.__init__({"model": {"backend": "serve_app.testing.engines:scripted_engine", "warmup": False}})

        async def shutdown():
            calls.append("shutdown")

        model.engine.shutdown = shutdown
        await model.__del__()
        assert model.__del__() is None

    asyncio.run(go())
    assert calls == ["shutdown"]
