"""The values that cross ``DeploymentHandle`` calls (Ray-free).

The graph is Ingress → VideoDecoder → VideoModel. What travels between them:

* to the decoder: a :class:`ClipSource` (where the clip comes from) and a
  :class:`FrameSampling` (which frames to sample);
* from the decoder: a :class:`DecodedClip` or an :class:`ErrorInfo` (the
  client-visible error as a value; exceptions never cross a handle);
* to the model: the decoder's result and a :class:`ClipQuestion` (the question,
  the :class:`SamplingOptions` and the request id for logs);
* from the model, a stream of :data:`ModelChunk`: one :class:`ClipInfo` (or one
  :class:`ErrorInfo` and nothing else), then :class:`Delta` values as tokens
  arrive, then one :class:`Done` (or an :class:`ErrorInfo` if generation fails).

Every type here is a frozen value (dataclass or pydantic model) that pickles.
``DecodedClip`` is defined by :mod:`serve_app.decode.clip`, ``FrameSampling`` by :mod:`serve_app.decode.sampling`,
``ClipSource`` by :mod:`serve_app.sources.rules`, ``ErrorInfo`` by :mod:`serve_app.errors`;
they are re-exported here so the handle contract reads in one place.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from serve_app.decode.clip import DecodedClip, describe
from serve_app.decode.sampling import FrameSampling
from serve_app.errors import ErrorInfo
from serve_app.sources.rules import ClipSource

__all__ = [
    "ClipInfo",
    "ClipQuestion",
    "ClipSource",
    "DecodedClip",
    "Delta",
    "Done",
    "ErrorInfo",
    "FrameSampling",
    "ModelChunk",
    "SamplingOptions",
    "Turn",
    "VideoInfo",
]


#: A temperature below this is greedy decoding (temperature 0): vLLM's rule (``_SAMPLING_EPS`` in
#: ``vllm/sampling_params.py``). Dividing logits by a smaller one overflows (1e-300: inf/nan probabilities).
GREEDY_TEMPERATURE_EPS = 1e-5
#: Smallest repetition penalty accepted (requests and config): a penalty divides the logits of tokens already
#: seen, so a tiny one overflows them (1e-300: inf/nan probabilities); values below 1 encourage repetition.
MIN_REPETITION_PENALTY = 0.01


@dataclasses.dataclass(frozen=True)
class SamplingOptions:
    """Per-request token-sampling settings (recipe defaults filled in by the caller, through
    :func:`serve_app.model.sampling_options.sampling_options`).

    A temperature under :data:`GREEDY_TEMPERATURE_EPS` becomes 0 (greedy), as vLLM does, for every engine.

    Attributes:
        max_tokens: output budget in tokens.
        temperature, top_p, repetition_penalty: token-sampling parameters.
        seed: optional RNG seed (0 … 2**63 - 1).
        ignore_eos: keep generating past end-of-sequence (benchmarks with random weights).
        stop: stop strings: the answer ends before the first one generated (not included), with
            finish reason ``stop``, as vLLM's ``SamplingParams.stop``; applied by
            :func:`serve_app.model.generation.answer_stream` for every engine.
    """

    max_tokens: int
    temperature: float
    top_p: float
    repetition_penalty: float
    seed: int | None = None
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if 0 < self.temperature < GREEDY_TEMPERATURE_EPS:
            object.__setattr__(self, "temperature", 0.0)


@dataclasses.dataclass(frozen=True)
class Turn:
    """One text turn of a conversation after the user's first message (the one with the clip).

    Attributes:
        role: ``user`` or ``assistant``.
        text: the turn's text (validated: no chat-template control tokens).
    """

    role: Literal["user", "assistant"]
    text: str


@dataclasses.dataclass(frozen=True)
class ClipQuestion:
    """What the model deployment is asked about one decoded clip.

    Attributes:
        request_id: the request's id for logs (the client's ``X-Request-Id`` or Serve's own).
            It never reaches the engine: the model generates a fresh engine id per request.
        question: the user's question (validated text): the text of the message that carries the clip.
        sampling: token-sampling settings.
        system_prompt: the request's own system prompt (replaces the configured one), or None.
        history: the conversation after the question (assistant and user turns, the last one the
            user's), rendered after it with the model's chat template; empty for one question about
            one clip.
        clip_id: the clip's identity shared by the questions asked about the same clip (the
            questions of one stream window): made by the server per clip (a random hex string),
            never from anything a client sends, never shared across clips; the engine keys its
            multimodal caches by it, so the later questions reuse the first one's vision encoding
            and prompt prefix. None: the clip is this question's alone.
    """

    request_id: str
    question: str
    sampling: SamplingOptions
    system_prompt: str | None = None
    history: tuple[Turn, ...] = ()
    clip_id: str | None = None


class VideoInfo(BaseModel):
    """What was sampled from a clip (no pixels); the ``video`` object of responses.

    Attributes: see the fields (seconds, pixels, frames/s).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_frames: int = Field(..., description="Frames sent to the model (T, even, padding included).")
    frame_width: int = Field(..., description="Width of the frames sent to the model, pixels (multiple of 28).")
    frame_height: int = Field(..., description="Height of the frames sent to the model, pixels (multiple of 28).")
    timestamps_s: list[float] = Field(..., description="Presentation time of each decoded frame, seconds.")
    padded_frames: int = Field(..., description="Trailing frames repeating the last one (to make T even).")
    fps: float = Field(..., description="Effective sampling rate, frames/s.")
    source_width: int = Field(..., description="Displayed source width, pixels.")
    source_height: int = Field(..., description="Displayed source height, pixels.")
    source_fps: float | None = Field(..., description="Average source frame rate, frames/s (None: unknown).")
    duration_s: float = Field(..., description="Clip length, seconds.")
    rotation_deg: int = Field(..., description="Display rotation applied, degrees clockwise.")

    @classmethod
    def of(cls, clip: DecodedClip) -> VideoInfo:
        """The metadata of a decoded clip (rounded as :func:`serve_app.decode.clip.describe` rounds it)."""
        return cls.model_validate(describe(clip))


