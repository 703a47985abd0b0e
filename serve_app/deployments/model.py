"""The model deployment: one engine per replica, streaming typed chunks.

``generate`` receives a :class:`~serve_app.protocol.ClipQuestion` and the decoder's
result: the ingress hands this deployment the decode's object ref, so Ray resolves
it here and the frames go from the decode replica to this one without a stop in the
ingress. The chunks (:data:`~serve_app.protocol.ModelChunk`) come from the Ray-free
:func:`serve_app.model.generation.answer_stream`, merged per ``model.stream_interval_ms``
(:mod:`serve_app.model.coalesce`). The engine is shut down when the replica stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
import signal
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any

import numpy as np
from ray import serve

from serve_app.config import AppConfig
from serve_app.decode.vision_patches import patchify
from serve_app.log_limit import get_logger
from serve_app.metrics import ModelMetrics
from serve_app.model.coalesce import coalesce_deltas
from serve_app.model.engines.base import Engine, GenerationRequest
from serve_app.model.engines.factory import create_engine
from serve_app.model.generation import answer_stream, new_engine_request_id
from serve_app.model.gpu_start_lock import gpu_start_lock
from serve_app.model.loop_lag import LOOP_LAG_ENV, append_to, watch_loop_lag
from serve_app.model.prompt import render_prompt
from serve_app.model.sampling_options import sampling_options
from serve_app.protocol import ClipQuestion, DecodedClip, ErrorInfo, ModelChunk

logger = get_logger(__name__)

#: When set (to anything), a model replica prints every thread's Python stack to stderr on SIGUSR1
#: (Ray forwards it to the driver's log): how the lifecycle bench looks inside a slow start where
#: py-spy cannot attach.
STACKS_ENV = "COSMOS_SERVE_STACKS_ON_SIGUSR1"


def warmup_requests(config: AppConfig, template: str | None = None) -> list[GenerationRequest]:
    """The replica's warm-up requests: ``model.warmup_clips`` zero clips, each with its own id.

    Each id is also the clip's prefix-cache salt (:func:`serve_app.model.engines.vllm_inputs.engine_prompt`), so
    every clip is prefilled in full, as a burst of real windows is (without the salt vLLM served 31 of the 32
    identical zero clips from its prefix cache on an H200, 2026-12-02).

    Each clip is ``model.warmup_clip_shape`` (T, H, W) uint8 zeros at ``decode.fps`` (as patches when
    ``model.vision_input`` is ``patches``: the path real clips take), with the model's sampling defaults
    and ``model.warmup_max_tokens`` output tokens (end-of-sequence ignored). All requests share one
    pixel array (``(T, H, W, 3) uint8``, or one :class:`VisionPatches`): engines must not write to it.

    ``template`` is the engine's checkpoint chat template (default: the family's copy).

    Raises:
        ValueError: the shape is one the vision processor would resize (see :func:`patchify`).
    """
    m = config.model
    return _clips(config, m.warmup_clip_shape, [m.warmup_max_tokens] * m.warmup_clips, template)


def sweep_clip_shape(config: AppConfig) -> tuple[int, int, int]:
    """The decode sweep's tiny clip (frames, height, width): 2 frames of 2×2 merged patches (4 video
    tokens), the smallest the processor keeps: 56×56 px for Qwen2.5-VL, 64×64 for Qwen3-VL."""
    side = 2 * config.model.geometry.pixel_factor
    return (2, side, side)


def decode_sweep_requests(config: AppConfig, template: str | None = None) -> list[GenerationRequest]:
    """The decode sweep (``model.warmup_decode_sweep`` = N): N tiny clips of :func:`sweep_clip_shape`,
    clip i asking for i+1 output tokens, so the decode batch shrinks from N to 1 one step at a time and
    every batch size runs once. Empty when N is 0."""
    n = config.model.warmup_decode_sweep
    return _clips(config, sweep_clip_shape(config), list(range(1, n + 1)), template)


def _clips(
    config: AppConfig, shape: tuple[int, int, int], max_tokens: list[int], template: str | None = None
) -> list[GenerationRequest]:
    """One warm-up request per entry of ``max_tokens``: zero clips of ``shape`` sharing one pixel array."""
    m = config.model
    frames = np.zeros((*shape, 3), dtype=np.uint8)
    patches = patchify(frames, config.decode.fps) if m.vision_input == "patches" else None
    prompt = render_prompt("warm-up", m.system_prompt, family=m.family, template=template)
    return [
        GenerationRequest(
            request_id=new_engine_request_id(), frames=None if patches else frames, patches=patches,
            fps=config.decode.fps, prompt=prompt,
            # every clip decodes all its tokens: the batch shapes happen
            sampling=sampling_options(m.sampling, max_tokens=n, ignore_eos=True),
        )
        for n in max_tokens
    ]


@serve.deployment(name="VideoModel")
class VideoModel:
    """Answers questions about decoded clips with the configured engine.

    Args:
        config: the application config (as a dict, as Serve passes it).
    """

    async def __init__(self, config: dict[str, Any]) -> None:  # type: ignore[misc]  # Serve awaits async constructors
        if os.environ.get(STACKS_ENV):
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        self.config = AppConfig.model_validate(config)
        self.metrics = ModelMetrics()
        t0 = time.perf_counter()
        self.engine = create_engine(self.config.model)
        # Replicas that share this GPU start one at a time (vLLM's memory profile assumes nobody else's
        # memory changes meanwhile): serve_app/model/gpu_start_lock.py.
        async with gpu_start_lock() as self.start_lock_wait_s:
            await self.engine.start()
            if self.config.model.warmup:
                await self._warmup()
        self.start_s = time.perf_counter() - t0
        lag_path = os.environ.get(LOOP_LAG_ENV)
        # bench only: the event loop's lag, sampled from now on (serve_app/model/loop_lag.py)
        self._lag_task = asyncio.create_task(watch_loop_lag(append_to(lag_path))) if lag_path else None
        logger.info(
            "model replica ready in %.1f s (backend %s, model %s, random weights %s)",
            self.start_s,
            self.config.model.backend,
            self.config.model.name,
            self.engine.random_weights,
        )

    async def _warmup(self) -> None:
        """Sends ``model.warmup_clips`` zero clips of ``model.warmup_clip_shape`` through the engine at once.

        They use the sampling defaults of real requests (temperature, top-p, repetition penalty), so the
        sampler kernels real traffic needs are compiled here, not during the first burst of clips.

        Raises:
            Exception: the first error of any warm-up clip (the others are cancelled); the replica
                then fails to start, as with an engine that cannot load.
        """
        requests = warmup_requests(self.config, self.engine.chat_template)
        t0 = time.perf_counter()
        # The first clip alone: the engine's first input processing builds its HF processor, which several
        # preprocessing threads at once would each build in parallel under the GIL (66 s for 4 threads on the
        # H200, results/gpu/lifecycle), and real clips may never be the first to pay it.
        await self._run_all(requests[:1])
        first_s = time.perf_counter() - t0
        await self._run_all(requests[1:])
        clips_s = time.perf_counter() - t0
        sweep = decode_sweep_requests(self.config, self.engine.chat_template)
        await self._run_all(sweep)
        logger.info("warm-up: %d clips of %s in %.1f s (first clip alone %.1f s; decode sweep of %d: %.1f s)",
                    len(requests), self.config.model.warmup_clip_shape, time.perf_counter() - t0, first_s,
                    len(sweep), time.perf_counter() - t0 - clips_s)

    async def _run_all(self, requests: list[GenerationRequest]) -> None:
        """Runs ``requests`` through the engine at once, discarding the output.

        Raises:
            Exception: the first error of any request (the others are cancelled).
        """

        async def one(req: GenerationRequest) -> None:
            async for _ in self.engine.generate(req):
                pass

        try:
            async with asyncio.TaskGroup() as tg:  # one failure cancels the rest and fails the replica's start
                for r in requests:
                    tg.create_task(one(r))
        except ExceptionGroup as group:  # the engine's own error, as a single clip would raise it
            raise group.exceptions[0] from None

    def replica_start_s(self) -> float:
        """Seconds this replica took to start (engine load and warm-up)."""
        return self.start_s

    async def generate(self, question: ClipQuestion, clip: DecodedClip | ErrorInfo) -> AsyncIterator[ModelChunk]:
        """Streams the answer to ``question`` about one decoded clip (chunks: :mod:`serve_app.protocol`).

        Deltas are merged per ``model.stream_interval_ms`` (see :mod:`serve_app.model.coalesce`).
        """
        chunks = answer_stream(
            self.engine,
            question,
            clip,
            model_name=self.config.model.name,
            system_prompt=self.config.model.system_prompt,
            metrics=self.metrics,
            max_model_len=self.config.model.context_tokens,  # security: context check (issue 13)
            retry_after_s=self.config.limits.retry_after_s,
            family=self.config.model.family,
        )
        interval_s = self.config.model.stream_interval_ms / 1000
        coalesced: AsyncGenerator[ModelChunk, None] = coalesce_deltas(chunks, interval_s)
        async with contextlib.aclosing(coalesced) as stream:
            async for chunk in stream:
                yield chunk

    def num_unfinished(self) -> int:
        """Requests the engine still holds (0 once every client is served or gone)."""
        return self.engine.num_unfinished()

    async def check_health(self) -> None:
        """Serve's health check: raises when the engine is dead, so the replica is replaced."""
        await self.engine.check_health()

    def __del__(self) -> Awaitable[None] | None:
        """Serve's shutdown hook: when the replica stops, Serve calls this and awaits what it returns
        (the engine's shutdown). Later calls (the garbage collector's) find no engine and do nothing."""
        lag_task = self.__dict__.pop("_lag_task", None)
        if lag_task is not None:
            lag_task.cancel()
        engine = self.__dict__.pop("engine", None)
        return None if engine is None else self._shutdown(engine)

    @staticmethod
    async def _shutdown(engine: Engine) -> None:
        await engine.shutdown()
        logger.info("model replica stopped: engine shut down")
