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

Every type here is a frozen value (dataclass or pydantic model) that pickles, defined here (``ErrorInfo``
comes with the error base, :mod:`serve_app.errors`). They carry no behaviour: properties only derive values
from their fields. What is done with them lives next to its users (decoding and patchifying in
:mod:`serve_app.decode`, the source rules in :mod:`serve_app.sources`). This module imports nothing of
the project but :mod:`serve_app.errors`: it is the runtime's bottom floor.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, TypeAlias

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from serve_app.errors import ErrorInfo

__all__ = [
    "ClipInfo",
    "ClipQuestion",
    "ClipSource",
    "DecodedClip",
    "Delta",
    "Done",
    "ErrorInfo",
    "FrameGeometry",
    "FrameSampling",
    "Gap",
    "ModelChunk",
    "ReasoningFormat",
    "SamplingOptions",
    "Turn",
    "VideoInfo",
    "VisionPatches",
]


#: How a family's output splits into reasoning and answer (see :class:`ClipInfo`).
ReasoningFormat: TypeAlias = Literal["think_answer", "think_then_answer"]

#: A temperature below this is greedy decoding (temperature 0): vLLM's rule (``_SAMPLING_EPS`` in
#: ``vllm/sampling_params.py``). Dividing logits by a smaller one overflows (1e-300: inf/nan probabilities).
GREEDY_TEMPERATURE_EPS = 1e-5
#: Smallest repetition penalty accepted (requests and config): a penalty divides the logits of tokens already
#: seen, so a tiny one overflows them (1e-300: inf/nan probabilities); values below 1 encourage repetition.
MIN_REPETITION_PENALTY = 0.01


# --------------------------------------------------------------------------- to the decoder


@dataclasses.dataclass(frozen=True)
class FrameGeometry:
    """The frame sizes a model family's vision processor keeps, as values (the decode tier imports no
    model code: the family's geometry reaches it in each :class:`FrameSampling`).

    Attributes:
        pixel_factor: frame sides are multiples of this many pixels: patch side × spatial merge
            (Qwen2.5-VL 14·2 = 28, Qwen3-VL 16·2 = 32); one LLM token covers ``pixel_factor``² pixels
            of ``temporal_patch`` frames.
        temporal_patch: frames per temporal patch (2 for both families): clips carry an even frame
            count, the last frame repeated if needed.
    """

    pixel_factor: int = 28
    temporal_patch: int = 2


@dataclasses.dataclass(frozen=True)
class FrameSampling:
    """Frame sampling of a clip: which window, at what rate, how many frames at most.

    (Token sampling is :class:`SamplingOptions`; the sampling math is :mod:`serve_app.decode.sampling`.)

    Attributes:
        fps: target sampling rate, frames per second.
        max_frames: cap on frames (the rate is lowered evenly to respect it).
        start_s, end_s: optional window in clip seconds (0 = first frame).
        geometry: the model family's frame geometry (default: Qwen2.5-VL's, 28-px multiples).
    """

    fps: float
    max_frames: int
    start_s: float | None = None
    end_s: float | None = None
    geometry: FrameGeometry = FrameGeometry()


@dataclasses.dataclass(frozen=True)
class ClipSource:
    """One clip source: exactly one of ``data``, ``path`` or ``url``.

    The rules a source must pass (allowed roots, public addresses) are :mod:`serve_app.sources.rules`,
    applied where the source is read (the decoder replica).

    Attributes:
        data: the clip's bytes (uploads, ``data:`` URLs).
        path: a local file path, checked against the allowed roots where it is read.
        url: an ``http(s)://`` or ``rtsp://`` URL, checked and fetched by the decoder.
        name: a label for logs and errors (file name, path or URL).
    """

    data: bytes | None = None
    path: str | None = None
    url: str | None = None
    name: str = "video"

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.data, self.path, self.url)) != 1:
            raise ValueError("a ClipSource holds exactly one of data, path or url")

    @property
    def param(self) -> str:
        """The request field this source came from (for error messages)."""
        if self.data is not None:
            return "video"
        return "video_path" if self.path is not None else "video_url"


# --------------------------------------------------------------------------- from the decoder


@dataclasses.dataclass(frozen=True)
class Gap:
    """Grid targets a decode left unfilled by more than one step (the warning text:
    :func:`serve_app.decode.timeline.gap_message`).

    Attributes:
        start_s, end_s: first and last unfilled target in clip seconds.
        targets: how many targets of the grid fall in the gap.
        reason: why no frame is there, in words.
    """

    start_s: float
    end_s: float
    targets: int
    reason: str


@dataclasses.dataclass(frozen=True)
class VisionPatches:
    """A clip as the vision tower's input (made by :func:`serve_app.decode.vision_patches.patchify`;
    :func:`serve_app.decode.vision_patches.video_input` views it as the engine's tensors).

    Attributes:
        bits: ``(N, 1176) uint16``: bf16 bit patterns of the normalised patch rows,
            ``N = t·h·w`` (rows in the HF processor's order).
        grid_thw: ``(t, h, w)``: temporal patches (frame pairs) and patch rows/columns per frame.
        second_per_grid_s: seconds between two temporal patches (``2 / fps``): Qwen2.5-VL's
            temporal positions (``second_per_grid_ts``).
        patch_size: side of one patch, pixels (14); with ``temporal_patch_size`` (frames per
            temporal patch, 2) the value says what frame size and count it covers.
        temporal_patch_size: frames per temporal patch (2).
    """

    bits: np.ndarray
    grid_thw: tuple[int, int, int]
    second_per_grid_s: float
    patch_size: int
    temporal_patch_size: int

    @property
    def num_frames(self) -> int:
        """Frames the patches cover (T, even)."""
        return self.grid_thw[0] * self.temporal_patch_size

    @property
    def frame_height(self) -> int:
        """Frame height in pixels."""
        return self.grid_thw[1] * self.patch_size

    @property
    def frame_width(self) -> int:
        """Frame width in pixels."""
        return self.grid_thw[2] * self.patch_size

    @property
    def nbytes(self) -> int:
        """Bytes of pixel data."""
        return int(self.bits.nbytes)


