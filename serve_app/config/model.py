"""The model replica (``model:``): checkpoint, engine and its arguments, generation defaults, warm-up."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from serve_app.config.base import _Model
from serve_app.config.families import DEFAULTS, FamilyName, resolve_family
from serve_app.model_facts import (
    COSMOS_MAX_TOKENS,
    COSMOS_REPETITION_PENALTY,
    COSMOS_SYSTEM_PROMPT,
    COSMOS_TEMPERATURE,
    COSMOS_TOP_P,
)
from serve_app.protocol import FrameGeometry


class SamplingDefaults(_Model):
    """Generation defaults: the model family's inference recipe (these field defaults are
    Cosmos-Reason1's; ``model.family: qwen3_vl`` fills Cosmos-Reason2's when ``model.sampling`` is not given)."""

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
    top_k: int = Field(
        0, ge=0, description="Sample among the k most likely tokens only; 0: all (Cosmos-Reason2 recipe: 20)."
    )
    presence_penalty: float = Field(
        0.0,
        ge=-2,
        le=2,
        description="Penalty on tokens already generated (vLLM backend; Cosmos-Reason2 recipe without reasoning: 1.5).",
    )


#: Prompt tokens of a warm-up request besides its video (system prompt, question, chat markup): an upper
#: bound for the project's system prompts (the GPU bench's whole prompt has 33 besides its 8,100 video tokens).
WARMUP_TEXT_TOKENS = 256


class ModelConfig(_Model):
    """The model replica: which checkpoint, which engine, which defaults."""

    model_id: str = Field(
        "nvidia/Cosmos-Reason1-7B", description="Hub id or local checkpoint directory (relative: to the cwd)."
    )
    served_model_name: str | None = Field(None, description="Name reported in responses; default: model_id.")
    family: Literal["auto", "qwen2_5_vl", "qwen3_vl"] = Field(
        "auto",
        description="Model family: `qwen2_5_vl` (Cosmos-Reason1-7B, Qwen2.5-VL) or `qwen3_vl` (Cosmos-Reason2-2B/8B, "
        "Qwen3-VL; the Cosmos 3 reasoners). It sets the frame geometry (28- or 32-px multiples), the chat "
        "format, the reasoning split and the defaults of system_prompt, sampling, warmup_clip_shape and "
        "decode.budget. `auto`: from the architectures in model_id's config.json, else from a known hub id "
        "(nvidia/Cosmos-Reason1-*, nvidia/Cosmos-Reason2-*, Qwen/Qwen2.5-VL-*, Qwen/Qwen3-VL-*; another hub id is "
        "refused), else (a generated checkpoint, a local path this machine cannot read) qwen2_5_vl, which the model "
        "replica checks against the checkpoint it loads; resolved when the config is loaded (docs/models.md).",
    )
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
    system_prompt: str = Field(
        COSMOS_SYSTEM_PROMPT,
        description="System prompt (default: the family's recipe: Cosmos-Reason1's asks for <think>/<answer>; "
        "Cosmos-Reason2's is 'You are a helpful assistant.'). Empty: no system message, as a plain vLLM request "
        "without one (the chat template's default applies: Qwen2.5-VL adds 'You are a helpful assistant.', "
        "Qwen3-VL nothing).",
    )
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
        "of the family's pixel factor (28; qwen3_vl: 32, default [2, 320, 320]), a frame area the processor "
        "keeps (Qwen2.5-VL: 4·28² to 16384·28² px, its min/max_pixels). Use the "
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
    log_stats_interval_s: float = Field(
        10.0,
        ge=0,
        description="Write vLLM's engine stats to the model replica's log every this many seconds while it "
        "serves (the `vllm serve` line: prompt and generation tokens/s, running and waiting requests, KV-cache "
        "use, prefix-cache and MM-cache hit rates); `vllm` engine only. 10 s is vLLM's VLLM_LOG_STATS_INTERVAL "
        "default; 0: off.",
    )
    prefill_hold: bool = Field(
        True,
        description="`vllm` engine: hand a clip's later questions (a stream's `questions`, a query's `questions`) "
        "to vLLM when the first one's first token came, so that they read its prefix-cache blocks; false: all at "
        "once. vLLM 0.24 looks a prefix up only when it admits a request, and a busy engine admitted the later "
        "questions before the first one's whole prefill: on one H200, 64 windows x 3 questions at once ran at "
        "1.14 windows/s all at once against 1.94 held (results/gpu/fleet-lease8/README.md).",
    )
    prefill_hold_min_requests: int = Field(
        0,
        ge=0,
        le=100_000,
        description="`vllm` engine, with `prefill_hold`: hold a clip's later questions only while vLLM tracks at "
        "least this many unfinished requests (running or waiting in its engine; those still in this replica's "
        "preprocessing or at the hold are not counted, so a burst at an idle engine sends its first ones "
        "unheld); below it they go at once, as with `prefill_hold: false`. 0: always hold; N > 0 is refused "
        "with `prefill_hold: false`. Read N off the "
        "Running/Waiting counts of vLLM's stats line (`log_stats_interval_s`): 4-6 running at 8 cameras x 3 "
        "questions on one H100, up to 192 in a burst of 64 windows x 3. At 8 cameras x 3 questions (bf16, "
        "one 60-s level each) p95 freshness read 3.018 s held against 2.684 s not, with the same prefill work "
        "(the later questions found the video in the prefix cache either way at that load; "
        "results/gpu/fleet-lease23/README.md). With 32 (the Hopper configs' value) on one H100: 8 cameras x 3 "
        "questions at p95 2.650 s against 3.003 s always held, vLLM's stats lines reading at most 7 running; a "
        "saturated loop at 0.977x the hold's windows/s (results/gpu/fleet-lease24/README.md).",
    )
    encoder_cache_tokens: int | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description="`vllm` engine: vLLM's encoder cache (vision-tower outputs kept on the GPU for reuse by "
        "multimodal id), in video tokens; null keeps vLLM 0.24's size, max_num_batched_tokens, which it takes "
        "no engine argument for. A clip's later questions find its video in the prefix cache only up to the "
        "last full 16-token block before their question (the reference 10-s window: all but the last 3 of its "
        "8,100 video tokens), so vLLM runs the vision tower again for them unless the first question's output "
        "is still in this cache; a busy engine overwrites a cache of max_num_batched_tokens (two windows) "
        "within a step. Each token costs hidden_size x 2 bytes of GPU memory outside the KV cache's share "
        "(7 KiB for Cosmos-Reason1-7B: 131,072 tokens, 16 windows, ~0.9 GiB). At most 1,048,576 (128 windows, ~7 GiB): "
        "at gpu_memory_utilization 0.90 an 80-GB GPU has ~8 GB outside vLLM's share.",
    )
    window_cascade_attention: bool = Field(
        False,
        description="`vllm` engine: in each decode step, read a window's shared video from the KV cache once "
        "for all its questions (per-window cascade attention, serve_app/model/engines/vllm_window_attention.py) "
        "instead of once per question. Applies to decode rows that share at least 256 tokens of whole KV blocks, "
        "with FlashAttention 3 and a bf16/fp16 KV cache; other steps and layers keep vLLM's attention. A step "
        "that uses it runs without a full CUDA graph. Sets the engine argument disable_cascade_attn to false. "
        "Matches FlashAttention on the H200. In the graph on an H100 it gave no measurable gain against its "
        "control (3 questions per window: 0.976x by latency, 1.013x counted; results/gpu/fleet-lease14/): off "
        "until it shows one and is checked with real weights.",
    )
    stream_interval_ms: float = Field(
        50.0,
        ge=0,
        description="Merge token deltas leaving the model replica over this many ms (0: one item per delta); "
        "the first delta is never held. 50 ms is Ray Serve LLM's default (RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS).",
    )

    @model_validator(mode="before")
    @classmethod
    def _family_defaults(cls, data: Any) -> Any:
        """Resolves ``family: auto`` and fills the family's defaults the config does not set."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        family = resolve_family(
            str(data.get("family", "auto")),
            str(data.get("model_id", cls.model_fields["model_id"].default)),
            data.get("checkpoint") is not None,
        )
        data["family"] = family
        d = DEFAULTS[family]
        data.setdefault("system_prompt", d.system_prompt)
        data.setdefault("warmup_clip_shape", d.warmup_clip_shape)
        recipe = {
            "temperature": d.temperature,
            "top_p": d.top_p,
            "repetition_penalty": d.repetition_penalty,
            "max_tokens": d.max_tokens,
            "top_k": d.top_k,
            "presence_penalty": d.presence_penalty,
        }
        given = data.get("sampling")
        if given is None or isinstance(given, dict):  # settings not given: the family's (a model value is kept)
            data["sampling"] = {**recipe, **(given or {})}
        return data

    @property
    def family_name(self) -> FamilyName:
        """The resolved family (never ``auto`` after validation)."""
        return self.family  # type: ignore[return-value]  # _family_defaults replaced auto

    @property
    def geometry(self) -> FrameGeometry:
        """The family's frame geometry (the decode tier's frame sizes)."""
        return DEFAULTS[self.family_name].geometry

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
    def _quantization_override_only_on_dummy_weights(self) -> ModelConfig:
        overrides = self.engine_args.get("hf_overrides")
        if isinstance(overrides, dict) and "quantization_config" in overrides \
                and self.engine_args.get("load_format") != "dummy":
            raise ValueError(
                "model.engine_args.hf_overrides.quantization_config makes vLLM read the checkpoint as one already "
                "quantized that way (fp8 weights and scales), which a bf16 checkpoint is not; it is for timing "
                "runs with engine_args.load_format: dummy. To serve a quantized checkpoint, point model.model_id "
                "at it (vLLM reads its own quantization_config); to quantize a bf16 one at load, use "
                "engine_args.quantization: fp8"
            )
        return self

    @model_validator(mode="after")
    def _hold_threshold_needs_the_hold(self) -> ModelConfig:
        if self.prefill_hold_min_requests and not self.prefill_hold:
            raise ValueError(
                f"model.prefill_hold_min_requests {self.prefill_hold_min_requests} applies only with "
                "model.prefill_hold: true (with false every question goes at once); set prefill_hold: true or "
                "prefill_hold_min_requests: 0"
            )
        return self

    @model_validator(mode="after")
    def _warmup_shape(self) -> ModelConfig:
        t, h, w = self.warmup_clip_shape
        geo = self.geometry
        f, tp = geo.pixel_factor, geo.temporal_patch
        lo, hi = DEFAULTS[self.family_name].frame_pixels
        if t < tp or t % tp or h % f or w % f or not lo <= h * w <= hi:
            raise ValueError(
                f"model.warmup_clip_shape {list(self.warmup_clip_shape)}: needs an even number of frames "
                f"(>= {tp}), height and width multiples of {f} and a frame area of {lo}..{hi} px (the sizes "
                f"the {self.family} vision processor keeps)"
            )
        context = self.context_tokens
        video_tokens = (t // tp) * (h // f) * (w // f)
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
        if self.backend != "transformers" and self.family == "qwen2_5_vl":
            return self
        # The project's patchify (patches from the decode tier, the table) is exact for Qwen2.5-VL only:
        # other families' frames go through their own HF processor.
        needs = "backend 'vllm' (the transformers backend runs its own processor on frames)"
        if self.family != "qwen2_5_vl":
            needs = f"family qwen2_5_vl (the project's patchify is Qwen2.5-VL's; {self.family} uses its HF processor)"
        frames_only = (("vision_input", self.vision_input, "frames"), ("patchify", self.patchify, "processor"))
        for name, value, default in frames_only:
            if value != default:
                raise ValueError(f"model.{name} '{value}' needs {needs}; use {name} '{default}'")
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
