"""A scripted engine with fault injection, for fault-tolerance tests and drills.

Load it with ``model.backend: serve_app.testing.engines:scripted_engine``. It
needs no weights: it "generates" ``max_tokens`` words (``tok0 tok1 …``) at
:data:`TOKEN_DELAY_S` per token, the first word naming the engine instance
(``engine-<hex>``) so a test can tell a replaced replica from the old one.

Faults are triggered by markers in the question:

* ``[die]``: the engine dies. The request fails with :class:`EngineDeadError`
  and :meth:`ScriptedEngine.check_health` fails from then on, so Serve's health
  check replaces the replica.

A slow start (a large model loading) is scripted with
``model.engine_args: {start_delay_s: S}``: :meth:`ScriptedEngine.start` sleeps S seconds.

:class:`RecordingEngine` (``serve_app.testing.engines:recording_engine``) records and answers
with the ids each request reaches the engine with.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

from serve_app.config import ModelConfig
from serve_app.log_limit import get_logger
from serve_app.model.engines.base import Engine, EngineDeadError, GenerationChunk, GenerationRequest

logger = get_logger(__name__)

#: Seconds per generated token (fast enough for tests, slow enough to be cancelled mid-stream).
TOKEN_DELAY_S = 0.01
DIE_MARKER = "[die]"


class ScriptedEngine(Engine):
    """A weightless engine whose failures are scripted by the question (see module docstring).

    Args:
        config: model settings: ``max_concurrent_requests`` (requests beyond it wait) and
            ``engine_args["start_delay_s"]`` (seconds :meth:`start` takes; default 0).
    """

    random_weights = True

    def __init__(self, config: ModelConfig):
        self.instance = "engine-" + uuid.uuid4().hex[:8]
        self._lock = asyncio.Semaphore(config.max_concurrent_requests)
        self._dead: str | None = None
        self._running: dict[str, asyncio.Event] = {}
        self._start_delay_s = float(config.engine_args.get("start_delay_s", 0.0))

    async def start(self) -> None:
        """Nothing to load; waits ``start_delay_s`` seconds to stand in for loading weights."""
        await asyncio.sleep(self._start_delay_s)
        logger.info("scripted engine %s started", self.instance)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Streams ``max_tokens`` words, or dies on ``[die]`` (raises :class:`EngineDeadError`)."""
        if self._dead:
            raise EngineDeadError(self._dead)
        t0 = time.perf_counter()
        cancel = self._running.setdefault(request.request_id, asyncio.Event())
        try:
            async with self._lock:
                yield GenerationChunk(queue_ms=(time.perf_counter() - t0) * 1000)
                if DIE_MARKER in request.prompt:
                    self._dead = f"{self.instance} died on request {request.request_id} (injected fault)"
                    logger.error("%s", self._dead)
                    raise EngineDeadError(self._dead)
                n = request.sampling.max_tokens
                prompt_tokens = request.num_frames + len(request.prompt.split())
                produced = 0
                for i in range(n):
                    if cancel.is_set():
                        break
                    await asyncio.sleep(TOKEN_DELAY_S)
                    produced = i + 1
                    text = f"{self.instance} " if i == 0 else f"tok{i} "
                    yield GenerationChunk(text=text, completion_tokens=produced, prompt_tokens=prompt_tokens)
                done = not cancel.is_set()
                yield GenerationChunk(
                    completion_tokens=produced,
                    prompt_tokens=prompt_tokens,
                    finished=True,
                    finish_reason="length" if done else "abort",
                )
        finally:
            self._running.pop(request.request_id, None)

    async def abort(self, request_id: str) -> None:
        """Stops a request at its next token."""
        ev = self._running.get(request_id)
        if ev:
            ev.set()

    def num_unfinished(self) -> int:
        """Requests running or waiting in this engine."""
        return len(self._running)

    async def check_health(self) -> None:
        """Raises :class:`EngineDeadError` once a ``[die]`` request killed the engine."""
        if self._dead:
            raise EngineDeadError(self._dead)


def scripted_engine(config: ModelConfig) -> ScriptedEngine:
    """The ``module:factory`` entry point: ``serve_app.testing.engines:scripted_engine``."""
    return ScriptedEngine(config)


class RecordingEngine(ScriptedEngine):
    """A scripted engine that records the ids each request reaches it with, and answers with them.

    Every request appends ``(request_id, media_uuid)`` to :attr:`seen` and its answer is
    ``"<request_id> <media_uuid>"`` (one chunk, ``finish_reason="stop"``), so a test over
    HTTP can read which ids the engine got. Load it with
    ``model.backend: serve_app.testing.engines:recording_engine``.
    """

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        #: ``(request_id, media_uuid)`` of every request, in arrival order.
        self.seen: list[tuple[str, str]] = []

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Records the request's ids and answers with them."""
        self.seen.append((request.request_id, request.media_uuid))
        prompt_tokens = request.num_frames + len(request.prompt.split())
        yield GenerationChunk(queue_ms=0.0)
        yield GenerationChunk(text=f"{request.request_id} {request.media_uuid}", completion_tokens=1,
                              prompt_tokens=prompt_tokens)
        yield GenerationChunk(completion_tokens=1, prompt_tokens=prompt_tokens, finished=True, finish_reason="stop")


def recording_engine(config: ModelConfig) -> RecordingEngine:
    """The ``module:factory`` entry point: ``serve_app.testing.engines:recording_engine``."""
    return RecordingEngine(config)
