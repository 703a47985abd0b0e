"""A CPU engine on Hugging Face transformers (tests and the laptop default).

Runs the model family's transformers class (``Qwen2_5_VLForConditionalGeneration``,
``Qwen3VLForConditionalGeneration``) ``generate`` in a worker thread and
streams text through transformers' ``AsyncTextIteratorStreamer``. Requests run
one at a time (a lock: CPU ``generate`` is compute-bound and serial); the time
spent waiting for the lock is the request's ``queue_ms``. Aborts stop generation at the next
token through a ``StoppingCriteria``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from transformers import AsyncTextIteratorStreamer

from serve_app.config import ModelConfig
from serve_app.config.families import check_family
from serve_app.log_limit import get_logger
from serve_app.model.checkpoint import ensure_checkpoint, has_random_weights
from serve_app.model.engines.base import Engine, EngineDeadError, GenerationChunk, GenerationRequest
from serve_app.model.family import family_for
from serve_app.model_facts import VIDEO_PLACEHOLDER

#: The video token the processor expands (both families: ``<|video_pad|>``).
VIDEO_TOKEN = "<|video_pad|>"

if TYPE_CHECKING:
    import torch
    from transformers import BatchFeature, PreTrainedTokenizerBase

logger = get_logger(__name__)


class TokenCountingStreamer(AsyncTextIteratorStreamer):
    """transformers' ``AsyncTextIteratorStreamer`` yielding ``(text, completion_tokens)`` pairs.

    ``completion_tokens`` counts the tokens generated up to and including the ones in ``text``
    (the prompt, which ``generate`` also puts first, is not counted). Must be created on the
    event loop that iterates it; ``generate`` feeds it from a worker thread.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.completion_tokens = 0

    def put(self, value: torch.Tensor) -> None:
        """Receives token ids from ``generate`` (the first call holds the prompt)."""
        if not self.next_tokens_are_prompt:
            self.completion_tokens += int(value.numel())
        super().put(value)  # type: ignore[no-untyped-call]  # transformers' TextStreamer.put is unannotated

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Queues ``(text, tokens so far)``; the stop signal after the last text."""
        self.loop.call_soon_threadsafe(self.text_queue.put_nowait, (text, self.completion_tokens))
        if stream_end:
            self.close_from_thread()

    def close_from_thread(self) -> None:
        """Ends the iteration (thread-safe; a second stop signal is never read)."""
        self.loop.call_soon_threadsafe(self.text_queue.put_nowait, self.stop_signal)


class TransformersEngine(Engine):
    """A Qwen2.5-VL or Qwen3-VL checkpoint (``model.family``) on transformers, for CPU.

    Args:
        config: model settings; ``config.checkpoint`` builds a generated
            checkpoint at ``config.model_id`` on first start if missing.
    """

    def __init__(self, config: ModelConfig):
        self.config = config
        self._lock = asyncio.Semaphore(config.max_concurrent_requests)
        self._cancel: dict[str, threading.Event] = {}
        self.model: Any = None  # the family's transformers model once loaded
        self.family = family_for(config.family)
        self.processor: Any = None  # its AutoProcessor once loaded
        self._collapse_placeholder = False  # see _wraps_frame_groups_twice

    async def start(self) -> None:
        """Loads processor and model (building the checkpoint first if configured)."""
        await asyncio.get_running_loop().run_in_executor(None, self._load)

    def _load(self) -> None:
        import torch
        import transformers
        from transformers import AutoConfig, AutoProcessor

        path = self.config.model_id
        if self.config.checkpoint:
            path = str(ensure_checkpoint(self.config.checkpoint, path, self.config.family))
        self.random_weights = Path(path).is_dir() and has_random_weights(path)
        torch.set_num_threads(max(1, torch.get_num_threads()))
        self.processor = AutoProcessor.from_pretrained(path)  # type: ignore[no-untyped-call]  # unannotated upstream
        template = getattr(self.processor, "chat_template", None) or getattr(
            self.processor.tokenizer, "chat_template", None
        )
        self.chat_template = template if isinstance(template, str) else None
        check_family(
            AutoConfig.from_pretrained(path).architectures, self.config.family, "the checkpoint at model.model_id"
        )
        model_class = getattr(transformers, self.family.hf_model_class)
        self.model = model_class.from_pretrained(path, dtype=torch.float32).to(self.config.device).eval()
        self._collapse_placeholder = self._wraps_frame_groups_twice()
        logger.info("transformers engine loaded %s (random weights: %s)", path, self.random_weights)

    def _process(self, prompt: str, frames: np.ndarray, fps: float) -> BatchFeature:
        from transformers.video_utils import VideoMetadata

        fam = self.family
        if self._collapse_placeholder:
            prompt = prompt.replace(VIDEO_PLACEHOLDER, VIDEO_TOKEN)
        inputs: BatchFeature = self.processor(
            text=[prompt],
            videos=[frames],
            video_metadata=[VideoMetadata(**fam.video_metadata(frames, fps))],
            # no resampling or resize: the frames are sampled and sized for the family already
            **fam.processor_kwargs(frames, fps),
            return_tensors="pt",
        )
        return inputs

    def _wraps_frame_groups_twice(self) -> bool:
        """Whether the processor keeps the template's ``<|vision_start|>…<|vision_end|>`` around frame groups
        that it already wraps one by one.

        transformers 5.x's ``Qwen3VLProcessor`` replaces only ``<|video_pad|>`` with
        ``<t seconds><|vision_start|>…<|vision_end|>`` per frame pair, where vLLM's Qwen3-VL processor
        (and earlier transformers) replaces the whole ``<|vision_start|><|video_pad|><|vision_end|>``; a
        one-pair clip then shows two vision starts. Then the engine hands the processor ``<|video_pad|>``
        alone, so its prompt is the one vLLM makes.
        """
        side = 2 * self.family.geometry.pixel_factor
        probe = np.zeros((2, side, side, 3), dtype=np.uint8)
        ids = self._process(VIDEO_PLACEHOLDER, probe, 1.0)["input_ids"][0].tolist()
        start = self.processor.tokenizer.convert_tokens_to_ids("<|vision_start|>")
        return bool(ids.count(start) > 1)

    def _inputs(self, request: GenerationRequest) -> BatchFeature:
        if request.frames is None:  # config validation keeps vision_input 'patches' off this backend
            raise ValueError("the transformers backend takes frames, not patches (model.vision_input: frames)")
        return self._process(request.prompt, request.frames, request.fps).to(self.config.device)

    def _run(
        self, inputs: BatchFeature, request: GenerationRequest, streamer: TokenCountingStreamer, cancel: threading.Event
    ) -> tuple[int, str]:
        """Runs ``generate`` (worker thread); text goes out through ``streamer``.

        Returns:
            ``(completion_tokens, finish_reason)``; finish_reason is ``abort``, ``length`` or ``stop``.
        """
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        stopped_by_cancel = threading.Event()

        class _Cancel(StoppingCriteria):
            def __call__(
                self, input_ids: torch.LongTensor, scores: tuple[torch.Tensor] | None, **kwargs: Any
            ) -> torch.BoolTensor:
                if cancel.is_set():
                    stopped_by_cancel.set()
                # transformers declares BoolTensor; a dtype=torch.bool tensor is one (torch.full is typed Tensor)
                return cast("torch.BoolTensor", torch.full((input_ids.shape[0],), cancel.is_set(), dtype=torch.bool))

        s = request.sampling
        if s.seed is not None:
            torch.manual_seed(s.seed)
        kwargs = dict(
            max_new_tokens=s.max_tokens,
            do_sample=s.temperature > 0,
            repetition_penalty=s.repetition_penalty,
            streamer=streamer,
            stopping_criteria=StoppingCriteriaList([_Cancel()]),
        )
        if s.temperature > 0:
            kwargs.update(temperature=s.temperature, top_p=s.top_p)
            if s.top_k > 0:
                kwargs["top_k"] = s.top_k
        if s.ignore_eos:
            kwargs["min_new_tokens"] = s.max_tokens
        with torch.inference_mode():
            out = self.model.generate(**inputs, **kwargs)
        n_out = int(out.shape[1]) - int(inputs["input_ids"].shape[1])
        # Only a generation the cancel flag actually stopped is an abort: the flag is also set once the
        # consumer has read the end of the stream, which may come before this line runs.
        if stopped_by_cancel.is_set():
            reason = "abort"
        elif n_out >= s.max_tokens:
            reason = "length"
        else:
            reason = "stop"
        return n_out, reason

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Streams one request's output (see :class:`Engine`).

        The processor and ``generate`` run in the default executor; text arrives through
        transformers' ``AsyncTextIteratorStreamer`` (:class:`TokenCountingStreamer`). A consumer
        that stops iterating stops the generation at its next token.
        """
        t_arrive = time.perf_counter()
        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        self._cancel[request.request_id] = cancel
        try:
            async with self._lock:
                queue_ms = (time.perf_counter() - t_arrive) * 1000
                yield GenerationChunk(queue_ms=queue_ms)
                if cancel.is_set():
                    yield GenerationChunk(finished=True, finish_reason="abort")
                    return
                inputs = await loop.run_in_executor(None, self._inputs, request)
                prompt_tokens = int(inputs["input_ids"].shape[1])
                yield GenerationChunk(prompt_tokens=prompt_tokens)
                streamer = TokenCountingStreamer(self.processor.tokenizer, skip_prompt=True, skip_special_tokens=True)

                def work() -> tuple[int, str]:
                    try:
                        return self._run(inputs, request, streamer, cancel)
                    finally:  # generate() ends the stream itself, but not when it raises
                        streamer.close_from_thread()

                fut = loop.run_in_executor(None, work)
                try:
                    async for text, n_tokens in streamer:
                        if text:
                            yield GenerationChunk(text=text, completion_tokens=n_tokens)
                finally:
                    cancel.set()  # a consumer that went away stops the generation
                    await asyncio.shield(fut)
                n_out, reason = fut.result()
                yield GenerationChunk(
                    completion_tokens=n_out, prompt_tokens=prompt_tokens, finished=True, finish_reason=reason
                )
        finally:
            self._cancel.pop(request.request_id, None)

    async def abort(self, request_id: str) -> None:
        """Stops a running request at its next token."""
        ev = self._cancel.get(request_id)
        if ev:
            ev.set()

    def num_unfinished(self) -> int:
        """Requests holding or waiting for the generation lock."""
        return len(self._cancel)

    async def check_health(self) -> None:
        """Raises :class:`EngineDeadError` if the model is not loaded."""
        if self.model is None:
            raise EngineDeadError("model not loaded")
