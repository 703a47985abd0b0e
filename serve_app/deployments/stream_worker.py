"""The stream-worker deployment: reads every registered camera and hands windows to the model.

A deployment of its own, so camera readers never occupy the decode replicas that serve one-off
clips. One replica (``stream_worker.num_replicas: 1``) owns its streams; with ``streams.workers: N``
the app builds N such deployments (``StreamWorker``, ``StreamWorker1``, …), worker ``k`` owning the
streams whose id hashes to ``k`` (:mod:`serve_app.cameras.shards`). The state lives in the SQLite
database at ``streams.db_path`` (one file for all workers), so a replacement replica (after a crash, a
``ray.kill``, or ``serve run`` again) resumes its registered streams in its constructor.
The work is in the Ray-free :class:`~serve_app.cameras.registry.StreamRegistry`; the model is
called through its handle with the window's :class:`~serve_app.protocol.DecodedClip` (the
same ``generate`` stream one-off clips use). Values, not exceptions, leave this deployment:
every method returns a pydantic model or an :class:`~serve_app.errors.ErrorInfo`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any

import ray
from ray import ObjectRef, serve
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from serve_app.cameras.memory import fix_mmap_threshold, release_freed_memory
from serve_app.cameras.protocol import AnswerEvent, Deleted, EventBatch, StreamCreate, StreamList, StreamStatus
from serve_app.cameras.registry import StreamRegistry
from serve_app.cameras.store import StreamStore
from serve_app.cameras.webhook import Webhooks
from serve_app.config import AppConfig
from serve_app.decode.vision_patches import bf16_table
from serve_app.errors import ErrorInfo, ServeAppError
from serve_app.log_limit import get_logger
from serve_app.metrics import StreamMetrics
from serve_app.protocol import ClipQuestion, DecodedClip, ModelChunk

logger = get_logger(__name__)


@serve.deployment(name="StreamWorker")
class StreamWorker:
    """Owns the registered streams (see the module docstring).

    Args:
        config: the application config (as a dict).
        model: handle of :class:`serve_app.deployments.model.VideoModel`.
        shard: this worker's index among ``streams.workers``.
    """

    async def __init__(self, config: dict[str, Any], model: DeploymentHandle[Any], shard: int = 0) -> None:  # type: ignore[misc]  # Serve awaits async constructors
        self.config = AppConfig.model_validate(config)
        self.model = model
        fix_mmap_threshold()  # frame buffers go back to the system when freed (serve_app/cameras/memory.py)
        if self.config.model.vision_input == "patches":
            bf16_table()  # imports torch now (~4 s on a fresh replica), not on the first window
        self.store = StreamStore(self.config.streams.db_path, keep=self.config.streams.answer_history)
        metrics = StreamMetrics()
        self.webhooks = Webhooks(self.config, metrics=metrics)
        self.registry = StreamRegistry(
            self.config, self._ask, self.store, metrics, self.webhooks,
            prepare=ray.put, release_memory=release_freed_memory, shard=shard,
        )  # fmt: skip
        n = self.registry.resume()
        logger.info("stream worker %d of %d ready: %d stream(s) resumed from %s", shard, self.config.streams.workers,
                    n, self.config.streams.db_path)  # fmt: skip

    async def _ask(self, question: ClipQuestion, clip: ObjectRef[DecodedClip]) -> AsyncIterator[ModelChunk]:
        # The window's clip is in Ray's object store (put once per window): the model replica reads it there.
        stream = self.model.options(stream=True).generate.remote(question, clip)
        assert isinstance(stream, DeploymentResponseGenerator)  # options(stream=True)
        try:
            async for chunk in stream:
                yield chunk
        finally:
            stream.cancel()  # type: ignore[no-untyped-call]  # ray 2.60: _DeploymentResponseBase.cancel is unannotated

    async def create(self, spec: StreamCreate) -> StreamStatus | ErrorInfo:
        """Registers a stream (spec validated by the ingress)."""
        try:
            return self.registry.create(spec)
        except ServeAppError as e:
            return e.info()

    async def list(self) -> StreamList:
        """Every stream."""
        return StreamList(data=self.registry.list())

    async def get(self, stream_id: str) -> StreamStatus | ErrorInfo:
        """One stream's status."""
        try:
            return self.registry.status(stream_id)
        except ServeAppError as e:
            return e.info()

    async def delete(self, stream_id: str) -> Deleted | ErrorInfo:
        """Stops and removes a stream."""
        try:
            await self.registry.delete(stream_id)
            return Deleted(id=stream_id)
        except ServeAppError as e:
            return e.info()

    async def events(self, after: int | None, stream_id: str | None, timeout_s: float) -> EventBatch | ErrorInfo:
        """Events after ``after`` (long poll up to ``timeout_s``)."""
        try:
            return await self.registry.wait_events(after, stream_id, timeout_s)
        except ServeAppError as e:
            return e.info()

    async def thumbnail(self, stream_id: str) -> bytes | ErrorInfo | None:
        """The newest window thumbnail (JPEG) of a stream, None before the first answer."""
        if stream_id not in self.registry.streams:
            return ErrorInfo(404, "not_found", "no stream with this id (see GET /v1/streams)", "id")
        return self.store.thumbnail(stream_id)

    async def answers(self, stream_id: str, limit: int) -> tuple[AnswerEvent, ...] | ErrorInfo:
        """The stored answer history (newest first, at most ``streams.answer_history``), as frozen events."""
        if stream_id not in self.registry.streams:
            return ErrorInfo(404, "not_found", "no stream with this id (see GET /v1/streams)", "id")
        return self.store.answers(stream_id, limit)

    def __del__(self) -> Awaitable[None] | None:
        """Serve's shutdown hook: returns the readers' shutdown for Serve to await (definitions stay in
        the database); later calls (the garbage collector's) find nothing and do nothing."""
        registry = self.__dict__.pop("registry", None)
        return None if registry is None else registry.close()
