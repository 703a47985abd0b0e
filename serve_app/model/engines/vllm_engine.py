"""The GPU engine: vLLM ``AsyncLLM`` (continuous batching) behind the engine interface.

Engine arguments come from ``model.engine_args`` and reach
``AsyncEngineArgs`` unchanged (checked offline against vLLM 0.24.0's names,
see :func:`unknown_engine_args`). Each request carries its clip as one
``(T, H, W, 3) uint8`` array already at the processor's exact size, plus the
true sampling fps as video metadata, so Qwen2.5-VL's temporal positions are
right (0.5 s per frame pair at 4 fps).

Why metadata and not ``mm_processor_kwargs={"fps": 4}``: with transformers
5.x the Qwen2.5-VL processor derives ``second_per_grid_ts`` from
``video_metadata.sampled_fps`` and falls back to 24 fps when no metadata is
given; a bare ``fps`` kwarg only drives frame *sampling*, which is off here
(``do_sample_frames=False``). vLLM 0.24's Qwen2-VL data parser drops
per-item metadata, so it is passed as a processor kwarg instead (vLLM
forwards processor kwargs to the HF processor call).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serve_app.config import ModelConfig
from serve_app.decode.vision_patches import patchify_fields
from serve_app.log_limit import get_logger
from serve_app.model.checkpoint import ensure_checkpoint, has_random_weights
from serve_app.model.engines import engine_process
from serve_app.model.engines.base import Engine, EngineDeadError, GenerationChunk, GenerationRequest
from serve_app.model.engines.vllm_patches import share_tokenizer_pools
from serve_app.protocol import SamplingOptions

if TYPE_CHECKING:
    from vllm import SamplingParams  # vLLM is installed only on the GPU machine: Any here

logger = get_logger(__name__)


#: Environment variable naming a JSON-lines file: when set, every request's stage timings
#: (preprocessing wait and run, engine queue, prefill, decode) are appended there. Used by
#: ``python -m benchmarks.gpu`` for the per-clip breakdown; off in production.
TIMINGS_ENV = "COSMOS_SERVE_ENGINE_TIMINGS"


def handoff_pixels(engine_request: Any, mode: str) -> int:
    """Prepares the processed pixel tensors of an ``EngineCoreRequest`` for the engine core.

    Args:
        engine_request: vLLM's ``EngineCoreRequest`` (its ``mm_features[i].data`` items hold
            ``pixel_values_videos``: ``(patches, 3·2·14·14)`` float32, on the GPU with the GPU processor).
        mode: ``as_is`` (nothing), ``bf16`` (cast to bfloat16 where the tensor is) or ``bf16_cpu``
            (cast, then copy to host memory). vLLM's Qwen2.5-VL vision tower casts its input to
            the model dtype first (``x.to(device=..., dtype=self.dtype)``), so bf16 here changes no
            number; it halves the bytes that cross to the engine core process.

    Returns:
        Bytes of pixel data handed over after the change.
    """
    import torch

    total = 0
    for feature in getattr(engine_request, "mm_features", None) or []:
        item = feature.data
        if item is None:
            continue
        for key, elem in item.items():
            t = elem.data
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                continue
            if key.startswith("pixel_values") and mode != "as_is":
                t = t.to(torch.bfloat16)
                if mode == "bf16_cpu":
                    t = t.cpu()
                elem.data = t
            total += t.nbytes
    return total


def accept_processed_video() -> None:
    """Lets vLLM's Qwen2-VL/Qwen2.5-VL data parser take a clip already processed into patches.

    vLLM 0.24's ``Qwen2VLMultiModalDataParser._parse_video_data`` accepts a dict of processed
    fields only for precomputed embeddings (``video_embeds`` + ``video_grid_thw``, passed through
    without the HF processor: ``DictEmbeddingItems``). This adds the same pass-through for the
    vision tower's input (``pixel_values_videos`` + ``video_grid_thw`` + ``second_per_grid_ts``,
    as :meth:`serve_app.decode.vision_patches.VisionPatches.video_input` makes them), with the fields
    vLLM's ``Qwen2_5_VLMultiModalProcessor._get_mm_fields_config`` declares for them; the model
    then runs its vision tower on the pixels as it does after the HF processor. Any other input
    goes to vLLM's own parser. Idempotent; affects this process only (input processing runs in
    the replica; the engine core receives processed items). Pass-through items need the engine
    argument ``enable_mm_embeds`` (vLLM checks it for every pass-through item).
    """
    from vllm.model_executor.models import qwen2_vl
    from vllm.multimodal.inputs import MultiModalFieldConfig
    from vllm.multimodal.parse import DictEmbeddingItems

    parser = qwen2_vl.Qwen2VLMultiModalDataParser
    if getattr(parser, "_cosmos_accepts_patches", False):
        return
    vllm_parse = parser._parse_video_data

    def _parse_video_data(self: Any, data: Any) -> Any:
        if isinstance(data, dict) and "pixel_values_videos" in data:
            qwen2vl_fields = qwen2_vl._create_qwen2vl_field_factory(self._spatial_merge_size)

            def fields(hf_inputs: Any) -> dict[str, Any]:
                second_per_grid = MultiModalFieldConfig.batched("video", keep_on_cpu=True)
                return {**qwen2vl_fields(hf_inputs), "second_per_grid_ts": second_per_grid}

            return DictEmbeddingItems(
                data,
                modality="video",
                required_fields={"pixel_values_videos", "video_grid_thw", "second_per_grid_ts"},
                fields_factory=fields,
            )
        return vllm_parse(self, data)

    parser._parse_video_data = _parse_video_data
    parser._cosmos_accepts_patches = True


def processor_kwargs(n_frames: int, fps: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per-request HF processor kwargs for a clip of ``n_frames`` sampled at ``fps`` (frames/s).

    ``extra`` (e.g. ``{"device": "cuda"}`` to run the processor on the GPU) is merged in.
    """
    kwargs: dict[str, Any] = {
        "video_metadata": [{"total_num_frames": int(n_frames), "fps": float(fps)}],
        "do_sample_frames": False,  # frames are already sampled by timestamp in the decode tier
        "cap_pixels_per_frame": False,  # and already sized to the Cosmos pixel budget
    }
    kwargs.update(extra or {})
    return kwargs