@dataclasses.dataclass(frozen=True)
class ClipInfo:
    """First chunk of a model stream: the clip as the model received it.

    Attributes:
        video: what was sampled.
        warnings: human-readable notes from decoding.
        decode_ms: decoder wall time, milliseconds.
        video_tokens: tokens the clip takes in the prompt.
        model: the served model name.
        random_weights: True when the weights are random (the text is meaningless).
    """

    video: VideoInfo
    warnings: tuple[str, ...]
    decode_ms: float
    video_tokens: int
    model: str
    random_weights: bool


@dataclasses.dataclass(frozen=True)
class Delta:
    """Newly generated text.

    Attributes:
        text: the text since the previous delta.
        completion_tokens: tokens generated so far (cumulative).
    """

    text: str
    completion_tokens: int

    def merge(self, later: Delta) -> Delta:
        """This delta followed by ``later``, as one delta."""
        return Delta(text=self.text + later.text, completion_tokens=later.completion_tokens)


@dataclasses.dataclass(frozen=True)
class Done:
    """Last chunk of a finished generation.

    Attributes:
        finish_reason: the engine's (``stop``, ``length``, ``abort``), or None if it gave none.
        prompt_tokens: prompt length in tokens (video tokens included), if known.
        completion_tokens: tokens generated.
        queue_ms: time waiting in the engine before it started, milliseconds (None: unknown).
        model_ms: generation time after the queue, milliseconds.
        ttft_ms: time to the first token, milliseconds (None: no token).
    """

    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int
    queue_ms: float | None = None
    model_ms: float | None = None
    ttft_ms: float | None = None


#: One item of the model deployment's stream.
ModelChunk: TypeAlias = ClipInfo | Delta | Done | ErrorInfo
