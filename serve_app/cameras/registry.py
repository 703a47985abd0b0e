"""The registered streams of one stream worker: readers, per-stream answer loops, events (Ray-free).

:class:`StreamRegistry` owns every stream: its :class:`~serve_app.cameras.reader.CameraReader`
thread, a :class:`~serve_app.cameras.windows.NewestWinsQueue` of pending windows, and an asyncio
task that hands each window to the model (``ask``, injected: the model deployment's
``generate`` stream in production, a fake in unit tests) one at a time, so a slow model makes
a camera drop its oldest pending window (counted ``model_behind``) and never blocks another.
Answers, alerts and state changes become events in the :class:`~serve_app.cameras.windows.EventLog`;
definitions and answers go to the :class:`~serve_app.cameras.store.StreamStore`. The answer loop itself
(every question of a window, the shared clip identity, the window's answer and alert) is
:class:`~serve_app.cameras.answering.WindowAnswering`, which the registry extends.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable
from typing import Any

from serve_app.cameras.answering import Ask, LiveStream, NoMetrics, Prepare, StreamMetrics, WindowAnswering
from serve_app.cameras.held import ReadyWindow
from serve_app.cameras.protocol import (
    EventBatch,
    SkippedEvent,
    StateEvent,
    StreamCreate,
    StreamEvent,
    StreamState,
    StreamStatus,
    WebhookCounts,
    WindowTimes,
)
from serve_app.cameras.reader import CameraReader
from serve_app.cameras.rules import check_stream_limits, frames_per_window, mib, stream_frame_bytes
from serve_app.cameras.scene_change import SkipDecision
from serve_app.cameras.shards import first_event_id, new_stream_id, shard_of
from serve_app.cameras.store import StreamStore
from serve_app.cameras.windows import EventLog
from serve_app.config import AppConfig
from serve_app.errors import NotFoundError, OverloadedError, ServeAppError
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.text import log_safe

logger = get_logger(__name__)

def redact(url: str) -> str:
    """``url`` without user:password (shown in statuses and logs)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    return f"{scheme}://{rest.split('@', 1)[1]}"


