"""The GPU engine: vLLM ``AsyncLLM`` (continuous batching) behind the engine interface.

Engine arguments come from ``model.engine_args`` and reach
``AsyncEngineArgs`` unchanged (checked offline against vLLM 0.24.0's names,
see :func:`serve_app.model.engines.vllm_startup.unknown_engine_args`). What each request hands vLLM
(the prompt with its clip and processor kwargs, the sampling parameters) is made by
:mod:`serve_app.model.engines.vllm_inputs`; the per-request stage timings by
:mod:`serve_app.model.engines.vllm_timings`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from serve_app.config import ModelConfig
from serve_app.config.families import check_family
from serve_app.decode.vision_patches import patchify_fields
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.model.checkpoint import ensure_checkpoint, has_random_weights
from serve_app.model.engines import engine_process
from serve_app.model.engines.base import Engine, EngineDeadError, GenerationChunk, GenerationRequest
from serve_app.model.engines.clip_fields import ClipFieldsCache
from serve_app.model.engines.prefill_gate import PrefillGate
from serve_app.model.engines.vllm_inputs import engine_prompt, handoff_pixels, sampling_params
from serve_app.model.engines.vllm_patches import accept_processed_video, share_tokenizer_pools
from serve_app.model.engines.vllm_startup import build_async_llm, cache_state, compile_cache_env
from serve_app.model.engines.vllm_timings import TIMINGS_ENV, engine_ts, timings_row
from serve_app.model.engines.vllm_window_attention import inactive_reason
from serve_app.model.family import checkpoint_chat_template

logger = get_logger(__name__)


class VLLMEngine(Engine):
    """vLLM ``AsyncLLM`` on one replica's GPU(s).

    Args:
        config: model settings; ``engine_args`` pass to ``AsyncEngineArgs``
            unchanged; ``processor_kwargs`` are added to every request's
            processor kwargs (e.g. ``{"device": "cuda"}``).
    """

    def __init__(self, config: ModelConfig):
        self.config = config
        self.llm: Any = None  # vllm.v1.engine.async_llm.AsyncLLM once started (vLLM is untyped here)
        self._pool: ThreadPoolExecutor | None = None
        self._tasks: Any = None  # the model's supported tasks, as vLLM reports them
        self._timings_path: str | None = None
        self._stats_task: asyncio.Task[None] | None = None
        #: a clip's later questions go to the engine core once its first one has prefilled (they reuse it)
        self._gate = PrefillGate()
        #: a clip's questions patchify its frames once (``model.patchify: table``)
        self._clip_fields: ClipFieldsCache[dict[str, Any]] = ClipFieldsCache()
        #: seconds of each start phase (``import``: preflight and vLLM's import; ``engine``: AsyncLLM's
        #: build, engine-core process, model load, compile, CUDA graphs)
        self.phases_s: dict[str, float] = {}
        #: torch device of the table patchify (``model.patchify: table``), else None (HF processor)
        self._table_device: str | None = (
            str(config.processor_kwargs.get("device", "cpu")) if config.patchify == "table" else None
        )

    async def start(self) -> None:
        """Builds ``AsyncLLM`` (model load, profiling, CUDA graphs).

        Raises:
            serve_app.model.preflight.HardwareError: no vLLM or no CUDA GPU here, another process holds the GPU's
                memory, or fp8 (``quantization: fp8``, or an fp8 ``quantization_config`` of the checkpoint or of
                ``hf_overrides``) on a GPU below compute capability 8.9 (at once, before any import of vLLM).
        """
        from serve_app.model.preflight import (
            VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
            check_fp8,
            check_gpu_free,
            check_replica,
        )
        from serve_app.model.quantization import model_fp8_source

        t_start = time.perf_counter()
        check_replica()
        args = dict(self.config.engine_args)
        check_gpu_free(float(args.get("gpu_memory_utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION)))
        check_fp8(model_fp8_source(args, self.config.model_id))
        cache = self.config.compile_cache_dir
        if cache:
            os.environ.update(compile_cache_env(cache))  # before vLLM's import; the engine core inherits it
        cache_root = os.environ.get("VLLM_CACHE_ROOT", os.path.expanduser("~/.cache/vllm"))
        compile_cache = cache_state(cache_root)
        forkserver = self.config.engine_process == "forkserver" and not args.get("numa_bind")
        if forkserver:
            engine_process.start_server()  # imports vLLM there while this process imports it below
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        from serve_app.model.engines import engine_watch

        # the engine core ends with this replica, however it dies (and runs per-window attention when asked)
        engine_watch.install(window_attention=self.config.window_cascade_attention)
        if forkserver:
            engine_process.install()
        share_tokenizer_pools()  # before AsyncLLM builds its HF processor (the engine core does it too)
        self.phases_s["import"] = time.perf_counter() - t_start
        model = self.config.model_id
        if self.config.checkpoint:
            model = str(ensure_checkpoint(self.config.checkpoint, model, self.config.family))
        if self.config.window_cascade_attention:
            args["disable_cascade_attn"] = False  # vLLM 0.24 skips the runner's cascade step (the plan's hook) else
        if self.config.vision_input == "patches" or self.config.patchify == "table":
            accept_processed_video()
            args.setdefault("enable_mm_embeds", True)  # vLLM checks it for every pass-through item
        if args.get("mm_tensor_ipc") == "torch_shm":
            # vLLM refuses torch_shm unless its processes are spawned (vllm/config/vllm.py:
            # "torch_shm is known to fail without VLLM_WORKER_MULTIPROC_METHOD set to spawn").
            os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        self._timings_path = os.environ.get(TIMINGS_ENV)
        self.random_weights = args.get("load_format") == "dummy" or (Path(model).is_dir() and has_random_weights(model))
        t0 = time.perf_counter()
        engine_args = AsyncEngineArgs(model=model, served_model_name=self.config.name, **args)
        self.llm = build_async_llm(engine_args, AsyncLLM, self.config.encoder_cache_tokens, UsageContext.ENGINE_CONTEXT)
        if self.config.preprocess_threads > 0:
            self._pool = ThreadPoolExecutor(self.config.preprocess_threads, thread_name_prefix="mm-preprocess")
            self._tasks = await self.llm.get_supported_tasks()
        hf_config = getattr(getattr(self.llm, "model_config", None), "hf_config", None)
        try:
            check_family(
                getattr(hf_config, "architectures", None), self.config.family, "the checkpoint at model.model_id"
            )
        except ValueError:
            await self.shutdown()  # give the GPU back before the replica fails its start
            raise
        self.chat_template = checkpoint_chat_template(model) or await self._tokenizer_chat_template()
        if self.config.window_cascade_attention and (reason := inactive_reason(self.llm.vllm_config)):
            logger.warning("model.window_cascade_attention is on, but %s", reason)
        if self.config.log_stats_interval_s > 0:
            self._stats_task = asyncio.get_running_loop().create_task(
                log_stats_every(self.llm, self.config.log_stats_interval_s)
            )
        self.phases_s["engine"] = time.perf_counter() - t0
        logger.info(
            "vLLM AsyncLLM ready in %.1f s (%s, random weights %s; preflight + vLLM import %.1f s; compile cache %s; "
            "engine core %s)",
            self.phases_s["engine"],
            model,
            self.random_weights,
            self.phases_s["import"],
            compile_cache,
            "forked from the preloaded fork server" if forkserver else "spawned",
        )

    async def _tokenizer_chat_template(self) -> str | None:
        """The chat template of the tokenizer vLLM loaded (a hub checkpoint: from its own files); None if it
        has none (the family's copy is used then, and logged)."""
        try:
            template = getattr(await self.llm.get_tokenizer(), "chat_template", None)
        except Exception as e:  # noqa: BLE001 - the family's copy still renders the prompt
            logger.warning("could not read the tokenizer's chat template (%s): using the family's copy", e)
            return None
        if not isinstance(template, str):
            logger.warning("the checkpoint has no chat template: using the %s family's copy", self.config.family)
            return None
        return template

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Streams one request's output (see :class:`Engine`)."""
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMDead

        if self.llm is None or self.llm.errored:
            raise EngineDeadError("vLLM engine is not running")
        params = sampling_params(request.sampling)
        t_submit = time.perf_counter()
        stage: dict[str, float] = {}
        engine_input: Any
        if self._pool is not None:
            # Normalize + patchify (HF processor or table) off the event loop, several clips at once.
            engine_input = await asyncio.get_running_loop().run_in_executor(
                self._pool, self._process, request, params, stage
            )
        else:
            engine_input = self._prompt(request, stage)
        stage["gate_start"] = time.perf_counter()
        # The clip's other questions: after its first one's prefill (model.prefill_hold), while vLLM tracks at
        # least model.prefill_hold_min_requests unfinished requests (0: always).
        least = self.config.prefill_hold_min_requests
        busy = least == 0 or self.num_unfinished() >= least
        release = await self._gate.turn(request.clip_id if self.config.prefill_hold else None, wait=busy)
        t_engine = time.perf_counter()
        n_out = 0
        prompt_tokens: int | None = None
        cached_tokens: int | None = None
        m: Any = None  # vLLM's RequestStateStats of the last output
        first_s: float | None = None  # perf_counter when this generator got its first and its latest output
        last_s = 0.0
        try:
            async for out in self.llm.generate(engine_input, params, request.request_id, prompt_text=request.prompt):
                last_s = time.perf_counter()
                first_s = last_s if first_s is None else first_s
                release()  # the first output: the prompt's blocks are written
                if prompt_tokens is None and out.prompt_token_ids is not None:
                    prompt_tokens = len(out.prompt_token_ids)
                if out.num_cached_tokens is not None:
                    cached_tokens = out.num_cached_tokens
                comp = out.outputs[0]
                n_out += len(comp.token_ids)
                chunk = GenerationChunk(text=comp.text, completion_tokens=n_out, prompt_tokens=prompt_tokens)
                m = out.metrics
                if engine_ts(m, "scheduled_ts") and engine_ts(m, "queued_ts"):
                    chunk.queue_ms = max(0.0, (m.scheduled_ts - m.queued_ts) * 1000)
                if out.finished:
                    chunk.finished = True
                    chunk.finish_reason = comp.finish_reason or "stop"  # vLLM's own: stop, length, abort
                yield chunk
        except VLLMDead as e:
            raise EngineDeadError(str(e)) from e
        finally:
            release()  # failed, aborted or finished: the clip's other questions go now
            if self._timings_path:
                row = timings_row(request.request_id, t_submit, t_engine, stage, m, n_out, prompt_tokens, cached_tokens,
                                  None if first_s is None else [first_s, last_s])
                self._append_timings(self._timings_path, row)

    def _process(self, request: GenerationRequest, params: Any, stage: dict[str, float]) -> Any:
        """Runs the prompt's patchify (with ``patchify: table``) and vLLM's input processing
        (tokenize + HF processor) in a worker thread; returns vLLM's ``EngineCoreRequest``.

        ``stage`` receives the thread's start, the prompt's, the input processing's and the thread's end
        (``time.perf_counter`` seconds; :func:`serve_app.model.engines.vllm_timings.timings_row`) and the
        handed-over pixel bytes.
        """
        stage["thread_start"] = time.perf_counter()
        arrival_s = time.time()  # vLLM's arrival time covers the patchify too, as it covers the HF processor
        prompt = self._prompt(request, stage)
        stage["prompt_built"] = time.perf_counter()
        req = self.llm.input_processor.process_inputs(
            request.request_id, prompt, params, supported_tasks=self._tasks, arrival_time=arrival_s
        )
        stage["processed"] = time.perf_counter()
        stage["pixel_bytes"] = handoff_pixels(req, self.config.pixel_handoff)
        stage["thread_end"] = time.perf_counter()
        return req

    def _prompt(self, request: GenerationRequest, stage: dict[str, float]) -> dict[str, Any]:
        """The request's vLLM prompt (:func:`~serve_app.model.engines.vllm_inputs.engine_prompt`). With the
        table patchify, a clip's questions share one patchify (:class:`ClipFieldsCache`, by ``clip_id``);
        ``stage["patchify_reused"]`` is 1.0 when this request's came from another question's."""
        fields = None
        if self._table_device is not None and request.frames is not None:
            frames, fps, device = request.frames, request.fps, self._table_device
            fields, reused = self._clip_fields.get(request.clip_id, lambda: patchify_fields(frames, fps, device))
            stage["patchify_reused"] = float(reused)
        return engine_prompt(request, self.config.processor_kwargs, self._table_device, self.config.family, fields)

    @staticmethod
    def _append_timings(path: str, row: dict[str, Any]) -> None:
        """Appends one request's stage timings (a JSON line) to ``path`` (:data:`TIMINGS_ENV`)."""
        try:
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
        except OSError:
            logger.warning("could not append engine timings to %s", path)

    async def abort(self, request_id: str) -> None:
        """Aborts a request in vLLM (frees its KV cache and batch slot)."""
        if self.llm is not None:
            await self.llm.abort(request_id)

    def num_unfinished(self) -> int:
        """Requests vLLM's output processor still tracks (running or waiting)."""
        return 0 if self.llm is None else self.llm.output_processor.get_num_unfinished_requests()

    async def check_health(self) -> None:
        """Raises :class:`EngineDeadError` when vLLM's engine core has died."""
        if self.llm is None:
            raise EngineDeadError("vLLM engine not started")
        try:
            await self.llm.check_health()
        except Exception as e:  # vLLM raises its EngineDeadError
            raise EngineDeadError(f"vLLM engine dead: {e}") from e

    async def shutdown(self) -> None:
        """Shuts the engine core down."""
        if self._stats_task is not None:
            self._stats_task.cancel()
            self._stats_task = None
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)


async def log_stats_every(llm: Any, interval_s: float) -> None:
    """Calls ``llm.do_log_stats()`` every ``interval_s`` seconds until cancelled, as ``vllm serve``'s API
    server does (vLLM 0.24 ``AsyncLLM`` logs its stats only when asked: without this the replica's log has
    no prefix-cache or MM-cache hit rate). A failed call is logged and the loop goes on."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await llm.do_log_stats()
        except Exception:  # noqa: BLE001 - stats are best effort; the engine's health is checked elsewhere
            LOG_LIMIT.log(logger, logging.WARNING, "vllm stats", "vLLM do_log_stats failed", exc_info=True)
