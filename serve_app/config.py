"""The one typed configuration of the application.

A Serve config file's ``args:`` maps onto :class:`AppConfig`; so do the KubeRay
manifest (rendered from ``configs/a100.yaml``) and the load tester, which
reads the same file to learn the server's limits. Every model is
``extra="forbid"``: a misspelled key fails at load time, not on a cluster.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, IPvAnyNetwork, ValidationInfo, field_validator, model_validator

from serve_app.model_facts import (
    COSMOS_FPS,
    COSMOS_MAX_FRAME_PIXELS,
    COSMOS_MAX_TOKENS,
    COSMOS_REPETITION_PENALTY,
    COSMOS_SYSTEM_PROMPT,
    COSMOS_TEMPERATURE,
    COSMOS_TOP_P,
    COSMOS_TOTAL_PIXELS,
    MAX_PIXELS,
    MIN_PIXELS,
    TEMPORAL_PATCH_SIZE,
    VIDEO_MIN_PIXELS,
)
from serve_app.model_facts import PIXEL_FACTOR as PIXEL_FACTOR  # re-exported: serve_app.decode.sampling imports it here

#: A URL scheme a ``video_url`` may use.
UrlScheme = Literal["http", "https", "rtsp"]
#: Every URL scheme the server can read (the default of ``sources.url_schemes``).
URL_SCHEMES: tuple[UrlScheme, ...] = ("http", "https", "rtsp")

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PixelBudget(_Model):
    """How big sampled frames may be (pixels), per the Cosmos-Reason1 recipe."""

    total_pixels: int = Field(
        COSMOS_TOTAL_PIXELS,
        gt=0,
        description="Pixel budget of a whole clip (= 8192·28², i.e. 8192 vision tokens; Cosmos-Reason1 recipe).",
    )
    max_frame_pixels: int = Field(
        COSMOS_MAX_FRAME_PIXELS,
        gt=0,
        description="Per-frame cap before the clip share is applied (768·28² = 602,112; Cosmos-Reason1 recipe).",
    )
    min_frame_pixels: int = Field(
        VIDEO_MIN_PIXELS,
        gt=0,
        description="Smallest frame area (128·28² = 100,352; qwen-vl-utils VIDEO_MIN_PIXELS, also the "
        "transformers Qwen2-VL video processor default).",
    )
    max_aspect_ratio: float = Field(200.0, gt=1, description="Largest long/short side ratio Qwen2.5-VL accepts.")


class DecodeConfig(_Model):
    """Clip decoding and frame sampling."""

    fps: float = Field(
        COSMOS_FPS, gt=0, le=30, description="Default sampling rate in frames per second (Cosmos recipe: 4)."
    )
    max_frames: int = Field(128, ge=2, description="Default cap on sampled frames per clip.")
    budget: PixelBudget = Field(default_factory=PixelBudget, description="Frame size limits.")
    threads: int = Field(1, ge=0, description="FFmpeg decoder threads per clip (0 = FFmpeg's automatic choice).")
    timeout_s: float = Field(60.0, gt=0, description="Wall-clock limit for decoding one clip, in seconds.")
    interpolation: Literal["FAST_BILINEAR", "BILINEAR", "BICUBIC", "AREA", "LANCZOS"] = Field(
        "AREA",
        description="libswscale filter that resizes kept frames to the pixel budget. AREA: closest to the "
        "antialiased bicubic resize of qwen-vl-utils of the cheap filters, and no slower than BILINEAR "
        "(results/decode_bench.json, resize_filters).",
    )


class LimitsConfig(_Model):
    """Request limits; each violation is a 4xx naming the limit."""

    max_upload_bytes: int = Field(200 * 1000 * 1000, gt=0, description="Largest accepted clip, in bytes (200 MB).")
    max_clip_duration_s: float = Field(600.0, gt=0, description="Longest accepted clip, in seconds (10 min).")
    max_source_width: int = Field(7680, gt=0, description="Widest accepted source frame, in pixels (8K UHD).")
    max_source_height: int = Field(4320, gt=0, description="Tallest accepted source frame, in pixels (8K UHD).")
    max_frames: int = Field(512, ge=2, description="Largest `max_frames` a request may ask for.")
    max_question_chars: int = Field(8000, gt=0, description="Longest accepted question, in characters.")
    max_questions: int = Field(
        8, ge=1, le=64, description="Most questions one /v1/video/query request may ask about its clip (questions)."
    )
    max_tokens: int = Field(8192, gt=0, description="Largest `max_tokens` a request may ask for.")
    request_timeout_s: float = Field(600.0, gt=0, description="Total time a request may take, in seconds.")
    retry_after_s: int = Field(
        1, ge=0, description="Retry-After (seconds) sent with 503 when queues are full or a replica is replaced."
    )
    max_url_chars: int = Field(
        4096,
        gt=0,
        description="Longest clip URL or path (every route, every scheme but data:, whose size "
        "max_upload_bytes bounds), in characters.",
    )


class SourcesConfig(_Model):
    """Where clips may come from besides uploaded bytes."""

    allowed_roots: list[str] = Field(
        default_factory=list,
        description="Directories a JSON `video_path` may point into (resolved, symlinks followed). Empty: none.",
    )
    url_schemes: list[UrlScheme] = Field(
        default_factory=lambda: list(URL_SCHEMES),
        description="URL schemes a `video_url` may use. Empty: URL sources are refused (403).",
    )
    allow_private_networks: bool = Field(
        False,
        description="Let URLs reach private, loopback, link-local and other non-public addresses "
        "(off: such hosts are refused with 403, after DNS resolution, so a public name cannot point inside).",
    )
    allowed_networks: list[IPvAnyNetwork] = Field(
        default_factory=list,
        description="Private networks (CIDR, e.g. a camera VLAN `10.20.0.0/16`) URLs may reach even while "
        "allow_private_networks is off; every other non-public address stays refused.",
    )
    url_connect_timeout_s: float = Field(5.0, gt=0, description="http(s): seconds to connect (per address).")
    url_read_timeout_s: float = Field(10.0, gt=0, description="http(s): seconds a read may wait for data.")
    url_total_timeout_s: float = Field(60.0, gt=0, description="http(s): seconds for the whole download.")
    url_max_redirects: int = Field(3, ge=0, description="http(s): redirects followed (each hop re-checked).")
    rtsp_open_timeout_s: float = Field(
        5.0, gt=0, description="rtsp: seconds to connect and get the stream description (RTSP DESCRIBE/SETUP/PLAY)."
    )
    rtsp_read_timeout_s: float = Field(
        5.0, gt=0, description="rtsp: seconds a read may wait for packets (a stalled camera fails after this)."
    )
    rtsp_capture_s: float = Field(
        10.0, gt=0, description="rtsp: seconds of live video captured when the request sets no `end_s`."
    )
    rtsp_max_capture_s: float = Field(60.0, gt=0, description="rtsp: longest capture a request may ask for (`end_s`).")


#: Ray Serve's per-request control headers (ray/serve/_private/constants.py, 2.60): the proxy acts on them
#: before the ingress runs (x-request-disconnect-disabled: ?1 turns off cancellation on disconnect;
#: x-request-timeout-seconds: the request's timeout; the other two pick replicas). Compared with
#: ``_`` and ``-`` treated alike, as Ray does.
RAY_SERVE_CONTROL_HEADERS = (
    "x-request-disconnect-disabled",
    "x-request-timeout-seconds",
    "serve-multiplexed-model-id",
    "x-session-id",
)


class SecurityConfig(_Model):
    """Defences against hostile clients: body deadlines, admission limits, control headers."""

    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Seconds a request body may take on top of what body_min_rate_bytes_s allows "
        "(a body still arriving after timeout + received/min_rate seconds gets 408).",
    )
    body_min_rate_bytes_s: int = Field(
        64 * 1024,
        gt=0,
        description="Slowest accepted upload rate in bytes/s, averaged over the body (each byte buys "
        "1/rate seconds more): a client trickling bytes is cut off with 408.",
    )
    max_requests_per_client: int | None = Field(
        None,
        ge=1,
        description="Requests with a body (POST, PUT, PATCH: every route) one client (see client_identity) may "
        "hold at once on one ingress replica; past it 429 with Retry-After, before the body is read. None: no "
        "per-client limit.",
    )
    client_identity: Literal["address", "api_key"] = Field(
        "address",
        description="What one client is for max_requests_per_client: its IP address as the ingress sees it, "
        "or its API key (only when keys are on; otherwise the address).",
    )
    large_body_bytes: int = Field(
        16 * 1000 * 1000,
        gt=0,
        description="A request body over this many bytes (declared, or once received) is a large body.",
    )
    max_large_bodies: int = Field(
        8,
        ge=1,
        description="Large bodies one ingress replica receives at once; more get 503 with Retry-After "
        "(before reading, when Content-Length declares the size). Bounds ingress memory to about "
        "max_large_bodies x the body limit.",
    )
    reserved_slots: int = Field(
        16,
        ge=1,
        description="Ray Serve request slots of the ingress replica kept for /healthz, /readyz and "
        "/v1/models: Serve's max_ongoing_requests is ingress.max_ongoing_requests plus "
        "streams.max_subscribers plus these; every other route is admitted only up to "
        "ingress.max_ongoing_requests (event subscriptions up to streams.max_subscribers), before its body, "
        "so health checks never wait behind uploads, slow bodies or subscribers.",
    )
    readiness_cache_s: float = Field(
        1.0, ge=0, description="Seconds a /readyz answer (one controller round trip) is reused."
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Web origins (scheme://host[:port], e.g. https://cams.example.com: a fronting proxy's public "
        "name) whose pages may send state-changing requests (POST, PUT, PATCH, DELETE) besides the server's own "
        "origin; any other cross-site request (Origin or Sec-Fetch-Site says so) is refused with 403. Requests "
        "without Origin and Sec-Fetch-Site (curl, SDKs) are not affected.",
    )
    refused_headers: list[str] = Field(
        default_factory=lambda: list(RAY_SERVE_CONTROL_HEADERS),
        description="Request headers refused with 400 on every route: Ray Serve's per-request control "
        "headers, which are the operator's, not the client's.",
    )


class SamplingDefaults(_Model):
    """Generation defaults: NVIDIA's Cosmos-Reason1 inference recipe."""

    temperature: float = Field(
        COSMOS_TEMPERATURE, ge=0, le=2, description="Sampling temperature (recipe: 0.6; under 1e-5: greedy)."
    )
    top_p: float = Field(COSMOS_TOP_P, gt=0, le=1, description="Nucleus sampling mass (recipe: 0.95).")
    repetition_penalty: float = Field(
        COSMOS_REPETITION_PENALTY,
        ge=0.01,
        le=2,
        description="Repetition penalty (recipe: 1.05; at least 0.01: a smaller one overflows the logits).",
    )
    max_tokens: int = Field(COSMOS_MAX_TOKENS, gt=0, description="Default output budget in tokens (recipe: 4096).")