class StreamRegistry(WindowAnswering):
    """Every stream of this worker (see the module docstring).

    Args:
        config: the application config.
        ask: the model call (see :data:`Ask`).
        store: the database (definitions and answers).
        metrics: per-stream metrics (none by default).
        webhooks: the alert webhooks (:class:`serve_app.cameras.webhook.Webhooks`), or None.
        prepare: see :data:`Prepare`.
        release_memory: called (in a thread) after a stream is deleted, to hand freed memory back to the
            system (:func:`serve_app.cameras.memory.release_freed_memory` in the worker).
        shard: this worker's index among ``streams.workers`` (:mod:`serve_app.cameras.shards`): it owns the
            streams whose id hashes to it and holds its share of ``streams.max_streams`` and of the frame budget.
    """

    def __init__(
        self,
        config: AppConfig,
        ask: Ask,
        store: StreamStore,
        metrics: StreamMetrics | None = None,
        webhooks: Any = None,
        prepare: Prepare | None = None,
        release_memory: Callable[[], object] | None = None,
        shard: int = 0,
    ):
        workers = config.streams.workers
        if not 0 <= shard < workers:
            raise ValueError(f"stream worker {shard} of streams.workers {workers}")
        self.config = config
        self.shard = shard
        self.ask = ask
        self.prepare: Prepare = prepare or (lambda clip: clip)
        self.release_memory = release_memory
        self.store = store
        self.metrics = metrics or NoMetrics()
        self.webhooks = webhooks
        clock_id = int(time.time() * 1000) * 1000
        self.events = EventLog(
            config.streams.event_history, first_id=first_event_id(clock_id, shard, workers), step=workers
        )
        #: This worker's share of the limits (rounded up for streams, down for bytes).
        self.max_streams = -(-config.streams.max_streams // workers)
        self.max_frame_memory_bytes = config.streams.max_frame_memory_bytes // workers
        self.streams: dict[str, LiveStream] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ lifecycle

    def resume(self) -> int:
        """Starts every stream stored in the database that this worker owns, oldest first; returns how many
        are registered.

        Each is checked again against today's limits and frame-memory budget
        (:mod:`serve_app.cameras.rules`): one that no longer passes is registered in state ``failed``
        with the reason (``last_error``), holding no memory and starting no reader, so a config
        change can never make the worker crash-loop on its own database; delete it, or fix the config.
        """
        for sid, spec, created in self.store.streams():
            if sid in self.streams or shard_of(sid, self.config.streams.workers) != self.shard:
                continue
            try:
                check_stream_limits(spec, self.config)
                need = self._reserve(spec)
            except ServeAppError as e:
                self._start_failed(sid, spec, created, f"not resumed: {e.message}")
                LOG_LIMIT.log(logger, logging.WARNING, "stream resume", "stream %s not resumed: %s",
                              log_safe(sid), log_safe(e.message))
                continue
            self._start(sid, spec, created, need)
        return len(self.streams)

    @property
    def reserved_bytes(self) -> int:
        """Frame memory reserved by the registered streams, bytes."""
        return sum(st.reserved_bytes for st in self.streams.values())

    def _reserve(self, spec: StreamCreate) -> int:
        """The frame memory ``spec`` needs, if it fits the budget.

        Raises:
            OverloadedError (503): it does not fit this worker's share of ``streams.max_frame_memory_bytes``.
        """
        need = stream_frame_bytes(spec, self.config)
        budget = self.max_frame_memory_bytes
        held = self.reserved_bytes
        if held + need > budget:
            n = frames_per_window(spec.window_s, spec.fps)
            raise OverloadedError(
                f"frame memory budget full: this stream needs up to {mib(need)} of frames ({n} frames per window); "
                f"{mib(held)} of the {mib(budget)} budget ({self._share('streams.max_frame_memory_bytes')}) are "
                f"reserved by {len(self.streams)} stream(s); lower window_s × fps, or delete a stream",
                retry_after_s=self.config.limits.retry_after_s,
            )
        return need

    def _share(self, field: str) -> str:
        """Names the limit in a message: ``field``, or this worker's share of it with several workers."""
        workers = self.config.streams.workers
        return field if workers == 1 else f"{field} over streams.workers {workers}: stream worker {self.shard}'s share"

    def create(self, spec: StreamCreate) -> StreamStatus:
        """Registers and starts a stream (its spec already validated by the ingress).

        Raises:
            OverloadedError (503): this worker holds its share of ``streams.max_streams``, or the stream's
                frames do not fit its share of ``streams.max_frame_memory_bytes``.
        """
        limit = self.max_streams
        if len(self.streams) >= limit:
            raise OverloadedError(
                f"{len(self.streams)} streams are registered; the limit is {limit} "
                f"({self._share('streams.max_streams')})"
            )
        need = self._reserve(spec)
        sid = new_stream_id(self.shard, self.config.streams.workers)
        created = time.time()
        self.store.add(sid, spec, created)
        self._start(sid, spec, created, need)
        return self.status(sid)

    def _start_failed(self, sid: str, spec: StreamCreate, created: float, reason: str) -> None:
        st = LiveStream(sid, spec, created, self.config.streams.pending_windows)
        st.state, st.last_error = "failed", reason
        self.streams[sid] = st
        self._event(
            StateEvent(
                id=self.events.next_id(), stream_id=sid, time=time.time(), state="failed", previous=None, error=reason
            )
        )

    def _start(self, sid: str, spec: StreamCreate, created: float, reserved_bytes: int) -> None:
        self.loop = asyncio.get_running_loop()
        st = LiveStream(sid, spec, created, self.config.streams.pending_windows)
        st.reserved_bytes = reserved_bytes
        self.streams[sid] = st
        self._event(
            StateEvent(id=self.events.next_id(), stream_id=sid, time=time.time(), state="connecting", previous=None)
        )
        loop = self.loop

        def on_window(w: ReadyWindow) -> None:
            loop.call_soon_threadsafe(self._window, st, w)

        def on_state(state: StreamState, error: str | None) -> None:
            loop.call_soon_threadsafe(self._state, st, state, error)

        def on_frame() -> None:
            st.frames += 1  # an int add under the GIL: exact enough for a counter read elsewhere

        st.reader = CameraReader(spec, self.config, on_window, on_state, on_frame)
        # A context of its own: the registering call's would make every window's model call carry that
        # request's Serve request id (the POST /v1/streams id, in the model replica's log lines and metrics).
        st.task = loop.create_task(self._answer_loop(st), context=contextvars.Context())
        st.reader.start()

    async def delete(self, sid: str) -> None:
        """Stops and forgets a stream.

        Raises:
            NotFoundError (404): no such stream.
        """
        st = self._get(sid)
        del self.streams[sid]
        self.store.remove(sid)
        await self._stop(st)
        if self.webhooks is not None:
            self.webhooks.forget(sid)
        self._event(
            StateEvent(id=self.events.next_id(), stream_id=sid, time=time.time(), state="deleted", previous=st.state)
        )
        if self.release_memory is not None:
            await asyncio.to_thread(self.release_memory)

    async def _stop(self, st: LiveStream) -> None:
        """Stops ``st``'s reader (joined up to 10 s) and answer loop, and lets go of both.

        The reader's callbacks and the answer loop's coroutine (and, once cancelled, its traceback) refer
        back to ``st``: while ``st`` holds them, the stream's frames (the reader's open window, pending
        windows, the clip being answered) sit in reference cycles that only a full garbage collection
        frees, which Python starts after enough new allocations, so not in an idle worker (issue 25: a
        worker kept 458 MiB private, from 92, after 17 streams were deleted). Dropped here, they are
        freed as soon as the thread and the task have ended.
        """
        reader, task = st.reader, st.task
        st.reader, st.task = None, None
        thread = None
        if reader is not None:
            reader.stop()
            thread = reader.thread
            # Not to_thread(reader.join): the executor's worker holds what it ran until just after this coroutine
            # resumes, so the reader (and through its callbacks, st) outlived the delete (CI, 2026-12-02).
            reader = None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # stopping: how it ended no longer matters
                await task
        if thread is not None:
            await asyncio.to_thread(thread.join, 10.0)
        while st.queue.get_nowait() is not None:  # pending windows' frames go now, not with the last reference
            pass

    async def close(self) -> None:
        """Stops every reader (the definitions stay in the database)."""
        for st in list(self.streams.values()):
            await self._stop(st)

    # ------------------------------------------------------------------ reads

    def _get(self, sid: str) -> LiveStream:
        st = self.streams.get(sid)
        if st is None:
            raise NotFoundError("no stream with this id (see GET /v1/streams)", param="id")
        return st

    def status(self, sid: str) -> StreamStatus:
        """One stream's status. Raises NotFoundError (404)."""
        st = self._get(sid)
        spec = st.spec
        return StreamStatus(
            id=st.id,
            name=spec.name,
            url=redact(spec.url),
            state=st.state,
            window_s=spec.window_s,
            every_s=spec.every_s or spec.window_s,
            fps=spec.fps,
            questions=list(spec.questions),
            loop=spec.loop,
            alert=spec.alert,
            created_at=st.created_at,
            worker=self.shard,
            frames_received=st.frames,
            windows_cut=st.cut,
            windows_answered=st.answered,
            windows_dropped=dict(st.dropped),
            windows_skipped=st.skipped,
            skip_unchanged=spec.skip_unchanged,
            alerts=st.alerts,
            webhooks=self.webhooks.counts_of(st.id) if self.webhooks is not None else WebhookCounts(),
            reconnects=st.reconnects,
            last_error=st.last_error,
            latency_ms=st.latency_ms.summary(1),
            freshness_s=st.freshness_s.summary(3),
            last_answer=st.last_answer,
        )

    def list(self) -> list[StreamStatus]:
        """Every stream's status, oldest first."""
        return [self.status(sid) for sid in sorted(self.streams, key=lambda s: self.streams[s].created_at)]

    async def wait_events(self, after: int | None, stream_id: str | None, timeout_s: float) -> EventBatch:
        """Events after id ``after`` (None: only new ones from now: the current last id is used).

        Raises:
            NotFoundError (404): ``stream_id`` is given and unknown.
        """
        if stream_id is not None and stream_id not in self.streams:
            raise NotFoundError("no stream with this id (see GET /v1/streams)", param="id")
        return await self.events.wait(self.events.last_id if after is None else after, stream_id, timeout_s)

    # ------------------------------------------------------------------ events from the reader

    def _event(self, event: StreamEvent) -> None:
        self.events.append(event)

    def _state(self, st: LiveStream, state: StreamState, error: str | None) -> None:
        if st.id not in self.streams:
            return
        if state == "reconnecting":
            st.reconnects += 1
            self.metrics.reconnect(st.id)
        if error:
            st.last_error = error
        if state == "failed":
            st.reserved_bytes = 0  # its reader has ended: it holds no frames any more
        if state == st.state and not error:
            return
        prev, st.state = st.state, state
        if state != prev or error:
            self._event(
                StateEvent(
                    id=self.events.next_id(), stream_id=st.id, time=time.time(), state=state, previous=prev, error=error
                )
            )

    def _window(self, st: LiveStream, w: ReadyWindow) -> None:
        if st.id not in self.streams:
            return
        st.cut += 1
        if st.quiet is not None and w.grids:
            decision = st.quiet.decide(w.window.index, w.window.end_s, w.grids)
            if decision.skip:
                self._skip(st, w, decision)
                return
            st.sent_refs[w.window.index] = (w.window.end_s, w.grids[-1])
        w.handed_at = time.time()  # type: ignore[attr-defined]  # hand-off time, read back with getattr
        dropped = st.queue.put(w)
        if dropped is not None:
            st.sent_refs.pop(dropped.window.index, None)
            self._drop(st, "model_behind")

    def _skip(self, st: LiveStream, w: ReadyWindow, decision: SkipDecision) -> None:
        """A window not sent to the model (nothing changed): counted, and said in a ``skipped`` event."""
        st.skipped += 1
        self.metrics.window(st.id, "skipped")
        since = decision.since_index if decision.since_index is not None else -1
        win = w.window
        win.frames = []  # its frames go now
        assert st.quiet is not None
        self._event(
            SkippedEvent(
                id=self.events.next_id(),
                stream_id=st.id,
                time=time.time(),
                window_index=win.index,
                window=WindowTimes(
                    start_s=round(win.start_s, 3), end_s=round(win.end_s, 3),
                    wall_start=win.wall_start, wall_end=win.wall_end,
                ),
                since_window_index=since,
                change=round(decision.change.score, 4),
                threshold=st.quiet.threshold,
                message=f"unchanged since window {since}; previous answer stands "
                f"(change {decision.change.score:.4f} < threshold {st.quiet.threshold})",
            )
        )

