"""The Ray-free pipeline: Ray's exceptions mapped to the project's errors (faked, no cluster),
and a run's start, hand-off, deadline and cancellation over fake handles.

The error-mapping cases follow Ray Serve LLM's ``test_engine_error_mapping.py``: each
exception is built the way Ray raises it (``RayTaskError`` wrapping a cause, Serve's own
exception classes) and the mapped status and type are checked.
"""

from __future__ import annotations

import asyncio

import pytest
from ray.exceptions import ActorDiedError, RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, RayServeException

from serve_app.errors import (
    ErrorInfo,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    ServeAppError,
    error_value,
)
from serve_app.http.pipeline import ClipRun, causes, client_error, start_run
from serve_app.protocol import (
    ClipInfo,
    ClipQuestion,
    ClipSource,
    Delta,
    Done,
    FrameSampling,
    SamplingOptions,
    VideoInfo,
)
from serve_app.testing.handles import FakeHandle, ScriptedGraph

RID = "req-1"
RETRY_AFTER_S = 7


def wrapped(cause: BaseException) -> RayTaskError:
    """``cause`` as Ray delivers an exception raised in another process."""
    return RayTaskError("VideoModel.generate", "Traceback (most recent call last): ...", cause)


def chained(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


def unavailable() -> DeploymentUnavailableError:
    from ray.serve._private.common import DeploymentID

    return DeploymentUnavailableError(DeploymentID(name="VideoModel", app_name="cpu"))


@pytest.mark.parametrize(
    ("make", "status", "etype", "retry_after"),
    [
        (lambda: BackPressureError(num_queued_requests=8, max_queued_requests=8), 503, "overloaded", "7"),
        (lambda: wrapped(BackPressureError(num_queued_requests=8, max_queued_requests=8)), 503, "overloaded", "7"),
        (unavailable, 503, "overloaded", "7"),
        (lambda: RayActorError(), 503, "overloaded", "7"),
        (lambda: ActorDiedError(), 503, "overloaded", "7"),
        # Serve's wrapping of a dependency whose replica died (a killed decode replica).
        (lambda: chained(RayServeException("dependency failed"), wrapped(ActorDiedError())), 503, "overloaded", "7"),
        (lambda: TimeoutError(), 504, "timeout", None),
        (lambda: TimeoutError(), 504, "timeout", None),
        (lambda: InvalidRequestError("fps: bad", param="fps"), 400, "invalid_request_error", None),
        (lambda: wrapped(NotFoundError("no such file", param="video_path")), 404, "not_found", None),
        (lambda: OverloadedError("busy", retry_after_s=3), 503, "overloaded", "3"),
        (lambda: wrapped(ValueError("a bug")), 500, "internal_error", None),
        (lambda: RuntimeError("a bug"), 500, "internal_error", None),
    ],
    ids=[
        "backpressure", "backpressure-wrapped", "deployment-unavailable", "actor-error", "actor-died",
        "serve-wrapped-actor-died", "timeout", "asyncio-timeout", "project-400", "project-404-wrapped",
        "project-503", "bug-wrapped", "bug",
    ],
)
def test_exceptions_map_to_the_projects_errors(make, status, etype, retry_after):
    info = error_value(client_error(make(), RID, RETRY_AFTER_S))
    assert (info.status, info.type) == (status, etype)
    assert info.headers.get("Retry-After") == retry_after
    assert info.message
    if status == 500:  # a bug: only the request id, never the exception's text
        assert RID in info.message and "bug" not in info.message


def test_cause_chains_are_bounded_and_loop_free():
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert causes(a) == [a, b]
    deep = RuntimeError("0")
    for i in range(1, 20):
        deep = chained(RuntimeError(str(i)), deep)
    assert len(causes(deep)) == 8


# --- a run over fake handles -----------------------------------------------------------------

INFO = ClipInfo(
    video=VideoInfo(num_frames=2, frame_width=28, frame_height=28, timestamps_s=[0.0, 0.5], padded_frames=0, fps=2.0,
                    source_width=28, source_height=28, source_fps=2.0, duration_s=1.0, rotation_deg=0),
    warnings=(), decode_ms=1.0, video_tokens=1, model="m", random_weights=True,
)
QUESTION = ClipQuestion(RID, "q?", SamplingOptions(max_tokens=2, temperature=0.0, top_p=1.0, repetition_penalty=1.0))


def fake_handles(result=None, **script) -> FakeHandle:
    """The decoder and model handles (one scripted graph: serve_app.testing.handles): records what was
    sent and every call, returns scripted results."""
    return FakeHandle(ScriptedGraph(result, **script))


async def start(handles: FakeHandle, timeout_s: float = 5.0) -> ClipRun:
    deadline = asyncio.get_running_loop().time() + timeout_s
    return await start_run(
        handles, handles, source=ClipSource(path="a.mp4"), sample=FrameSampling(fps=2, max_frames=8),
        question=QUESTION, deadline=deadline,
    )


def test_the_decode_ref_goes_to_the_model_and_the_answer_is_collected():
    clip = ("a decoded clip", 2)  # crosses the handles pickled: compared by value
    handles = fake_handles(clip, chunks=[INFO, Delta("a", 1), Delta("b", 2), Done("stop", 5, 2)])

    async def go():
        run = await start(handles)
        return run, await run.collect()

    run, (text, done) = asyncio.run(go())
    assert run.info == INFO and text == "ab" and done.completion_tokens == 2
    assert handles.sent[0][3] == RID and handles.sent[1] == ("generate", QUESTION, clip)


def test_a_rejected_clip_raises_its_error_value():
    err = NotFoundError("no such file", param="video_path").info()
    handles = fake_handles(err, chunks=[err])
    with pytest.raises(ServeAppError) as e:
        asyncio.run(start(handles))
    assert (e.value.status, e.value.param) == (404, "video_path")


@pytest.mark.parametrize("failure", [BackPressureError(num_queued_requests=1, max_queued_requests=1), unavailable()])
def test_a_failed_hand_off_cancels_the_decode(failure):
    handles = fake_handles(raises=failure)
    with pytest.raises(type(failure)):
        asyncio.run(start(handles))
    assert handles.responses[0].cancelled and len(handles.sent) == 1  # the model was never called


def test_the_deadline_cancels_both_calls_and_maps_to_504():
    handles = fake_handles(hang=True)
    with pytest.raises(TimeoutError) as e:
        asyncio.run(start(handles, timeout_s=0.05))
    assert handles.responses[0].cancelled and not handles.streams
    assert error_value(client_error(e.value, RID, 1)).status == 504


def test_a_stream_past_the_deadline_raises_timeout_mid_answer():
    handles = fake_handles(chunks=[INFO, Delta("a", 1), Done("stop", 1, 1)], gap_s=0.2)

    async def go():
        run = await start(handles, timeout_s=0.3)
        return await run.collect()

    with pytest.raises(TimeoutError):
        asyncio.run(go())


def test_cancelling_the_request_cancels_the_model_stream():
    handles = fake_handles(chunks=[INFO] + [Delta("x", i) for i in range(100)], gap_s=0.01)

    async def go():
        run = await start(handles)
        task = asyncio.ensure_future(run.collect())
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            run.cancel()

    asyncio.run(go())
    assert handles.streams[0].cancelled and not handles.streams[0].ended


def test_an_error_value_mid_stream_is_raised_by_collect():
    err = OverloadedError("the model replica is restarting; retry").info()
    handles = fake_handles(chunks=[INFO, Delta("a", 1), err])

    async def go():
        return await (await start(handles)).collect()

    with pytest.raises(ServeAppError) as e:
        asyncio.run(go())
    assert e.value.status == 503 and e.value.headers["Retry-After"] == "1"


# A model call that is cancelled after its last chunk but before the replica's generator returns
# leaves no access-log line (see ClipRun): the fake generator records whether it had ended
# (``ended_before_cancel``).


FINALS = [Done("stop", 5, 2), OverloadedError("the model replica is restarting; retry").info()]


@pytest.mark.parametrize("final", FINALS, ids=["done", "error_value"])
def test_the_runner_reads_the_model_stream_to_its_end_before_it_cancels(final):
    from serve_app.http.context import RouteRunner

    handles = fake_handles(chunks=[INFO, Delta("a", 1), final])

    async def go():
        run = await start(handles)
        try:
            return await RouteRunner.collect(run)
        except ServeAppError as e:
            return e

    out = asyncio.run(go())
    assert out == ("a", final) if isinstance(final, Done) else error_value(out) == final
    assert handles.streams[0].cancelled and handles.streams[0].ended_before_cancel


@pytest.mark.parametrize("final", FINALS, ids=["done", "error_value"])
def test_a_streamed_response_reads_the_model_stream_to_its_end_before_it_cancels(final):
    from serve_app.http.context import RequestContext
    from serve_app.http.query.serving import QueryEncoder
    from serve_app.http.sse import sse_stream

    handles = fake_handles(chunks=[INFO, Delta("a", 1), final])
    errors: list[str] = []

    async def go():
        run = await start(handles)
        encoder = QueryEncoder(RequestContext(RID, 0.0), run)
        events = sse_stream(run, encoder, error_of=lambda e: client_error(e, RID, 1), count_error=errors.append)
        return [e async for e in events]

    body = b"".join(asyncio.run(go()))
    assert body.endswith(b"data: [DONE]\n\n")
    if isinstance(final, Done):
        assert b'"type":"done"' in body and errors == []
    else:
        assert b'"type":"error"' in body and errors == [final.type]
    assert handles.streams[0].cancelled and handles.streams[0].ended_before_cancel


def test_chunks_after_done_are_dropped_and_the_answer_stands():
    handles = fake_handles(chunks=[INFO, Delta("a", 1), Done("stop", 5, 1), Delta("late", 2)])

    async def go():
        return await (await start(handles)).collect()

    assert asyncio.run(go()) == ("a", Done("stop", 5, 1)) and handles.streams[0].ended


def test_a_stream_left_open_after_done_still_answers_at_the_deadline():
    from serve_app.http.context import RouteRunner

    handles = fake_handles(chunks=[INFO, Delta("a", 1), Done("stop", 5, 1)], open_after=True)

    async def go():
        return await RouteRunner.collect(await start(handles, timeout_s=0.3))

    assert asyncio.run(go()) == ("a", Done("stop", 5, 1))
    assert handles.streams[0].cancelled and not handles.streams[0].ended


def test_chunks_cross_handles_as_picklable_values():
    import pickle

    for value in (INFO, Delta("a", 1), Done("stop", 1, 1, 0.5, 1.0, 0.2), QUESTION, ErrorInfo(400, "t", "m", "p")):
        assert pickle.loads(pickle.dumps(value)) == value


# --- the route runner: one error mapping, cancellation -----------------------------------------


class RecordingMetrics:
    def __init__(self):
        self.finished_calls, self.errors = [], []

    def finished(self, route, status, ms, err_type=None):
        self.finished_calls.append((route, status, err_type))

    def error(self, route, err_type):
        self.errors.append((route, err_type))


def runner_request():
    from starlette.requests import Request

    return Request({"type": "http", "method": "POST", "path": "/x", "headers": [], "state": {"request_id": RID}})


@pytest.mark.parametrize(
    ("raised", "status"),
    [(BackPressureError(num_queued_requests=1, max_queued_requests=1), 503), (wrapped(KeyError("k")), 500),
     (InvalidRequestError("bad", param="fps"), 400)],
)
def test_the_runner_answers_every_failure_in_the_error_shape(raised, status):
    from serve_app.config import AppConfig
    from serve_app.http.context import RouteRunner

    metrics = RecordingMetrics()
    runner = RouteRunner(AppConfig(), None, None, metrics)

    async def handler(request, ctx):
        raise raised

    response = asyncio.run(runner.run(runner_request(), "/x", handler))
    assert response.status_code == status and b'"error"' in response.body
    assert metrics.finished_calls == [("/x", status, error_value(client_error(raised, RID, 1)).type)]


def test_the_runner_lets_cancellation_through_and_logs_499():
    from serve_app.config import AppConfig
    from serve_app.http.context import RouteRunner

    metrics = RecordingMetrics()
    runner = RouteRunner(AppConfig(), None, None, metrics)

    async def handler(request, ctx):
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(runner.run(runner_request(), "/x", handler))
    assert metrics.finished_calls == [("/x", 499, None)]
