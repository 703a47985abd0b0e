"""Answering a stream's windows: the per-stream live state and the answer loop (Ray-free).

:class:`LiveStream` is one registered stream's state (owned by the registry's event loop);
:class:`WindowAnswering` is the part of :class:`serve_app.cameras.registry.StreamRegistry` that takes
windows off a stream's queue and asks the model every question about them: the questions of a
window share one server-made clip identity, the first goes alone and the others once its first
token came (its prefill done), and the first question's answer is the window's (latency, last
answer, stored history, alert, webhook).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from serve_app.cameras.held import ReadyWindow
from serve_app.cameras.protocol import (
    RANDOM_WEIGHTS_NOTE,
    AlertEvent,
    AnswerEvent,
    AnswerTimings,
    AnswerUsage,
    DropReason,
    LastAnswer,
    StreamCreate,
    StreamEvent,
    StreamState,
    WindowTimes,
)
from serve_app.cameras.reader import CameraReader
from serve_app.cameras.scene_change import QuietScenePolicy
from serve_app.cameras.store import StreamStore
from serve_app.cameras.windows import EventLog, NewestWinsQueue, Percentiles
from serve_app.config import AppConfig
from serve_app.errors import ErrorInfo, error_value
from serve_app.http.pipeline import client_error
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.model.chunk_reading import collect, read_to_end
from serve_app.model.reasoning import split_reasoning
from serve_app.model.sampling_options import sampling_options
from serve_app.protocol import ClipInfo, ClipQuestion, DecodedClip, Done, ModelChunk

logger = get_logger(__name__)

#: ``ask(question, clip)``: the model's chunk stream for one window (``clip``: what :data:`Prepare` made of it).
Ask = Callable[[ClipQuestion, Any], AsyncIterator[ModelChunk]]
#: ``prepare(clip)``: a window's clip as every question of the window sends it (blocking; run off the event
#: loop): the stream worker puts it in Ray's object store once, so the worker holds no copy while the model
#: answers; by default the clip itself.
Prepare = Callable[[DecodedClip], Any]


class StreamMetrics(Protocol):
    """What the registry records per stream (:class:`serve_app.metrics.StreamMetrics`)."""

    def window(self, stream_id: str, outcome: str) -> None: ...
    def reconnect(self, stream_id: str) -> None: ...
    def freshness(self, stream_id: str, seconds: float) -> None: ...


class NoMetrics:
    """Records nothing (tests, and a registry built without metrics)."""

    def window(self, stream_id: str, outcome: str) -> None:
        pass

    def reconnect(self, stream_id: str) -> None:
        pass

    def freshness(self, stream_id: str, seconds: float) -> None:
        pass


class LiveStream:
    """One registered stream's live state (owned by the registry's event loop)."""

    def __init__(self, sid: str, spec: StreamCreate, created_at: float, pending: int):
        self.id, self.spec, self.created_at = sid, spec, created_at
        self.state: StreamState = "connecting"
        self.frames = 0
        self.cut = 0
        self.answered = 0
        self.dropped: collections.Counter[str] = collections.Counter()
        self.alerts = 0
        self.reconnects = 0
        self.last_error: str | None = None
        self.latency_ms = Percentiles()
        self.freshness_s = Percentiles()
        self.last_answer: LastAnswer | None = None
        self.queue: NewestWinsQueue[ReadyWindow] = NewestWinsQueue(pending)
        self.reader: CameraReader | None = None
        self.task: asyncio.Task[None] | None = None
        self.reserved_bytes = 0  # frame memory reserved (streams.max_frame_memory_bytes); 0 for a failed stream
        skip = spec.skip_unchanged
        self.quiet = None if skip is None else QuietScenePolicy(skip.threshold, skip.max_skip_s)
        self.skipped = 0
        # sent windows' (end_s, last grid) until answered (the reference moves) or dropped; at most pending + 2
        self.sent_refs: dict[int, tuple[float, Any]] = {}



class WindowAnswering:
    """The answer loop of :class:`serve_app.cameras.registry.StreamRegistry` (see the module docstring).

    The registry sets the attributes below; :meth:`_event` is the registry's.
    """

    config: AppConfig
    ask: Ask
    prepare: Prepare
    events: EventLog
    metrics: StreamMetrics
    store: StreamStore
    webhooks: Any

    def _event(self, event: StreamEvent) -> None:
        raise NotImplementedError

    def _drop(self, st: LiveStream, reason: DropReason) -> None:
        st.dropped[reason] += 1
        self.metrics.window(st.id, "dropped_" + reason)

    # ------------------------------------------------------------------ answering

    async def _answer_loop(self, st: LiveStream) -> None:
        while True:
            w = await st.queue.get()
            try:
                await self._answer(st, w)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - logged with its traceback (rate-limited), the window dropped
                LOG_LIMIT.log(logger, logging.ERROR, f"stream {st.id} window", "stream %s: window %d failed",
                              st.id, w.window.index, exc_info=True)
                self._drop(st, "model_error")
            finally:
                st.sent_refs.pop(w.window.index, None)  # answered or not, this window is done with

    async def _answer(self, st: LiveStream, w: ReadyWindow) -> None:
        """Asks every question of the stream about window ``w``; the first question's answer is the window's.

        Several questions share the clip: one server-made ``clip_id`` per window (a random hex
        string, never shared with another window or stream), so the engine keys its caches by it.
        They go to the model replica together, in order (the first question's call first); its engine
        prepares them all at once and hands the later ones to vLLM once the first one has prefilled
        (:class:`serve_app.model.engines.prefill_gate.PrefillGate`), so they read the video's blocks
        instead of prefilling them again. A question that fails counts a dropped window by reason;
        when the first one fails the others are cancelled.
        """
        spec = st.spec
        # The held frames become the model's input once per window (every question sends the same), off the loop.
        clip = await asyncio.to_thread(lambda: self.prepare(w.clip()))
        clip_id = uuid.uuid4().hex if len(spec.questions) > 1 else None
        # Tasks start in creation order, so the engine gets the first question's call first.
        tasks = [asyncio.ensure_future(self._ask_one(st, w, clip, qi, clip_id)) for qi in range(len(spec.questions))]
        try:
            answered = await tasks[0]
            if answered:  # otherwise the window is dropped, and the finally cancels the other questions
                await asyncio.gather(*tasks[1:])
        finally:
            for task in tasks:  # the stream was deleted (cancelled) or a question is left: none outlives the window
                task.cancel()
        if answered:
            st.answered += 1
            self.metrics.window(st.id, "answered")
            ref = st.sent_refs.get(w.window.index)
            if st.quiet is not None and ref is not None:
                st.quiet.answered(w.window.index, ref[0], ref[1])  # the answered picture is the new reference

    async def _ask_one(self, st: LiveStream, w: ReadyWindow, clip: DecodedClip, qi: int, clip_id: str | None) -> bool:
        """Asks question ``qi`` about the window's clip and emits its answer (and, for the first
        question, the stream's last answer and alert); False when it failed (counted as dropped)."""
        spec, cfg = st.spec, self.config
        win = w.window
        question = spec.questions[qi]
        sampling = sampling_options(cfg.model.sampling, max_tokens=spec.max_tokens, ignore_eos=spec.ignore_eos)
        rid = f"{st.id}-w{win.index}-q{qi}"
        t0 = time.time()
        try:
            chunks = self.ask(ClipQuestion(rid, question, sampling, clip_id=clip_id), clip)
            info, text, done = await self._collect(chunks)
        except Exception as e:  # noqa: BLE001 - classified: refused/unavailable vs failed
            err = error_value(client_error(e, rid, cfg.limits.retry_after_s))
            self._drop(st, "model_busy" if err.status == 503 else "model_error")
            st.last_error = f"model: {err.message}"
            return False
        if isinstance(info, ErrorInfo):
            self._drop(st, "model_busy" if info.status == 503 else "model_error")
            st.last_error = f"model: {info.message}"
            return False
        assert done is not None  # _collect returns a ClipInfo only with its Done
        now = time.time()
        parts = split_reasoning(text, info.reasoning_format)
        answer = parts.answer if parts.answer is not None else text
        latency_ms = (now - getattr(w, "handed_at", t0)) * 1000
        fresh_s = now - win.wall_end
        ev = AnswerEvent(
            id=self.events.next_id(),
            stream_id=st.id,
            time=now,
            window_index=win.index,
            question_index=qi,
            question=question,
            window=WindowTimes(
                start_s=round(win.start_s, 3), end_s=round(win.end_s, 3),
                wall_start=win.wall_start, wall_end=win.wall_end,
            ),
            frames=len(win.times_s),
            answer=answer,
            reasoning=parts.reasoning,
            finish_reason=done.finish_reason,
            timings=AnswerTimings(
                decode_ms=round(w.decode_ms, 1),
                queue_ms=done.queue_ms,
                model_ms=done.model_ms,
                ttft_ms=done.ttft_ms,
                latency_ms=round(latency_ms, 1),
                freshness_s=round(fresh_s, 3),
            ),
            usage=AnswerUsage(
                prompt_tokens=done.prompt_tokens,
                completion_tokens=done.completion_tokens,
                video_tokens=info.video_tokens,
            ),
            model=info.model,
            random_weights=info.random_weights,
            note=RANDOM_WEIGHTS_NOTE if info.random_weights else parts.note(),
            windows_dropped=sum(st.dropped.values()),
        )
        self._event(ev)
        if qi == 0:
            await self._first_answer(st, w, ev, latency_ms, fresh_s)
        return True

    async def _first_answer(self, st: LiveStream, w: ReadyWindow, ev: AnswerEvent, latency_ms: float,
                            fresh_s: float) -> None:
        """The window's answer (its first question's): latency, last answer, stored history, alert."""
        spec = st.spec
        st.latency_ms.add(latency_ms)
        st.freshness_s.add(fresh_s)
        self.metrics.freshness(st.id, fresh_s)
        st.last_answer = LastAnswer(
            event_id=ev.id,
            window_index=ev.window_index,
            answer=ev.answer,
            reasoning=ev.reasoning,
            answered_at=ev.time,
            random_weights=ev.random_weights,
        )
        await asyncio.to_thread(self.store.add_answer, st.id, ev.id, ev.model_dump_json(), w.thumbnail)
        if spec.alert is not None:
            hits = spec.alert.matches(ev.answer)
            if hits:
                st.alerts += 1
                alert = AlertEvent(
                    id=self.events.next_id(),
                    stream_id=st.id,
                    time=ev.time,
                    window_index=ev.window_index,
                    answer_event_id=ev.id,
                    matched=hits,
                    answer=ev.answer,
                    random_weights=ev.random_weights,
                )
                self._event(alert)
                if spec.webhook and self.webhooks is not None:
                    self.webhooks.send(spec.webhook, alert, st.id)

    @staticmethod
    async def _collect(chunks: AsyncIterator[ModelChunk]) -> tuple[ClipInfo | ErrorInfo, str, Done | None]:
        """``(ClipInfo, text, Done)`` from a model stream, or ``(ErrorInfo, "", None)``.

        The stream is read to its end, past its final chunk, by the HTTP pipeline's reader
        (:func:`serve_app.model.chunk_reading.read_to_end`, no deadline: a window has none).

        Raises:
            RuntimeError: the stream ended without a ``Done`` or without a ``ClipInfo`` (a model bug).
        """
        got = await collect(read_to_end(chunks))
        if isinstance(got.final, ErrorInfo):
            return got.final, "", None
        if got.final is None:
            raise RuntimeError("model stream ended without a Done chunk")
        if got.info is None:
            raise RuntimeError("model stream ended without a ClipInfo")
        return got.info, got.text, got.final