#: Prompt tokens of a warm-up request besides its video (system prompt, question, chat markup): an upper
#: bound for the project's system prompts (the GPU bench's whole prompt has 33 besides its 8,100 video tokens).
WARMUP_TEXT_TOKENS = 256


class ModelConfig(_Model):
    """The model replica: which checkpoint, which engine, which defaults."""

    model_id: str = Field(
        "nvidia/Cosmos-Reason1-7B", description="Hub id or local checkpoint directory (relative: to the cwd)."
    )
    served_model_name: str | None = Field(None, description="Name reported in responses; default: model_id.")
    backend: str = Field(
        "vllm",
        pattern=r"^(transformers|vllm|[\w.]+:\w+)$",
        description="Engine: `transformers` (CPU, tests, laptop), `vllm` (GPU, AsyncLLM), or an import "
        "path `module:factory` returning a serve_app.model.engines.base.Engine (tests inject engines this way).",
    )
    checkpoint: Literal["tiny-random", "full-dummy"] | None = Field(
        None,
        description="Build this generated checkpoint at model_id on first start if missing "
        "(python -m serve_app.checkpoint). None: model_id must already exist or be a hub id.",
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="vLLM engine arguments, passed to AsyncEngineArgs unchanged."
    )
    processor_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="vllm backend: extra HF processor kwargs for every request, e.g. {device: cuda} to "
        "normalize/patchify on the GPU (the true fps always goes with each request as video metadata). With "
        "patchify `table` only `device` is read (where the table runs); the HF processor does not run.",
    )
    preprocess_threads: int = Field(
        0,
        ge=0,
        description="vllm backend: threads running vLLM's input processing (HF processor, or the table "
        "patchify) off the replica's event loop, several clips at once. 0: inline in the event loop, as plain "
        "vLLM does (with patchify `table` the patchify then blocks the event loop too).",
    )
    pixel_handoff: Literal["as_is", "bf16", "bf16_cpu"] = Field(
        "as_is",
        description="vllm backend, with preprocess_threads > 0: how the processed pixel tensor "
        "(pixel_values_videos, float32 from the HF processor) is handed to vLLM's engine core. `as_is`: "
        "unchanged (with the GPU processor vLLM copies it GPU -> CPU on the replica's event loop while "
        "serialising); `bf16`: cast to bfloat16 in the preprocessing thread (half the bytes; the vision "
        "tower casts to bf16 first anyway, so the numbers are identical); `bf16_cpu`: cast and copy to "
        "host memory in the preprocessing thread, so the event loop only hands over host bytes. No effect with "
        "patchify `table` or vision_input `patches` (the pixels are bf16 in host memory already).",
    )
    vision_input: Literal["frames", "patches"] = Field(
        "frames",
        description="How clips reach the engine. `frames`: uint8 frames; the engine's HF processor normalises "
        "and patchifies them in the model replica (on the GPU with processor_kwargs {device: cuda}; or the "
        "project's table, see `patchify`). `patches`: "
        "the CPU decode tier (and the stream workers) normalise and patchify each clip into the vision tower's "
        "bf16 input (identical values; serve_app/decode/vision_patches.py) and the replica hands it to the engine with "
        "no processor run; needs backend `vllm` (or an injected engine) and sets engine_args.enable_mm_embeds.",
    )
    patchify: Literal["processor", "table"] = Field(
        "processor",
        description="vllm backend, vision_input `frames`: how the model replica turns a clip's frames into the "
        "vision tower's input. `processor`: vLLM's HF processor (processor_kwargs apply). `table`: the project's "
        "lookup-table patchify (serve_app/decode/vision_patches.py: the same bf16 values) as torch ops on "
        "processor_kwargs.device (cuda: one upload of the uint8 frames, one download of the bf16 rows; cpu: "
        "numpy), in the preprocessing threads (inline without them), handed to the engine as processed "
        "fields; sets engine_args.enable_mm_embeds. "
        "With vision_input `patches` no frames reach the replica and this has no effect.",
    )
    engine_process: Literal["forkserver", "spawn"] = Field(
        "forkserver",
        description="vllm backend: how the engine-core process (the one holding the GPU) is started. "
        "`forkserver`: forked from a server that imports vLLM while the replica does, so the engine core does "
        "not import vLLM a second time after the replica (18 s of an 84-s warm start on the H200, "
        "results/gpu/lifecycle/); `spawn`: vLLM's own choice inside a Ray actor (a fresh interpreter that "
        "imports vLLM again). Engine arguments with numa_bind always use spawn (vLLM swaps the executable).",
    )
    compile_cache_dir: str | None = Field(
        None,
        description="vllm backend: directory for vLLM's torch.compile/AOT artifacts, Inductor's and Triton's "
        "kernel caches (sets VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR under it for the "
        "replica and its engine core). A later start with the same model and engine arguments loads the "
        "compiled graphs from it instead of compiling (the replica logs whether it was warm). Put it on a "
        "volume the model pods share (KubeRay) or a local directory that survives restarts. None: vLLM's "
        "defaults (~/.cache/vllm, ~/.triton, /tmp/torchinductor_$USER).",
    )
    device: str = Field("cpu", description="torch device of the transformers backend.")
    max_concurrent_requests: int = Field(
        1, ge=1, description="transformers backend: requests generated at once (a lock; CPU generate is serial)."
    )
    system_prompt: str = Field(COSMOS_SYSTEM_PROMPT, description="System prompt (default: the Cosmos-Reason1 one).")
    sampling: SamplingDefaults = Field(default_factory=SamplingDefaults, description="Generation defaults.")
    max_model_len: int | None = Field(
        None,
        gt=0,
        description="The engine's context length in tokens (prompt, video and output). None: vLLM's "
        "engine_args.max_model_len. A clip whose video tokens do not fit is refused with 400 before the engine.",
    )
    allow_ignore_eos: bool = Field(
        False, description="Accept the benchmark-only `ignore_eos` request option (random-weight models)."
    )
    warmup: bool = Field(True, description="Send warm-up clips through the engine when the replica starts.")
    warmup_clips: int = Field(
        1,
        ge=1,
        le=256,
        description="Warm-up clips sent at once, with the sampling defaults of real requests. 16 or more "
        "(batches of 8-15 and of 16 sequences both occur) make vLLM 0.24 compile its batch-size-specialised "
        "top-k/top-p sampler kernel (Triton, used from 8 sequences) before the replica "
        "reports ready instead of during the first burst of clips (results/gpu/NOTES.md, session 5: the first "
        "64-clip burst after start ran at 2.06 clips/s, the next at 2.49). It does not make the first burst "
        "fully warm: session 6's graph ran its first burst after 32 warm-up clips at 2.47-2.53, later 3.06.",
    )
    warmup_clip_shape: tuple[int, int, int] = Field(
        (2, 336, 336),
        description="Warm-up clip (frames, height, width) in pixels, uint8 zeros; an even number of frames "
        "(>= 2, as every decoded clip: engines take T even), height and width multiples "
        "of 28, a frame area of 4·28² to 16384·28² px (the Qwen2.5-VL processor's min/max_pixels). Use the "
        "shape of real clips (e.g. [40, 420, 756]: a 10-s 16:9 window at 4 fps) to warm their shapes too.",
    )
    warmup_max_tokens: int = Field(2, ge=1, le=1024, description="Output tokens per warm-up clip.")
    warmup_decode_sweep: int = Field(
        0,
        ge=0,
        le=1024,
        description="After the warm-up clips, this many tiny clips (2 frames of 56x56 px, 4 video tokens) at once, "
        "clip i asking for i+1 output tokens (end-of-sequence ignored), with the sampling defaults of real "
        "requests: every decode batch size from this number down to 1 runs once, so the kernels vLLM compiles "
        "per batch shape (Triton sampler and slot-mapping kernels) are compiled before the replica reports "
        "ready, not during the first burst. Costs about this many decode steps. Set it to the engine's "
        "max_num_seqs; 0: off.",
    )
    stream_interval_ms: float = Field(
        50.0,
        ge=0,
        description="Merge token deltas leaving the model replica over this many ms (0: one item per delta); "
        "the first delta is never held. 50 ms is Ray Serve LLM's default (RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS).",
    )

    @model_validator(mode="after")
    def _no_video_pruning(self) -> ModelConfig:
        rate = self.engine_args.get("video_pruning_rate")
        if rate:  # None or 0: off
            raise ValueError(
                f"model.engine_args.video_pruning_rate {rate} (EVS) is refused: vLLM 0.24 casts Qwen2.5-VL's "
                "seconds per frame pair to an integer when pruning (second_per_grid_ts.long() in "
                "qwen2_5_vl.py), so at 4 fps (0.5 s) every frame gets temporal position 0, and its engine died "
                "under 64 clips in flight (issue 12); remove video_pruning_rate"
            )
        return self

    @model_validator(mode="after")
    def _warmup_shape(self) -> ModelConfig:
        t, h, w = self.warmup_clip_shape
        bad_t = t < TEMPORAL_PATCH_SIZE or t % TEMPORAL_PATCH_SIZE
        if bad_t or h % PIXEL_FACTOR or w % PIXEL_FACTOR or not MIN_PIXELS <= h * w <= MAX_PIXELS:
            raise ValueError(
                f"model.warmup_clip_shape {list(self.warmup_clip_shape)}: needs an even number of frames "
                f"(>= {TEMPORAL_PATCH_SIZE}), height and width "
                f"multiples of {PIXEL_FACTOR} and a frame area of {MIN_PIXELS}..{MAX_PIXELS} px (the sizes the "
                "vision processor keeps)"
            )
        context = self.context_tokens
        video_tokens = (t // TEMPORAL_PATCH_SIZE) * (h // PIXEL_FACTOR) * (w // PIXEL_FACTOR)
        if context and video_tokens + WARMUP_TEXT_TOKENS + self.warmup_max_tokens > context:
            raise ValueError(
                f"model.warmup_clip_shape {list(self.warmup_clip_shape)} makes {video_tokens} video tokens; with "
                f"~{WARMUP_TEXT_TOKENS} prompt tokens and warmup_max_tokens {self.warmup_max_tokens} that exceeds "
                f"the engine's context of {context} tokens (max_model_len): use a smaller warm-up clip"
            )
        return self

    @model_validator(mode="after")
    def _processed_input_needs_vllm(self) -> ModelConfig:
        """Patches from the decode tier and the table patchify hand vLLM processed fields; the
        transformers backend runs its own processor on frames."""
        if self.backend != "transformers":
            return self
        frames_only = (("vision_input", self.vision_input, "frames"), ("patchify", self.patchify, "processor"))
        for name, value, default in frames_only:
            if value != default:
                raise ValueError(
                    f"model.{name} '{value}' needs backend 'vllm' (the transformers backend runs its own "
                    f"processor on frames); use {name} '{default}'"
                )
        return self

    @property
    def name(self) -> str:
        """The model name reported to clients."""
        return self.served_model_name or self.model_id

    @property
    def context_tokens(self) -> int | None:
        """The engine's context length in tokens: ``max_model_len``, else ``engine_args.max_model_len``."""
        value = self.max_model_len or self.engine_args.get("max_model_len")
        return int(value) if value else None


class DeploymentOptions(_Model):
    """Ray Serve options of one deployment (mapped onto ``Deployment.options``)."""

    num_replicas: int | None = Field(None, ge=1, description="Fixed replica count (omit with autoscaling).")
    autoscaling_config: dict[str, Any] | None = Field(
        None, description="Ray Serve AutoscalingConfig (min/max_replicas, target_ongoing_requests, …)."
    )
    num_cpus: float = Field(1.0, ge=0, description="CPUs reserved per replica.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs reserved per replica.")
    memory_bytes: int | None = Field(None, gt=0, description="Memory reserved per replica, in bytes.")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Ray custom resources reserved per replica (units; e.g. {cosmos_streams_db: 1} pins the "
        "stream worker to the KubeRay worker group that offers it, the one that mounts the stream database).",
    )
    max_ongoing_requests: int = Field(8, ge=1, description="Requests one replica runs at once.")
    max_queued_requests: int = Field(-1, ge=-1, description="Requests queued for the deployment (-1: unbounded).")
    health_check_period_s: float = Field(10.0, gt=0, description="Seconds between replica health checks.")
    health_check_timeout_s: float = Field(30.0, gt=0, description="Seconds before a health check counts as failed.")

    @model_validator(mode="after")
    def _one_scaling_mode(self) -> DeploymentOptions:
        if self.num_replicas is not None and self.autoscaling_config is not None:
            raise ValueError("set num_replicas or autoscaling_config, not both")
        return self

    def ray_options(self) -> dict[str, Any]:
        """Keyword arguments for ``Deployment.options``."""
        actor: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory_bytes:
            actor["memory"] = self.memory_bytes
        if self.resources:
            actor["resources"] = dict(self.resources)
        opts: dict[str, Any] = {
            "ray_actor_options": actor,
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "health_check_period_s": self.health_check_period_s,
            "health_check_timeout_s": self.health_check_timeout_s,
        }
        if self.autoscaling_config is not None:
            opts["autoscaling_config"] = self.autoscaling_config
        else:
            opts["num_replicas"] = self.num_replicas or 1
        return opts


#: Each deployment block's defaults (``DeploymentOptions``' own defaults fill the rest). A block given in a
#: config file is laid over these, key by key: ``stream_worker: {num_cpus: 0.2}`` keeps
#: ``max_ongoing_requests: 256`` (was: a partial block fell back to DeploymentOptions' 8, so eight idle
#: event subscribers, each holding a 15-s long poll, stalled the streams API). A block that sets
#: ``num_replicas`` drops a default ``autoscaling_config``, and the other way round.
DEPLOYMENT_DEFAULTS: dict[str, dict[str, Any]] = {
    "ingress": {"num_cpus": 0.1, "max_ongoing_requests": 256},
    "decoder": {
        "num_cpus": 1.0,
        "max_ongoing_requests": 2,
        "max_queued_requests": 64,
        "autoscaling_config": {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 1},
    },
    "model_replica": {"num_cpus": 1.0, "max_ongoing_requests": 64, "max_queued_requests": 128},
    "stream_worker": {"num_cpus": 0.5, "num_replicas": 1, "max_ongoing_requests": 256},
}
#: Stream-worker slots kept for the streams API (list, status, register, delete, thumbnails) on top of one
#: long poll per event subscriber of every ingress replica.
STREAM_API_SLOTS = 16


def deployment_defaults(name: str, block: Any) -> Any:
    """``block`` (a deployment's options as given) laid over the defaults of deployment ``name``
    (:data:`DEPLOYMENT_DEFAULTS`), as validated :class:`DeploymentOptions` whose set fields are still
    the ones the block gave (what ``exclude_unset`` dumps, e.g. the KubeRay render); anything but a
    dict is returned as it is (validation reports it)."""
    if not isinstance(block, dict):
        return block
    base = copy.deepcopy(DEPLOYMENT_DEFAULTS[name])
    if "num_replicas" in block:
        base.pop("autoscaling_config", None)
    if "autoscaling_config" in block:
        base.pop("num_replicas", None)
    options = DeploymentOptions.model_validate({**base, **block})
    object.__setattr__(options, "__pydantic_fields_set__", set(block) & set(DeploymentOptions.model_fields))
    return options


class StreamsConfig(_Model):
    """Live camera streams (``/v1/streams``): limits, persistence, reconnects (see :mod:`serve_app.streams`)."""

    db_path: str | None = Field(
        None,
        description="SQLite file holding the registered streams and their bounded answer history, so they "
        "resume after a restart (relative: to the cwd of `serve run`; on KubeRay a path on a volume that "
        "outlives the pod). None: kept in memory only (streams are lost with the worker replica).",
    )
    max_streams: int = Field(64, ge=0, description="Most registered streams (0: the streams API is off).")
    max_subscribers: int = Field(
        16, ge=1, description="Most concurrent server-sent-event subscribers per ingress replica (beyond: 503)."
    )
    max_window_s: float = Field(60.0, gt=0, description="Longest `window_s` a stream may ask for, seconds.")
    max_fps: float = Field(8.0, gt=0, le=30, description="Highest `fps` a stream may ask for, frames/s.")
    max_window_frames: int = Field(
        128,
        ge=1,
        description="Most frames one stream window may hold (`window_s` × `fps`), frames; at most limits.max_frames "
        "(the clip routes' limit): a stream holds its windows for as long as it runs.",
    )
    max_frame_memory_bytes: int = Field(
        2 * 2**30,
        gt=0,
        description="Frame memory the stream worker may hold for all streams together, bytes. Each stream reserves "
        "the most its windows can hold (serve_app/cameras/rules.py: window frames at the model's size, the window "
        "being filled and those waiting for the model in YUV 4:2:0, the one handed to the model in RGB) when it is "
        "registered (past the budget: 503 naming it) or resumed (past it: the stream is failed with the reason).",
    )
    max_questions: int = Field(8, ge=1, description="Most questions per stream.")
    pending_windows: int = Field(
        1, ge=1, description="Windows a stream may hold waiting for the model; when full the oldest is dropped."
    )
    event_history: int = Field(2000, ge=10, description="Events kept for Last-Event-ID replay (all streams).")
    answer_history: int = Field(50, ge=1, description="Answers (with thumbnails) kept per stream in the database.")
    thumbnail_width: int = Field(320, ge=32, le=1280, description="Width of the per-window JPEG thumbnail, pixels.")
    reconnect_initial_s: float = Field(0.5, gt=0, description="First reconnect delay after a camera fails, seconds.")
    reconnect_max_s: float = Field(
        10.0, gt=0, description="Longest reconnect delay (exponential backoff cap), seconds."
    )
    read_timeout_s: float = Field(
        5.0, gt=0, description="Seconds without a packet before a camera counts as stalled and is reconnected."
    )
    max_failed_connects: int = Field(
        20,
        ge=0,
        description="Connection attempts in a row that bring no frame before a stream is failed (state failed, "
        "with the last error; with the backoff's 10-s cap about 3 minutes); 0: retry forever. Errors no retry "
        "can fix (not a video, no video stream, a forbidden source) fail a stream at once.",
    )
    webhook_timeout_s: float = Field(
        5.0, gt=0, description="Seconds one webhook delivery attempt may take in total (connect, send, answer)."
    )
    webhook_retries: int = Field(
        3, ge=0, le=10, description="Retries of a webhook delivery after a transport error, timeout, 5xx, 408 or 429 "
        "(exponential backoff); a 3xx or other 4xx is not retried.",
    )
    webhook_max_in_flight: int = Field(
        32, ge=1, description="Webhook deliveries in flight at once, all streams; an alert past it is skipped."
    )
    webhook_max_in_flight_per_stream: int = Field(
        4, ge=1, description="Webhook deliveries in flight at once for one stream, so one slow endpoint cannot take "
        "every place; an alert past it is skipped (counted in the stream's status and cosmos_stream_webhooks).",
    )


class AppConfig(_Model):
    """Everything ``build_app`` needs: the Serve YAML's ``args:``."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="Model replica settings.")
    decode: DecodeConfig = Field(default_factory=DecodeConfig, description="Decoding and sampling.")
    limits: LimitsConfig = Field(default_factory=LimitsConfig, description="Request limits.")
    sources: SourcesConfig = Field(default_factory=SourcesConfig, description="Allowed clip sources.")
    security: SecurityConfig = Field(default_factory=SecurityConfig, description="Defences against hostile clients.")
    api_key_env: str | None = Field(
        "COSMOS_SERVE_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Environment variable (in the ingress replica) holding the API key; unset/empty: no auth. "
        "Every route but /healthz then needs 'Authorization: Bearer <key>'.",
    )
    ingress: DeploymentOptions = Field(
        default_factory=lambda: DeploymentOptions(**DEPLOYMENT_DEFAULTS["ingress"]),
        description="HTTP ingress deployment options (a partial block keeps the other defaults).",
    )
    decoder: DeploymentOptions = Field(
        default_factory=lambda: DeploymentOptions(**DEPLOYMENT_DEFAULTS["decoder"]),
        description="Video decode deployment options (CPU; autoscaled; a partial block keeps the other defaults).",
    )
    model_replica: DeploymentOptions = Field(
        default_factory=lambda: DeploymentOptions(**DEPLOYMENT_DEFAULTS["model_replica"]),
        description="Model deployment options (one GPU per replica in the GPU configs; a partial block keeps the "
        "other defaults).",
    )
    streams: StreamsConfig = Field(default_factory=StreamsConfig, description="Live camera streams.")
    stream_worker: DeploymentOptions = Field(
        default_factory=lambda: DeploymentOptions(**DEPLOYMENT_DEFAULTS["stream_worker"]),
        description="Stream-worker deployment options (one replica reads every registered camera; it never "
        "takes the decode replicas that serve one-off clips; a partial block keeps the other defaults). Its "
        "max_ongoing_requests must hold one long poll per event subscriber of every ingress replica plus "
        f"{STREAM_API_SLOTS} for the streams API.",
    )

    @field_validator(*DEPLOYMENT_DEFAULTS, mode="before")
    @classmethod
    def _partial_deployment_block(cls, block: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None
        return deployment_defaults(info.field_name, block)

    @model_validator(mode="after")
    def _stream_worker_holds_every_subscriber(self) -> AppConfig:
        if self.streams.max_streams == 0:
            return self
        ingress = self.ingress
        replicas = ingress.num_replicas or int((ingress.autoscaling_config or {}).get("max_replicas", 1))
        need = self.streams.max_subscribers * replicas + STREAM_API_SLOTS
        have = self.stream_worker.max_ongoing_requests
        if have < need:
            raise ValueError(
                f"stream_worker.max_ongoing_requests {have} is under {need}: each event subscriber holds a long poll "
                f"on the stream worker (streams.max_subscribers {self.streams.max_subscribers} × {replicas} ingress "
                f"replica(s)), plus {STREAM_API_SLOTS} for the streams API; raise it or lower streams.max_subscribers"
            )
        return self

    @model_validator(mode="after")
    def _stream_window_under_clip_limit(self) -> AppConfig:
        if self.streams.max_window_frames > self.limits.max_frames:
            raise ValueError(
                f"streams.max_window_frames {self.streams.max_window_frames} exceeds limits.max_frames "
                f"{self.limits.max_frames}: a stream window may not hold more frames than a clip"
            )
        return self


def load_serve_config(path: str | Path) -> dict[str, Any]:
    """Reads a Serve config file (YAML) into a dict."""
    doc: dict[str, Any] = yaml.safe_load(Path(path).read_text())
    return doc


def app_config_from_file(path: str | Path, app_index: int = 0) -> AppConfig:
    """The :class:`AppConfig` of one application in a Serve config file.

    Raises:
        pydantic.ValidationError: the ``args`` do not match the config model.
        KeyError, IndexError: the file has no such application.
    """
    doc = load_serve_config(path)
    return AppConfig.model_validate(doc["applications"][app_index].get("args") or {})


def override(doc: dict[str, Any], assignments: list[str], app_index: int = 0) -> dict[str, Any]:
    """Applies ``dotted.key=value`` assignments to one application's ``args`` (values parsed as YAML).

    Example: ``model.engine_args.load_format=dummy``. The result is validated
    against :class:`AppConfig`.

    Raises:
        ValueError: an assignment without ``=``.
        pydantic.ValidationError: the result is not a valid config.
    """
    import copy

    out = copy.deepcopy(doc)
    args = out["applications"][app_index].setdefault("args", {})
    for a in assignments:
        key, sep, raw = a.partition("=")
        if not sep:
            raise ValueError(f"expected key=value, got {a!r}")
        node = args
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(raw)
    AppConfig.model_validate(args)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m serve_app.config override CONFIG key=value ... [-o OUT]`` writes a derived Serve config."""
    import argparse
    import sys

    p = argparse.ArgumentParser(description="derive a Serve config with overridden args (validated)")
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("override", help="apply dotted.key=value overrides to an application's args")
    o.add_argument("config")
    o.add_argument("assignments", nargs="*")
    o.add_argument("-o", "--out", help="output file (default: stdout)")
    o.add_argument("--app", type=int, default=0, help="application index")
    args = p.parse_args(argv)
    doc = override(load_serve_config(args.config), args.assignments, args.app)
    text = yaml.safe_dump(doc, sort_keys=False)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
