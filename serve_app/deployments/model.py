"""The model deployment: one engine per replica, streaming results as values.

``generate`` receives the decoder's result directly (the ingress passes the
decoder's ``DeploymentResponse`` through, so frames go from the decode
replica to this one without a stop in the ingress) and yields plain dicts:

* ``{"type": "clip", "video": {...}, "warnings": [...], "decode_ms": ...}`` first,
  or ``{"type": "error", "error": ErrorInfo}`` (then nothing else);
* ``{"type": "delta", "text": "...", "completion_tokens": n}`` as tokens arrive;
* ``{"type": "done", "finish_reason": ..., "prompt_tokens": ..., ...}`` last.
"""

from __future__ import annotations

import contextlib
import logging
import time

import numpy as np
from ray import serve

from serve_app.config import AppConfig
from serve_app.decoder import DecodedClip, describe
from serve_app.engine_limits import check_context, engine_error, text_tokens_estimate
from serve_app.engines.base import GenerationRequest, SamplingOptions, create_engine
from serve_app.errors import ErrorInfo, InvalidRequestError
from serve_app.metrics import ModelMetrics
from serve_app.prompt import render_prompt
from serve_app.streaming import coalesce_deltas

logger = logging.getLogger("ray.serve")


@serve.deployment(name="VideoModel")
class VideoModel:
    """Answers questions about decoded clips with the configured engine.

    Args:
        config: the application config (as a dict, as Serve passes it).
    """

    async def __init__(self, config: dict):
        self.config = AppConfig.model_validate(config)
        self.metrics = ModelMetrics()
        t0 = time.perf_counter()
        self.engine = create_engine(self.config.model)
        await self.engine.start()
        if self.config.model.warmup:
            await self._warmup()
        self.start_s = time.perf_counter() - t0
        logger.info(
            "model replica ready in %.1f s (backend %s, model %s, random weights %s)",
            self.start_s,
            self.config.model.backend,
            self.config.model.name,
            self.engine.random_weights,
        )

    async def _warmup(self) -> None:
        frames = np.zeros((2, 336, 336, 3), dtype=np.uint8)  # 336² ≥ the 128·28² minimum frame area
        req = GenerationRequest(
            request_id="warmup",
            frames=frames,
            fps=self.config.decode.fps,
            prompt=render_prompt("warm-up", self.config.model.system_prompt),
            sampling=SamplingOptions(max_tokens=2, temperature=0.0, top_p=1.0, repetition_penalty=1.0),
        )
        async for _ in self.engine.generate(req):
            pass

    def replica_start_s(self) -> float:
        """Seconds this replica took to start (engine load and warm-up)."""
        return self.start_s

    async def generate(self, request_id: str, clip: DecodedClip | ErrorInfo, question: str, sampling: SamplingOptions):
        """Streams the answer for one decoded clip (see the module docstring for the chunk shapes).

        Deltas are merged per ``model.stream_interval_ms`` (see :mod:`serve_app.streaming`).
        """
        chunks = self._chunks(request_id, clip, question, sampling)
        interval_s = self.config.model.stream_interval_ms / 1000
        async with contextlib.aclosing(coalesce_deltas(chunks, interval_s)) as stream:
            async for chunk in stream:
                yield chunk

    async def _chunks(self, request_id: str, clip: DecodedClip | ErrorInfo, question: str, sampling: SamplingOptions):
        if isinstance(clip, ErrorInfo):
            yield {"type": "error", "error": clip}
            return
        cfg = self.config
        try:  # security: a clip that cannot fit the context is 400 before the engine (issue 13)
            n_video = check_context(
                clip.num_frames, clip.frames.shape[1], clip.frames.shape[2],
                text_tokens_estimate(cfg.model.system_prompt, question), cfg.model.context_tokens,
            )
        except InvalidRequestError as e:
            yield {"type": "error", "error": e.info()}
            return
        yield {
            "type": "clip",
            "video": describe(clip),
            "warnings": clip.warnings,
            "decode_ms": clip.decode_ms,
            "video_tokens": n_video,
            "model": cfg.model.name,
            "random_weights": self.engine.random_weights,
        }
        req = GenerationRequest(
            request_id=request_id,
            frames=clip.frames,
            fps=clip.fps,
            prompt=render_prompt(question, cfg.model.system_prompt),
            sampling=sampling,
        )
        t0 = time.perf_counter()
        queue_ms = None
        ttft_ms = None
        finished = False
        outcome = "abort"  # unless the stream finishes or fails: the consumer went away
        n_tokens = 0
        queued = True
        self.metrics.enqueued()
        try:
            async for chunk in self.engine.generate(req):
                if chunk.queue_ms is not None:
                    queue_ms = chunk.queue_ms
                    if queued:
                        queued = False
                        self.metrics.dequeued(queue_ms)
                if chunk.text:
                    if ttft_ms is None:
                        ttft_ms = (time.perf_counter() - t0) * 1000
                    n_tokens = chunk.completion_tokens
                    yield {"type": "delta", "text": chunk.text, "completion_tokens": chunk.completion_tokens}
                if chunk.finished:
                    finished = True
                    total_ms = (time.perf_counter() - t0) * 1000
                    outcome = chunk.finish_reason or "stop"
                    self.metrics.done(
                        outcome,
                        model_ms=total_ms - (queue_ms or 0.0),
                        ttft_ms=ttft_ms,
                        prompt_tokens=chunk.prompt_tokens,
                        completion_tokens=chunk.completion_tokens,
                    )
                    yield {
                        "type": "done",
                        "finish_reason": chunk.finish_reason,
                        "prompt_tokens": chunk.prompt_tokens,
                        "completion_tokens": chunk.completion_tokens,
                        "queue_ms": queue_ms,
                        "model_ms": total_ms - (queue_ms or 0.0),
                        "ttft_ms": ttft_ms,
                    }
        except Exception as e:  # noqa: BLE001 - one mapping: request's fault 400, engine's 503, else 500
            outcome = "error"
            yield {"type": "error", "error": engine_error(e, request_id, cfg.limits.retry_after_s)}
        finally:
            if queued:
                self.metrics.dequeued(None)
            if not finished:  # cancelled (client went away) or failed: free the engine slot
                self.metrics.done(outcome, completion_tokens=n_tokens)
                if outcome == "abort":
                    logger.info("request %s: cancelled after %d tokens; aborting it in the engine", request_id, n_tokens)
                await self.engine.abort(request_id)

    def num_unfinished(self) -> int:
        """Requests the engine still holds (0 once every client is served or gone)."""
        return self.engine.num_unfinished()

    async def check_health(self) -> None:
        """Serve's health check: raises when the engine is dead, so the replica is replaced."""
        await self.engine.check_health()
