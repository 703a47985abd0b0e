"""One load-test run: camera feeds, a schedule, an async client, and the records it produces.

The run is bounded: nothing is scheduled after ``duration_s`` nor beyond
``max_requests``; after the last send the runner waits at most ``drain_s``
for answers, then cancels what is left and records it as ``unfinished``
(freshness = a lower bound). :meth:`Runner.stop` ends a run early the same way.

Open-loop schedules use one dispatcher task that sleeps until each planned
send time and starts the request as its own task, so a slow server never
delays the next send (the client's own delay is the scheduling lag, reported).
The closed loop runs ``concurrency`` workers; worker ``w`` sends requests
``w, w + n, w + 2n, …`` of the sequence (camera ``q mod cameras``, its window
``q div cameras``), each when the previous one has been answered, or, with
``interval_s``, no sooner than ``interval_s`` after its last send (a paced
camera whose late answer delays its next window and never overlaps it).

Time is the injected ``clock`` (``time.perf_counter`` by default); sleeps and
timeouts are the event loop's, so a test can run a whole schedule in virtual
time (``tests/clock.py``) with ``clock=loop.time``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from loadtest.camera import Window, is_url, source_windows
from loadtest.client import HttpRequest, build_request, make_client, send
from loadtest.records import RequestRecord
from loadtest.schedule import Arrival, phases, plan
from loadtest.settings import CameraSpec, RunSettings

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Feed:
    """A camera with its windows, cut up front.

    Attributes:
        spec: the camera.
        windows: the cycle of windows; None for a live URL (windows advance forever).
        offset: cycle position of request 0 (cameras sharing a clip start at different windows).
        cycle: replay the windows in a loop; False: each window is sent once (a fixed batch)
            and the closed loop stops at the last one.
        requests: ready request bodies, one per window (None: built from the camera and window
            by :func:`loadtest.client.build_request`).
    """

    spec: CameraSpec
    windows: tuple[Window, ...] | None
    offset: int = 0
    cycle: bool = True
    requests: tuple[HttpRequest, ...] | None = None

    def request(self, k: int, settings: RunSettings, question: int | None = None) -> HttpRequest:
        """The body of the camera's request ``k`` (about question ``question`` when given, else round-robin)."""
        if self.requests is not None:
            return self.requests[(self.offset + k) % len(self.requests)]
        text = self.question(k) if question is None else self.spec.questions[question]
        return build_request(self.spec, self.window(k), text, settings)

    def has(self, k: int) -> bool:
        """Whether the camera has a request ``k`` (always, unless a non-cycling feed ran out)."""
        return self.cycle or self.windows is None or k < len(self.windows)

    def window(self, k: int) -> Window:
        """The window of the camera's request ``k``."""
        if self.windows is None:
            w = self.spec.window_s
            return Window(k, k * w, (k + 1) * w, k * w, (k + 1) * w, None, "url")
        return self.windows[(self.offset + k) % len(self.windows)]

    def question(self, k: int) -> str:
        """The question of request ``k`` (round-robin)."""
        qs = self.spec.questions
        return qs[(self.offset + k) % len(qs)]


def prepare_feeds(settings: RunSettings) -> list[Feed]:
    """Cuts every camera's source into windows (once per source and window length).

    Raises:
        loadtest.camera.WindowCutError: a source cannot be cut.
    """
    feeds = []
    t = time.perf_counter()
    for i, cam in enumerate(settings.cameras):
        if is_url(cam.source) and cam.duration_s is None:
            feeds.append(Feed(cam, None, 0))
            continue
        windows = source_windows(cam.source, cam.window_s, transport=settings.transport, duration_s=cam.duration_s,
                                 exact=settings.api == "openai")
        feeds.append(Feed(cam, windows, i % len(windows)))
    logger.info("prepared %d feeds in %.2f s", len(feeds), time.perf_counter() - t)
    return feeds


