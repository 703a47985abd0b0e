"""The whole application config (:class:`AppConfig`): every section, and the checks that span sections."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from serve_app.config.base import _Model
from serve_app.config.clients import LimitsConfig, SecurityConfig, SourcesConfig
from serve_app.config.decode import DecodeConfig, PixelBudget
from serve_app.config.deployments import (
    DEPLOYMENT_DEFAULTS,
    STREAM_API_SLOTS,
    DeploymentOptions,
    deployment_defaults,
)
from serve_app.config.families import DEFAULTS
from serve_app.config.model import ModelConfig
from serve_app.config.streams import StreamsConfig


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

    @model_validator(mode="after")
    def _family_pixel_budget(self) -> AppConfig:
        """``decode.budget`` not given: the model family's recipe (Cosmos-Reason1's 28-px units or
        Cosmos-Reason2's 32-px ones; :data:`serve_app.config.families.DEFAULTS`)."""
        if "budget" in self.decode.model_fields_set:
            return self
        d = DEFAULTS[self.model.family_name]
        budget = PixelBudget(
            total_pixels=d.total_pixels, max_frame_pixels=d.max_frame_pixels, min_frame_pixels=d.min_frame_pixels
        )
        if budget != self.decode.budget:
            # frozen models: set once here, during validation, before anyone holds the value
            object.__setattr__(self, "decode", self.decode.model_copy(update={"budget": budget}))
        return self

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
    def _one_replica_per_stream_worker(self) -> AppConfig:
        """A stream worker owns its streams (readers, events, frame budget): Serve would send each request
        to any replica, so more cameras take more workers (``streams.workers``), never more replicas."""
        worker = self.stream_worker
        if self.streams.max_streams > 0 and (worker.num_replicas not in (None, 1) or worker.autoscaling_config):
            raise ValueError(
                "stream_worker runs one replica (num_replicas: 1, no autoscaling_config): each replica would own "
                "only the streams it registered; for more cameras set streams.workers (stream-worker deployments "
                "that share the cameras by stream id)"
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

    @model_validator(mode="after")
    def _shared_gpu_memory(self) -> AppConfig:
        """vLLM replicas sharing a GPU (``model_replica.num_gpus`` under 1) must each ask for at most their share
        of its memory, or the second one to start finds the GPU full (vLLM's own default is 0.9)."""
        share = self.model_replica.num_gpus
        if self.model.backend != "vllm" or not 0 < share < 1:
            return self
        util = self.model.engine_args.get("gpu_memory_utilization")
        if not isinstance(util, int | float) or util > share:
            now = "not set (vLLM's default is 0.9)" if util is None else f"{util!r}"
            raise ValueError(
                f"model_replica.num_gpus {share:g} puts several vLLM replicas on one GPU: set "
                f"model.engine_args.gpu_memory_utilization to at most {share:g}, each replica's share of the GPU's "
                f"memory (it is {now})"
            )
        return self
