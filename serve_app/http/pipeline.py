"""One request's run through the graph: decode, hand-off to the model, and error mapping.

Ray-free in the sense that matters for tests: nothing here needs a running Ray. The
decoder and model handles are injected (anything with Serve's ``handle.method.remote``
shape), and Ray's exceptions are only *classified* here (:func:`client_error`), so unit
tests fake them (``tests/unit/http/test_pipeline.py``).

:func:`start_run` sends the clip to the decoder, hands the decode's object ref to the
model (frames go decoder → model directly), and waits for the model's first chunk:
the :class:`~serve_app.protocol.ClipInfo`, or the error value of a rejected clip. The
returned :class:`ClipRun` yields the rest under the request's deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

from serve_app.errors import ErrorInfo, OverloadedError, ServeAppError, UpstreamTimeoutError, internal_error
from serve_app.log_limit import get_logger
from serve_app.model.chunk_reading import collect, read_to_end
from serve_app.protocol import ClipInfo, ClipQuestion, ClipSource, Done, FrameSampling, ModelChunk
from serve_app.text import log_safe

logger = get_logger(__name__)

#: How many links of an exception chain :func:`causes` follows.
MAX_CAUSES = 8


class ClipRun:
    """One request's model stream after its first chunk.

    The stream is read to its end, past its final chunk (:class:`Done` or an :class:`ErrorInfo`):
    the model replica's generator then returns by itself, and Serve writes the call's access-log
    line (``CALL generate OK``, with the request id) and records its request metrics. A call
    cancelled after its last chunk but before that return (a race the caller often loses) gets
    neither: no ``OK`` nor ``CANCELLED`` line (Ray 2.60; two plain deployments, 300 calls each:
    67 unlogged when cancelled after the last chunk, none when read to the end).
    :meth:`cancel` is for readers that stop early (client gone, deadline, error).

    Attributes:
        info: what the model received (the first chunk).
        deadline: the request's deadline, in the event loop's clock (seconds).
        decoded: the decoded clip's ``ObjectRef`` (more questions about the same clip go with it:
            :func:`ask_again`), or None.
    """

    def __init__(self, info: ClipInfo, stream: Any, deadline: float, decoded: Any = None):
        self.info = info
        self.deadline = deadline
        self.decoded = decoded
        self._stream = stream

    def chunks(self) -> AsyncIterator[ModelChunk]:
        """The model's chunks after :attr:`info`, up to the final one (:class:`Done` or an
        :class:`ErrorInfo`); resumed after that, it reads the stream to its end (see the class
        docstring), so a reader keeps iterating instead of leaving the loop at the final chunk.
        Chunks after the final one (a model bug) are logged and dropped; a stream still open at the
        deadline after its final chunk ends the iteration (the answer is whole; the caller cancels).
        (:func:`serve_app.model.chunk_reading.read_to_end`, the camera path's reader too.)

        Raises:
            TimeoutError: the deadline passed before the final chunk (see :func:`client_error`: 504).
            Whatever the handle raises (see :func:`client_error`).
        """
        return read_to_end(self._stream, self.deadline)

    async def collect(self) -> tuple[str, Done]:
        """The whole answer text and the :class:`Done` chunk, once the stream has ended (see the class docstring).

        Raises:
            ServeAppError: the model's error value, raised.
            RuntimeError: the stream ended without a ``Done`` (a bug: 500).
        """
        got = await collect(self.chunks())
        if isinstance(got.final, ErrorInfo):
            got.final.raise_()
        if got.final is None:
            raise RuntimeError("model stream ended without a Done chunk")
        return got.text, got.final

    def cancel(self) -> None:
        """Cancels the model call, and through it the engine's generation (no-op once finished)."""
        self._stream.cancel()


async def start_run(
    decoder: Any,
    model: Any,
    *,
    source: ClipSource,
    sample: FrameSampling,
    question: ClipQuestion,
    deadline: float,
) -> ClipRun:
    """Starts the decode, hands it to the model, and waits for the model's first chunk.

    Args:
        decoder: the ``VideoDecoder`` handle (``decode.remote(source, sample, request_id)``).
        model: the ``VideoModel`` handle (``options(stream=True).generate.remote(question, clip)``).
        source: where the clip comes from.
        sample: which frames to sample.
        question: the question, sampling settings and request id.
        deadline: when the whole request must be done, in the event loop's clock (seconds).

    Raises:
        ServeAppError: the decoder or model rejected the request (their error value, raised).
        BackPressureError, DeploymentUnavailableError, RayActorError, TimeoutError, …:
            see :func:`client_error`. On any failure both calls are cancelled.
    """
    decoded = decoder.decode.remote(source, sample, question.request_id)
    stream = None
    try:
        async with asyncio.timeout_at(deadline):
            # Wait only for a decode replica to take the clip (a full decoder queue raises
            # BackPressureError here), then hand the model the decode's ObjectRef: the model's
            # router admits or rejects the request now, against its real queue (with a pending
            # DeploymentResponse argument it would check before the decode and queue without
            # bound after it), and the frames still go decoder → model without a stop here.
            decoded_ref = await decoded._to_object_ref()
            stream = model.options(stream=True).generate.remote(question, decoded_ref)
            first: ModelChunk = await stream.__anext__()
    except BaseException:
        decoded.cancel()
        if stream is not None:
            stream.cancel()
        raise
    return ClipRun(_clip_info(first, stream), stream, deadline, decoded_ref)


def _clip_info(first: ModelChunk, stream: Any) -> ClipInfo:
    """A model stream's first chunk as its :class:`ClipInfo`; an error value is raised, anything else is a bug."""
    if isinstance(first, ErrorInfo):
        first.raise_()
    if not isinstance(first, ClipInfo):
        stream.cancel()
        raise RuntimeError(f"model stream began with {type(first).__name__}, not ClipInfo")
    return first


async def ask_again(model: Any, run: ClipRun, question: ClipQuestion) -> ClipRun:
    """Asks ``question`` about the clip ``run`` decoded (no second decode), under ``run``'s deadline.

    ``question.clip_id`` should be the one ``run``'s question carried, so the engine reuses the clip's
    prompt prefix and vision encoding (see :class:`serve_app.protocol.ClipQuestion`).

    Raises:
        ServeAppError, BackPressureError, …: as :func:`start_run` (the call is cancelled on any failure).
    """
    stream = None
    try:
        async with asyncio.timeout_at(run.deadline):
            stream = model.options(stream=True).generate.remote(question, run.decoded)
            first: ModelChunk = await stream.__anext__()
    except BaseException:
        if stream is not None:
            stream.cancel()
        raise
    return ClipRun(_clip_info(first, stream), stream, run.deadline, run.decoded)


def client_error(exc: BaseException, request_id: str, retry_after_s: int) -> ServeAppError | ErrorInfo:
    """The client-visible error for an exception raised while serving a request.

    The chain of causes (:func:`causes`) is searched for a known error first, so a
    project error or a Ray error wrapped in ``RayTaskError`` is found where it lies.

    * :class:`ServeAppError`: itself (its own status).
    * Serve's ``BackPressureError`` (a downstream queue is full) and
      ``DeploymentUnavailableError``: 503 ``overloaded`` with ``Retry-After: retry_after_s``.
    * ``RayActorError`` (a replica died under the request, e.g. a killed decode replica):
      503 with ``Retry-After`` (Serve replaces the replica).
    * ``TimeoutError`` (the request's deadline): 504.
    * Anything else is a bug: 500 with the request id only (the traceback is logged).
    """
    chain = causes(exc)
    known = (ServeAppError, BackPressureError, DeploymentUnavailableError, RayActorError)
    exc = next((e for e in chain if isinstance(e, known)), exc)
    if isinstance(exc, ServeAppError):
        return exc
    if isinstance(exc, (BackPressureError, DeploymentUnavailableError)):
        why = "queue full" if isinstance(exc, BackPressureError) else "deployment unavailable"
        return OverloadedError(f"server busy: {why}; retry after {retry_after_s} s", retry_after_s=retry_after_s)
    if isinstance(exc, RayActorError):
        logger.warning("request %s: a replica died under it: %s", log_safe(request_id), type(exc).__name__)
        return OverloadedError(
            f"a replica serving this request failed and is being replaced; retry after {retry_after_s} s",
            retry_after_s=retry_after_s,
        )
    if isinstance(exc, TimeoutError):
        return UpstreamTimeoutError("request exceeded the server's request timeout")
    logger.error("request %s failed", log_safe(request_id), exc_info=exc)
    return internal_error(request_id)


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (``RayTaskError.cause``, else ``__cause__``), at most :data:`MAX_CAUSES`.

    Serve wraps a replica that died under a dependency (e.g. a killed decode replica
    whose output the model awaited) as ``RayServeException`` caused by
    ``RayTaskError(ActorDiedError)``; the useful error is at the end of that chain.
    """
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < MAX_CAUSES:
        out.append(cur)
        cause = cur.cause if isinstance(cur, RayTaskError) else None
        cur = cause if isinstance(cause, BaseException) else cur.__cause__
    return out
