"""The engine interface the model deployment talks to (:class:`SamplingOptions` is re-exported from
:mod:`serve_app.protocol`).

An engine turns one :class:`GenerationRequest` (frames + question + sampling
parameters) into a stream of :class:`GenerationChunk` values. The graph
never imports a concrete engine: :func:`serve_app.model.engines.factory.create_engine` picks one from the
config (``transformers`` on CPU, ``vllm`` on GPU, or any ``module:factory``
import path, which is how tests inject engines).
"""

from __future__ import annotations

import abc
import dataclasses
import warnings
from collections.abc import AsyncIterator

import numpy as np

from serve_app.protocol import SamplingOptions, VisionPatches

# Frames reach the engines read-only (zero-copy out of Ray's object store). The HF video
# processor only reads them, yet torch.from_numpy warns about every read-only array on the
# first request; silence exactly that message rather than copy each clip (~38 MB per 10 s).
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


@dataclasses.dataclass
class GenerationRequest:
    """One clip question for an engine.

    Attributes:
        request_id: the engine's id for this request (used to abort): made by the server per
            request (:func:`serve_app.model.generation.new_engine_request_id`), never the client's.
        frames: ``(T, H, W, 3) uint8`` RGB, T even, H and W multiples of 28; None when the clip
            comes as ``patches``.
        fps: effective sampling rate of the clip (frames/s), for temporal positions.
        prompt: full prompt text with one video placeholder (see serve_app.model.prompt).
        sampling: generation settings.
        patches: the clip already normalised and patchified in the decode tier
            (``model.vision_input: patches``, vllm backend only), else None.
        clip_id: the server-made identity the clip shares with the other questions about it
            (:attr:`serve_app.protocol.ClipQuestion.clip_id`), or None (the clip is this request's alone).
    """

    request_id: str
    frames: np.ndarray | None
    fps: float
    prompt: str
    sampling: SamplingOptions
    patches: VisionPatches | None = None
    clip_id: str | None = None

    @property
    def num_frames(self) -> int:
        """Frames of the clip (T, even), whether it comes as frames or patches."""
        if self.frames is not None:
            return int(self.frames.shape[0])
        assert self.patches is not None  # a request carries frames or patches
        return self.patches.num_frames

    @property
    def media_uuid(self) -> str:
        """The clip's multimodal UUID: vLLM keys its encoder and processor caches (and the clip's
        prefix-cache blocks) by it. ``clip-`` + the shared :attr:`clip_id` when the clip has other
        questions (they reuse its work), else ``clip-`` + the request id (never shared)."""
        return f"clip-{self.clip_id}" if self.clip_id else f"clip-{self.request_id}"


@dataclasses.dataclass
class GenerationChunk:
    """A piece of an engine's output stream.

    Attributes:
        text: newly generated text (delta).
        completion_tokens: tokens generated so far.
        prompt_tokens: prompt length in tokens (video tokens included), once known.
        finished: True on the last chunk.
        finish_reason: ``stop``, ``length`` or ``abort`` on the last chunk.
        queue_ms: time (ms) the request waited before the engine started it, once known.
    """

    text: str = ""
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    finished: bool = False
    finish_reason: str | None = None
    queue_ms: float | None = None


class EngineDeadError(RuntimeError):
    """The engine can no longer serve requests (the replica must be replaced)."""


class Engine(abc.ABC):
    """A generation engine bound to one model."""

    #: True when the weights are random (generated checkpoint or dummy load):
    #: outputs are meaningless and responses must say so.
    random_weights: bool = False
    #: The checkpoint's own chat template once started (None: the family's copy is used).
    chat_template: str | None = None

    @abc.abstractmethod
    async def start(self) -> None:
        """Loads the model. Raises on failure (the replica then fails to start)."""

    @abc.abstractmethod
    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Streams the output of one request; the last chunk has ``finished=True``.

        Raises:
            EngineDeadError: the engine died.
        """

    @abc.abstractmethod
    async def abort(self, request_id: str) -> None:
        """Stops a running request and frees its resources (no-op if unknown)."""

    @abc.abstractmethod
    def num_unfinished(self) -> int:
        """Requests the engine holds right now (running or queued inside it)."""

    @abc.abstractmethod
    async def check_health(self) -> None:
        """Raises :class:`EngineDeadError` if the engine cannot serve."""

    async def shutdown(self) -> None:  # noqa: B027 - an optional hook: the default releases nothing
        """Releases the engine (GPU memory, worker processes); the model deployment calls it when
        its replica stops. Default: nothing to release."""