@dataclasses.dataclass(frozen=True)
class DecodedClip:
    """Sampled frames of one clip, ready for the model (made by :func:`serve_app.decode.clip.decode_clip`;
    changed only by copy: :func:`dataclasses.replace`).

    Attributes:
        frames: ``(T, H, W, 3) uint8`` RGB, T even ≥ 2, H and W multiples of 28; None once the
            clip travels as ``patches`` (:func:`serve_app.decode.vision_patches.as_patches`).
        timestamps_s: ``(T_real,) float64`` presentation time of each decoded
            frame in seconds from the clip's first frame, strictly increasing;
            ``T - T_real`` trailing frames repeat the last one (``padded_frames``).
        fps: effective sampling rate in frames per second (the model's temporal
            positions come from it: Qwen2.5-VL spaces frame pairs 2/fps s apart).
        source_width, source_height: displayed source size in pixels.
        source_fps: average source frame rate (frames/s), if known.
        duration_s: clip length in seconds (end of the last frame).
        rotation_deg: display rotation applied, degrees clockwise (0, 90, 180 or 270).
        padded_frames: frames appended to reach an even count.
        warnings: human-readable notes (e.g. where decoding stopped).
        decode_ms: wall time spent decoding, in milliseconds.
        decoded_frames: pictures the decoder actually decoded (≤ the clip's frames).
        gaps: grid targets left unfilled by more than one step, with the reason (also in ``warnings``).
        decode_path: ``"planned"`` (the fast path), ``"plain"``, or ``"planned, then plain (…)"``
            when the fast path saw trouble and the window was decoded again the plain way.
        patches: the frames as the vision tower's input (``model.vision_input: patches``), else None.
    """

    frames: np.ndarray | None
    timestamps_s: np.ndarray
    fps: float
    source_width: int
    source_height: int
    source_fps: float | None
    duration_s: float
    rotation_deg: int = 0
    padded_frames: int = 0
    warnings: tuple[str, ...] = ()
    decode_ms: float = 0.0
    decoded_frames: int = 0
    gaps: tuple[Gap, ...] = ()
    decode_path: str = "planned"
    patches: VisionPatches | None = None

    @property
    def num_frames(self) -> int:
        """Frames sent to the model (T, even)."""
        if self.frames is None:
            assert self.patches is not None  # a clip holds frames or patches
            return self.patches.num_frames
        return int(self.frames.shape[0])

    @property
    def frame_size(self) -> tuple[int, int]:
        """``(width, height)`` of the frames sent to the model, pixels."""
        if self.frames is None:
            assert self.patches is not None  # a clip holds frames or patches
            return self.patches.frame_width, self.patches.frame_height
        return int(self.frames.shape[2]), int(self.frames.shape[1])


# --------------------------------------------------------------------------- to and from the model


@dataclasses.dataclass(frozen=True)
class SamplingOptions:
    """Per-request token-sampling settings (recipe defaults filled in by the caller, through
    :func:`serve_app.model.sampling_options.sampling_options`).

    A temperature under :data:`GREEDY_TEMPERATURE_EPS` becomes 0 (greedy), as vLLM does, for every engine.

    Attributes:
        max_tokens: output budget in tokens.
        temperature, top_p, repetition_penalty: token-sampling parameters.
        top_k: sample among the k most likely tokens only (0: all; Cosmos-Reason2's recipe: 20).
        presence_penalty: subtracted from the logits of tokens already generated (0: off; vLLM's
            ``SamplingParams.presence_penalty``; the transformers engine has none and ignores it).
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
    top_k: int = 0
    presence_penalty: float = 0.0

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
            multimodal caches by it, so the later questions reuse the first one's prompt prefix and,
            while vLLM's encoder cache holds it (``model.encoder_cache_tokens``), its vision encoding.
            None: the clip is this question's alone.
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
    frame_width: int = Field(
        ..., description="Width of the frames sent to the model, pixels (a multiple of the family's 28 or 32)."
    )
    frame_height: int = Field(
        ..., description="Height of the frames sent to the model, pixels (a multiple of the family's 28 or 32)."
    )
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
        """The metadata of a decoded clip (no pixels), times rounded to 0.1 ms, rates to 1e-6 (``fps``)
        and 1e-4 (``source_fps``)."""
        width, height = clip.frame_size
        return cls(
            num_frames=clip.num_frames,
            frame_width=width,
            frame_height=height,
            timestamps_s=[round(float(t), 4) for t in clip.timestamps_s],
            padded_frames=clip.padded_frames,
            fps=round(clip.fps, 6),
            source_width=clip.source_width,
            source_height=clip.source_height,
            source_fps=None if clip.source_fps is None else round(clip.source_fps, 4),
            duration_s=round(clip.duration_s, 4),
            rotation_deg=clip.rotation_deg,
        )


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
        reasoning_format: how the model's text splits into reasoning and answer
            (:func:`serve_app.model.reasoning.split_reasoning`): ``think_answer`` (Cosmos-Reason1:
            ``<think>…</think>`` then ``<answer>…</answer>``) or ``think_then_answer`` (Qwen3-VL,
            Cosmos-Reason2: an optional ``<think>…</think>``, the answer after it).
    """

    video: VideoInfo
    warnings: tuple[str, ...]
    decode_ms: float
    video_tokens: int
    model: str
    random_weights: bool
    reasoning_format: ReasoningFormat = "think_answer"


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