class Runner:
    """Drives the feeds against the target and collects :class:`RequestRecord` s.

    Args:
        settings: the run.
        feeds: from :func:`prepare_feeds` (same camera order as ``settings.cameras``).
        client_factory: returns the ``httpx.AsyncClient`` (tests may inject transports).
        clock: monotonic seconds (any origin); ``time.perf_counter`` by default, the event
            loop's ``time`` in virtual-time tests.
        on_record: called with each record when its request has ended (answered, failed or
            given up), e.g. to log or stream progress.
    """

    def __init__(
        self, settings: RunSettings, feeds: list[Feed],
        client_factory: Callable[[RunSettings], httpx.AsyncClient] = make_client,
        clock: Callable[[], float] = time.perf_counter,
        on_record: Callable[[RequestRecord], None] | None = None,
    ):
        if len(feeds) != len(settings.cameras):
            raise ValueError("one feed per camera")
        self.settings = settings
        self.feeds = feeds
        self.client_factory = client_factory
        self.on_record = on_record
        self.records: list[RequestRecord] = []
        self.inflight = 0
        self.phase = "idle"  # idle → sending → draining → done
        self._now = clock
        self._t0: float | None = None
        self._main: asyncio.Future[Any] | None = None
        self._sending = True
        self._stopped = False

    def clock(self) -> float:
        """Seconds since the run started (0 before it starts)."""
        return 0.0 if self._t0 is None else self._now() - self._t0

    def stop(self, drain: bool = False) -> None:
        """Ends the run early: nothing more is sent.

        Args:
            drain: wait for the requests in flight (up to the run's drain deadline) instead of
                cancelling them at once (then they are recorded ``unfinished``).
        """
        self._sending = False
        if drain:
            return
        self._stopped = True
        if self._main is not None and not self._main.done():
            self._main.cancel()

    async def run(self) -> list[RequestRecord]:
        """Runs to completion; returns the records in send order."""
        s = self.settings
        url = s.effective_route
        async with self.client_factory(s) as client:
            self._t0 = self._now()
            tasks: set[asyncio.Task[None]] = set()
            self.phase = "sending"
            main: asyncio.Future[Any]
            if s.schedule == "closed":
                n = s.concurrency or len(self.feeds)
                main = asyncio.ensure_future(asyncio.gather(*(self._worker(client, url, w, tasks) for w in range(n))))
            else:
                arrivals = plan(s.schedule, s.intervals_s(), s.duration_s, stagger=s.stagger,
                                max_requests=s.max_requests, seed=s.seed)
                main = asyncio.ensure_future(self._dispatch_all(client, url, arrivals, tasks))
            self._main = main
            deadline_s = s.duration_s + s.effective_drain_s
            await asyncio.wait({main}, timeout=max(0.0, deadline_s - self.clock()))
            if not main.done():  # closed loop stuck on a slow answer
                main.cancel()
            self.phase = "draining"
            while tasks and not self._stopped and self.clock() < deadline_s:
                await asyncio.wait(set(tasks), timeout=min(0.25, max(0.0, deadline_s - self.clock())))
            for t in list(tasks):
                t.cancel()
            if tasks:
                await asyncio.wait(set(tasks))
            error = None if main.cancelled() else main.exception()
            if error is not None:
                raise error
            self.phase = "done"
        return self.records

    def _questions(self, cam: int) -> list[int | None]:
        """Question indexes sent per window: all of the camera's (``all_questions``), else one round-robin."""
        if self.settings.all_questions and self.feeds[cam].requests is None:
            return list(range(len(self.feeds[cam].spec.questions)))
        return [None]

    def _new_record(
        self, cam: int, k: int, scheduled_s: float, window_end_s: float, deadline_s: float,
        question: int | None = None,
    ) -> RequestRecord:
        rec = RequestRecord(
            seq=len(self.records), camera_id=self.feeds[cam].spec.id, window_index=self.feeds[cam].window(k).index,
            warmup=scheduled_s < self.settings.warmup_s, scheduled_s=scheduled_s, sent_s=self.clock(),
            window_end_s=window_end_s, deadline_s=deadline_s, question_index=question,
        )
        self.records.append(rec)
        return rec

    async def _send(self, client: httpx.AsyncClient, url: str, cam: int, k: int, rec: RequestRecord) -> None:
        feed = self.feeds[cam]
        self.inflight += 1
        try:
            req = feed.request(k, self.settings, rec.question_index)
            await send(client, url, req, rec, self.clock, self.settings.stream)
        except asyncio.CancelledError:
            rec.error_kind = "unfinished"
            rec.stopped_s = self.clock()
            rec.error_message = "still running when the run stopped"
        finally:
            self.inflight -= 1
            if self.on_record is not None:
                self.on_record(rec)

    def _start(
        self, client: httpx.AsyncClient, url: str, cam: int, k: int, rec: RequestRecord, tasks: set[asyncio.Task[None]]
    ) -> asyncio.Task[None]:
        task = asyncio.create_task(self._send(client, url, cam, k, rec))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    async def _sleep_until(self, at_s: float) -> None:
        # uvloop's timers have 1-ms resolution and may fire early: never send before the planned time
        # (within 1 µs: a shorter sleep may return without the clock moving, e.g. in virtual time)
        while self._sending and (delay := at_s - self.clock()) > 1e-6:
            await asyncio.sleep(delay)

    async def _dispatch_all(
        self, client: httpx.AsyncClient, url: str, arrivals: list[Arrival], tasks: set[asyncio.Task[None]]
    ) -> None:
        for a in arrivals:
            await self._sleep_until(a.at_s)
            if not self._sending:
                return
            for question in self._questions(a.camera):  # all of a window's questions leave together
                rec = self._new_record(a.camera, a.k, a.at_s, a.at_s, a.deadline_s, question)
                self._start(client, url, a.camera, a.k, rec, tasks)

    def _more(self) -> bool:
        s = self.settings
        return self._sending and self.clock() < s.duration_s and len(self.records) < s.max_requests

    async def _worker(self, client: httpx.AsyncClient, url: str, w: int, tasks: set[asyncio.Task[None]]) -> None:
        s = self.settings
        n_cams = len(self.feeds)
        n = s.concurrency or n_cams
        pace_s = s.interval_s  # closed loop: a worker's minimum gap between sends (None: back to back)
        next_s = phases(n, [pace_s] * n, s.stagger)[w] if pace_s else 0.0
        q = w
        while True:
            cam, k = q % n_cams, q // n_cams
            if pace_s:
                await self._sleep_until(next_s)
            if not (self._more() and self.feeds[cam].has(k)):
                return
            planned = next_s if pace_s else self.clock()
            started = [
                self._start(client, url, cam, k, self._new_record(
                    cam, k, planned, planned, pace_s or self.feeds[cam].spec.window_s, question), tasks)
                for question in self._questions(cam)
            ]
            await asyncio.shield(asyncio.gather(*started))
            if pace_s:
                next_s = max(next_s + pace_s, self.clock())
            q += n