def sampling_params(s: SamplingOptions) -> SamplingParams:
    """vLLM ``SamplingParams`` (delta outputs) for the project's sampling options."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=s.max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        repetition_penalty=s.repetition_penalty,
        seed=s.seed,
        ignore_eos=s.ignore_eos,
        skip_special_tokens=True,
        output_kind=RequestOutputKind.DELTA,
    )


def engine_prompt(
    request: GenerationRequest,
    extra_processor_kwargs: dict[str, Any] | None = None,
    table_device: str | None = None,
) -> dict[str, Any]:
    """The vLLM prompt dict of one request: text, the clip, and processor kwargs.

    A clip that arrives as patches (:attr:`GenerationRequest.patches`) goes in as processed
    fields (see :func:`accept_processed_video`): no HF processor runs for it. With ``table_device``
    (``model.patchify: table``), frames are patchified here on that torch device
    (:func:`serve_app.decode.vision_patches.patchify_fields`) and go in as processed fields too. Otherwise
    frames go in as frames, with the processor kwargs that give the true temporal positions.

    The clip gets the request id as its multimodal UUID: every request is a new
    clip, so vLLM hashes the short id instead of 38 MB of pixels (the hash
    keys the multimodal caches, which can never hit across requests here).

    Raises:
        ValueError: frames the table patchify cannot take (see :func:`serve_app.decode.vision_patches.patchify`).
    """
    if request.patches is not None:
        return {
            "prompt": request.prompt,
            "multi_modal_data": {"video": request.patches.video_input()},
            "multi_modal_uuids": {"video": [request.media_uuid]},
        }
    assert request.frames is not None  # a request carries frames or patches
    if table_device is not None:
        return {
            "prompt": request.prompt,
            "multi_modal_data": {"video": patchify_fields(request.frames, request.fps, table_device)},
            "multi_modal_uuids": {"video": [request.media_uuid]},
        }
    return {
        "prompt": request.prompt,
        "multi_modal_data": {"video": request.frames},
        "multi_modal_uuids": {"video": [request.media_uuid]},
        "mm_processor_kwargs": processor_kwargs(request.frames.shape[0], request.fps, extra_processor_kwargs),
    }


def compile_cache_env(cache_dir: str) -> dict[str, str]:
    """Environment that keeps vLLM's, Inductor's and Triton's compile artifacts under ``cache_dir``.

    ``VLLM_CACHE_ROOT`` holds vLLM's ``torch_compile_cache`` (compiled graphs and AOT artifacts,
    ``vllm/envs.py``); ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` are the cache variables of
    torch Inductor and Triton. Relative paths are made absolute (the engine core may run elsewhere).
    """
    root = os.path.abspath(os.path.expanduser(cache_dir))
    return {
        "VLLM_CACHE_ROOT": os.path.join(root, "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(root, "triton"),
    }


def cache_state(vllm_cache_root: str) -> str:
    """``warm (N files in DIR)`` when vLLM's compile cache under ``vllm_cache_root`` holds artifacts,
    else ``cold (DIR empty)``: said at start, so a slow start can be told from a cold one."""
    compiled = Path(vllm_cache_root) / "torch_compile_cache"
    n = sum(1 for p in compiled.rglob("*") if p.is_file()) if compiled.is_dir() else 0
    return f"warm ({n} files in {compiled})" if n else f"cold ({compiled} empty)"


def unknown_engine_args(engine_args: dict[str, Any], known: set[str]) -> list[str]:
    """Names in ``engine_args`` that are not vLLM engine arguments (sorted)."""
    return sorted(set(engine_args) - known)


def _engine_ts(m: Any, name: str) -> float:
    """Timestamp ``name`` (seconds) of vLLM's ``RequestStateStats`` ``m``; 0.0 when unset or absent."""
    return float(getattr(m, name, 0.0) or 0.0) if m is not None else 0.0


def timings_row(
    request_id: str,
    t_submit: float,
    t_engine: float,
    stage: dict[str, float],
    m: Any,
    n_out: int,
    prompt_tokens: int | None,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """One request's stage timings in milliseconds (a row of the :data:`TIMINGS_ENV` file).

    ``t_submit`` / ``t_engine``: ``time.perf_counter()`` seconds when the request arrived and when it
    was handed to ``AsyncLLM``; ``stage``: what the preprocessing thread recorded (empty without
    one); ``m``: vLLM's ``RequestStateStats`` of the last output (engine timestamps in seconds), or None;
    ``cached_tokens``: the prompt tokens vLLM's prefix cache served (``RequestOutput.num_cached_tokens``).
    """
    row: dict[str, Any] = {"request_id": request_id, "completion_tokens": n_out, "prompt_tokens": prompt_tokens}
    if cached_tokens is not None:
        row["cached_tokens"] = cached_tokens
    if stage:
        row["preprocess_wait_ms"] = (stage["thread_start"] - t_submit) * 1000
        row["processor_ms"] = (stage["processed"] - stage["thread_start"]) * 1000
        row["handoff_prep_ms"] = (stage["thread_end"] - stage["processed"]) * 1000
        row["pixel_bytes"] = stage.get("pixel_bytes")
    row["frontend_ms"] = (t_engine - t_submit) * 1000
    if _engine_ts(m, "queued_ts"):
        row["engine_queue_ms"] = (m.scheduled_ts - m.queued_ts) * 1000
        if m.first_token_ts:
            row["prefill_ms"] = (m.first_token_ts - m.scheduled_ts) * 1000
            row["first_token_latency_ms"] = m.first_token_latency * 1000
        if m.last_token_ts and m.first_token_ts:
            row["decode_ms"] = (m.last_token_ts - m.first_token_ts) * 1000
    return row


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
                memory, or quantization: fp8 on a GPU below compute capability 8.9 (at once, before any import of vLLM).
        """
        from serve_app.model.preflight import (
            VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
            check_fp8,
            check_gpu_free,
            check_replica,
        )

        t_start = time.perf_counter()
        check_replica()
        args = dict(self.config.engine_args)
        check_gpu_free(float(args.get("gpu_memory_utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION)))
        check_fp8(args.get("quantization"))
        cache = self.config.compile_cache_dir
        if cache:
            os.environ.update(compile_cache_env(cache))  # before vLLM's import; the engine core inherits it
        cache_root = os.environ.get("VLLM_CACHE_ROOT", os.path.expanduser("~/.cache/vllm"))
        compile_cache = cache_state(cache_root)
        forkserver = self.config.engine_process == "forkserver" and not args.get("numa_bind")
        if forkserver:
            engine_process.start_server()  # imports vLLM there while this process imports it below
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from serve_app.model.engines import engine_watch

        engine_watch.install()  # the engine core ends with this replica, however it dies
        if forkserver:
            engine_process.install()
        share_tokenizer_pools()  # before AsyncLLM builds its HF processor (the engine core does it too)
        self.phases_s["import"] = time.perf_counter() - t_start
        model = self.config.model_id
        if self.config.checkpoint:
            model = str(ensure_checkpoint(self.config.checkpoint, model))
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
        self.llm = AsyncLLM.from_engine_args(engine_args)
        if self.config.preprocess_threads > 0:
            self._pool = ThreadPoolExecutor(self.config.preprocess_threads, thread_name_prefix="mm-preprocess")
            self._tasks = await self.llm.get_supported_tasks()
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
            engine_input = engine_prompt(request, self.config.processor_kwargs, self._table_device)
        t_engine = time.perf_counter()
        n_out = 0
        prompt_tokens: int | None = None
        cached_tokens: int | None = None
        m: Any = None  # vLLM's RequestStateStats of the last output
        try:
            async for out in self.llm.generate(engine_input, params, request.request_id, prompt_text=request.prompt):
                if prompt_tokens is None and out.prompt_token_ids is not None:
                    prompt_tokens = len(out.prompt_token_ids)
                if out.num_cached_tokens is not None:
                    cached_tokens = out.num_cached_tokens
                comp = out.outputs[0]
                n_out += len(comp.token_ids)
                chunk = GenerationChunk(text=comp.text, completion_tokens=n_out, prompt_tokens=prompt_tokens)
                m = out.metrics
                if _engine_ts(m, "scheduled_ts") and _engine_ts(m, "queued_ts"):
                    chunk.queue_ms = max(0.0, (m.scheduled_ts - m.queued_ts) * 1000)
                if out.finished:
                    chunk.finished = True
                    chunk.finish_reason = comp.finish_reason or "stop"  # vLLM's own: stop, length, abort
                yield chunk
        except VLLMDead as e:
            raise EngineDeadError(str(e)) from e
        finally:
            if self._timings_path:
                row = timings_row(request.request_id, t_submit, t_engine, stage, m, n_out, prompt_tokens, cached_tokens)
                self._append_timings(self._timings_path, row)

    def _process(self, request: GenerationRequest, params: Any, stage: dict[str, float]) -> Any:
        """Runs the prompt's patchify (with ``patchify: table``) and vLLM's input processing
        (tokenize + HF processor) in a worker thread; returns vLLM's ``EngineCoreRequest``.

        ``stage`` receives the thread's start and end (``time.perf_counter`` seconds) and the
        handed-over pixel bytes.
        """
        stage["thread_start"] = time.perf_counter()
        arrival_s = time.time()  # vLLM's arrival time covers the patchify too, as it covers the HF processor
        prompt = engine_prompt(request, self.config.processor_kwargs, self._table_device)
        req = self.llm.input_processor.process_inputs(
            request.request_id, prompt, params, supported_tasks=self._tasks, arrival_time=arrival_s
        )
        stage["processed"] = time.perf_counter()
        stage["pixel_bytes"] = handoff_pixels(req, self.config.pixel_handoff)
        stage["thread_end"] = time.perf_counter()
        return req

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
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
