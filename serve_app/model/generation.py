"""One clip question through an engine, as a stream of typed chunks (Ray-free).

:func:`answer_stream` is the model deployment's work without the deployment: it
takes any :class:`~serve_app.model.engines.base.Engine`, so unit tests drive it with a fake
engine. The stream is the handle contract of :mod:`serve_app.protocol`: a
:class:`ClipInfo` first (or the decoder's :class:`ErrorInfo` and nothing else), then
:class:`Delta` values, then :class:`Done` (or an :class:`ErrorInfo` if the engine fails).

Ids that reach the engine are the server's: every call makes a fresh engine request id
(:func:`new_engine_request_id`, a UUID4, never derived from the client's ``X-Request-Id``
or from the clip's content), and the clip's multimodal UUID (the key of vLLM's encoder
cache) derives from it. A client can therefore not make two requests share an engine id
or a cache entry. The client-facing request id is only logged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol

from serve_app.errors import InvalidRequestError
from serve_app.log_limit import get_logger
from serve_app.model.engine_limits import check_context, engine_error, text_tokens_estimate
from serve_app.model.engines.base import Engine, GenerationRequest
from serve_app.model.family import family_for
from serve_app.model.stop_strings import StopScanner
from serve_app.protocol import ClipInfo, ClipQuestion, DecodedClip, Delta, Done, ErrorInfo, ModelChunk, VideoInfo
from serve_app.text import log_safe

logger = get_logger(__name__)


class GenerationMetrics(Protocol):
    """What :func:`answer_stream` records (:class:`serve_app.metrics.ModelMetrics` implements it)."""

    def enqueued(self) -> None:
        """A request was handed to the engine."""

    def dequeued(self, queue_ms: float | None) -> None:
        """The engine started it after ``queue_ms`` milliseconds (None: it never started)."""

    def done(
        self,
        finish_reason: str,
        *,
        model_ms: float | None = None,
        ttft_ms: float | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int = 0,
    ) -> None:
        """It ended (``stop``, ``length``, ``abort`` or ``error``), with timings (ms) and token counts."""


class _NoMetrics:
    def enqueued(self) -> None:
        pass

    def dequeued(self, queue_ms: float | None) -> None:
        pass

    def done(self, finish_reason: str, **counts: float | None) -> None:
        pass


def new_engine_request_id() -> str:
    """A fresh engine request id: ``gen-`` + 32 hex digits of a UUID4 (random, never a content hash)."""
    return "gen-" + uuid.uuid4().hex


async def answer_stream(  # noqa: C901 - the engine stream to chunks: branches for queue, first token, stop strings, end, errors
    engine: Engine,
    question: ClipQuestion,
    clip: DecodedClip | ErrorInfo,
    *,
    model_name: str,
    system_prompt: str,
    metrics: GenerationMetrics | None = None,
    max_model_len: int | None = None,
    retry_after_s: int = 1,
    family: str = "qwen2_5_vl",
) -> AsyncIterator[ModelChunk]:
    """Streams the answer to ``question`` about ``clip`` (see the module docstring for the chunks).

    Args:
        engine: a started engine.
        question: the question, sampling settings and the request id (for logs only).
        clip: the decoder's result; an :class:`ErrorInfo` is passed on as the only chunk.
        model_name: the served model name (reported in :class:`ClipInfo`).
        system_prompt: the configured system prompt; ``question.system_prompt`` (a request's own
            system message) replaces it. The prompt is the model's chat template over the system
            prompt, the clip with ``question.question``, then ``question.history``.
        metrics: where queue, generation and token counts are recorded (none by default).
        max_model_len: the engine's context in tokens; a clip that cannot fit is a 400 naming
            ``max_frames`` before the engine (:func:`serve_app.model.engine_limits.check_context`).
        retry_after_s: ``Retry-After`` of the 503 for a dead engine.
        family: the model family (``model.family``): the chat format (rendered with the engine's
            checkpoint template, :attr:`Engine.chat_template`, else the family's copy), the video
            token count and the reasoning format reported in :class:`ClipInfo`.

    Engine failures become chunks, never exceptions (:func:`serve_app.model.engine_limits.engine_error`):
    the request's fault (``ValueError``/``TypeError``) a 400, :class:`EngineDeadError` a 503
    :class:`ErrorInfo` (the replica is being replaced), anything else a 500 carrying the
    request id. A consumer that stops early (client gone) aborts the request in the engine.

    Stop strings (``question.sampling.stop``) are applied here, for every engine, with vLLM's
    semantics (:mod:`serve_app.model.stop_strings`): the text ends before the first one, the ``Done``
    says ``stop`` with the tokens generated so far, and the request is aborted in the engine.
    """
    if isinstance(clip, ErrorInfo):
        yield clip
        return
    metrics = metrics or _NoMetrics()
    rid = question.request_id
    if question.system_prompt is not None:  # the request's own system message replaces the configured one
        system_prompt = question.system_prompt
    fam = family_for(family)
    texts = (system_prompt, question.question, *(t.text for t in question.history))
    try:  # security: a clip that cannot fit the context is 400 before the engine (issue 13)
        n_video = check_context(
            clip.num_frames, clip.frame_size[1], clip.frame_size[0], text_tokens_estimate(*texts), max_model_len,
            fam.geometry.pixel_factor, fam.text_tokens_per_group,
        )
    except InvalidRequestError as e:
        yield e.info()
        return
    yield ClipInfo(
        video=VideoInfo.of(clip),
        warnings=tuple(clip.warnings),
        decode_ms=clip.decode_ms,
        video_tokens=n_video,
        model=model_name,
        random_weights=engine.random_weights,
        reasoning_format=fam.reasoning_format,
    )
    req = GenerationRequest(
        request_id=new_engine_request_id(),
        frames=clip.frames,
        patches=clip.patches,
        fps=clip.fps,
        prompt=fam.render_prompt(question.question, system_prompt, question.history, engine.chat_template),
        sampling=question.sampling,
        clip_id=question.clip_id,
    )
    logger.debug("request %s: engine request id %s", log_safe(rid), req.request_id)
    stops = StopScanner(question.sampling.stop) if question.sampling.stop else None
    t0 = time.perf_counter()
    queue_ms: float | None = None
    ttft_ms: float | None = None
    prompt_tokens: int | None = None
    finished = False
    stopped = False  # a stop string ended the answer before the engine finished
    outcome = "abort"  # unless the stream finishes or fails: the consumer went away
    n_tokens = 0
    queued = True
    metrics.enqueued()
    chunks = engine.generate(req)

    def done(finish_reason: str | None, completion_tokens: int) -> Done:
        model_ms = (time.perf_counter() - t0) * 1000 - (queue_ms or 0.0)
        metrics.done(
            finish_reason or "stop",
            model_ms=model_ms,
            ttft_ms=ttft_ms,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
        return Done(
            finish_reason=finish_reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            queue_ms=queue_ms,
            model_ms=model_ms,
            ttft_ms=ttft_ms,
        )

    try:
        async for chunk in chunks:
            if chunk.queue_ms is not None:
                queue_ms = chunk.queue_ms
                if queued:
                    queued = False
                    metrics.dequeued(queue_ms)
            if chunk.prompt_tokens is not None:
                prompt_tokens = chunk.prompt_tokens
            if chunk.text:
                if ttft_ms is None:
                    ttft_ms = (time.perf_counter() - t0) * 1000
                n_tokens = chunk.completion_tokens
                text = chunk.text if stops is None else stops.feed(chunk.text)
                if text:
                    yield Delta(text=text, completion_tokens=chunk.completion_tokens)
                if stops is not None and stops.stopped:  # vLLM: finish reason stop, the string not sent
                    finished = stopped = True
                    outcome = "stop"
                    yield done("stop", n_tokens)
                    break
            if chunk.finished:
                finished = True
                outcome = chunk.finish_reason or "stop"
                tail = "" if stops is None else stops.flush()
                if tail:
                    yield Delta(text=tail, completion_tokens=chunk.completion_tokens)
                yield done(chunk.finish_reason, chunk.completion_tokens)
    except Exception as e:  # noqa: BLE001 - one mapping: request's fault 400, engine's 503, else 500
        outcome = "error"
        yield engine_error(e, rid, retry_after_s)
    finally:
        if queued:
            metrics.dequeued(None)
        if not finished:  # cancelled (client went away) or failed: free the engine slot
            metrics.done(outcome, completion_tokens=n_tokens)
            if outcome == "abort":
                logger.info(
                    "request %s: cancelled after %d tokens; aborting it in the engine", log_safe(rid), n_tokens
                )
        if not finished or stopped:
            await engine.abort(req.request_id)
        if stopped and isinstance(chunks, AsyncGenerator):  # let the engine's generator release what it holds now
            await chunks.aclose()
