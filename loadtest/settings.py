"""The load tester's typed settings: cameras and run options (pydantic, unknown keys rejected).

The CLI (``python -m loadtest``) builds one :class:`RunSettings`; a cameras
file (``--cameras-file cameras.yaml``, a YAML list of :class:`CameraSpec`
mappings) sets per-camera source, window, fps and questions. Server limits
come from the server's own Serve config (``--config configs/cpu.yaml``,
read with :func:`serve_app.config.app_config_from_file`) and are checked by
:func:`check_against_server` before anything is sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadtest.camera import is_url

OWN_FIELDS = frozenset({"model", "messages", "max_tokens", "stream", "stream_options", "temperature", "seed",
                        "ignore_eos"})
"""The request fields the load tester sets itself (api openai): ``extra_body`` may not replace them."""

if TYPE_CHECKING:
    from serve_app.config import AppConfig

#: The bundled clip every camera replays unless told otherwise (30 s, parking lot; CC-BY-4.0 Intel).
DEFAULT_SOURCE = str(Path(__file__).resolve().parents[1] / "tests" / "data" / "intel_car-detection.mp4")

#: Surveillance questions asked round-robin (window k gets question k mod len).
DEFAULT_QUESTIONS = (
    "Is anyone in this scene in danger?",
    "Describe any unusual activity in this clip.",
    "How many vehicles move through the scene, and where do they go?",
    "Is any person or vehicle behaving unsafely? Answer yes or no, then explain.",
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CameraSpec(_Model):
    """One camera feed."""

    id: str = Field(..., min_length=1, max_length=128, description="Camera label (sent as camera_id).")
    source: str = Field(DEFAULT_SOURCE, description="Local clip (looped) or an rtsp/http(s) URL.")
    window_s: float = Field(10.0, gt=0, description="Window length in seconds; one request per window.")
    fps: float | None = Field(None, gt=0, le=30, description="Sampling rate sent to the server (None: its default).")
    max_frames: int | None = Field(None, ge=2, description="Frame cap sent to the server (None: its default).")
    questions: list[str] = Field(default_factory=lambda: list(DEFAULT_QUESTIONS), min_length=1,
                                 description="Questions asked round-robin.")
    duration_s: float | None = Field(None, gt=0, description="URL sources: loop length in seconds (None: live).")


class RunSettings(_Model):
    """One run of the load tester."""

    target: str = Field("http://127.0.0.1:8000", description="Base URL of the app (default: loopback).")
    api: Literal["native", "openai"] = Field(
        "native", description="native: this service's POST /v1/video/query; openai: POST /v1/chat/completions of "
        "any OpenAI-compatible server (plain vllm serve included), each window's cut bytes as a video_url data URL.")
    route: str | None = Field(None, description="Query route (None: /v1/video/query, or /v1/chat/completions "
                              "with api openai).")
    model: str | None = Field(None, description="api openai: the model name sent (None: the first of the "
                              "server's GET /v1/models).")
    all_questions: bool = Field(False, description="Ask every question of a camera about every window (one request "
                                "each, sent together) instead of one question per window, round-robin.")
    cameras: list[CameraSpec] = Field(..., min_length=1, description="The camera feeds.")
    schedule: Literal["realtime", "interval", "poisson", "closed"] = Field("realtime", description="Arrival model.")
    interval_s: float | None = Field(None, gt=0, description="interval/poisson: period / mean gap per camera "
                                     "(None: each camera's window length); closed: a worker's minimum gap "
                                     "between sends (None: back to back).")
    concurrency: int | None = Field(None, ge=1, description="closed: requests in flight (None: one per camera).")
    stagger: Literal["uniform", "random", "none"] = Field("uniform", description="Camera phase spread.")
    seed: int = Field(0, description="Seed of random phases and Poisson gaps.")
    duration_s: float = Field(60.0, gt=0, description="No request is scheduled after this many seconds.")
    warmup_s: float = Field(0.0, ge=0, description="Requests scheduled before this are sent but not measured.")
    max_requests: int = Field(10_000, ge=1, description="Cap on requests sent.")
    request_timeout_s: float = Field(120.0, gt=0, description="Client timeout per request, seconds.")
    drain_s: float | None = Field(None, ge=0, description="After the last send, wait this long for answers "
                                  "(None: 2 × SLO); still-running requests are recorded as unfinished.")
    transport: Literal["upload", "path"] = Field("upload", description="upload: cut windows and send bytes; "
                                                 "path: JSON video_path + start_s/end_s (server-local files).")
    stream: bool = Field(True, description="Stream answers (server-sent events) to measure TTFT.")
    max_tokens: int = Field(64, ge=1, description="Output budget sent with every request, tokens.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature (None: server default).")
    request_seed: int | None = Field(None, description="Sampling seed sent with requests.")
    ignore_eos: bool = Field(False, description="Benchmark-only: fixed output lengths (server must allow it).")
    extra_body: dict[str, Any] | None = Field(
        None, description="api openai: fields merged into every request body (as `vllm bench serve --extra-body`), "
        "e.g. {\"mm_processor_kwargs\": {\"device\": \"cuda\"}} for plain vLLM; they may not replace the "
        "fields the load tester sets (model, messages, max_tokens, stream, ...).")
    slo_s: float | None = Field(None, gt=0, description="p95 freshness objective (None: the longest window).")
    max_error_rate: float = Field(0.01, gt=0, le=1, description="Keeps-up limit on errors / requests.")
    max_lag_growth: float = Field(0.05, description="Keeps-up limit on lag growth, seconds per second.")
    max_connections: int | None = Field(None, ge=1, description="HTTP connection pool size (None: unlimited).")

    @model_validator(mode="after")
    def _extra_body_only_adds_to_openai_requests(self) -> RunSettings:
        if self.extra_body is not None and self.api != "openai":
            raise ValueError("extra_body is for api openai (this service's own routes take no extra fields)")
        if self.extra_body and set(self.extra_body) & OWN_FIELDS:
            raise ValueError("extra_body may not replace the load tester's own fields: "
                             + ", ".join(sorted(set(self.extra_body) & OWN_FIELDS)))
        return self

    @model_validator(mode="after")
    def _openai_needs_cut_windows(self) -> RunSettings:
        if self.api == "openai":
            urls = [c.id for c in self.cameras if is_url(c.source)]
            if self.transport != "upload" or urls:
                raise ValueError("api openai sends each window's bytes: use --transport upload and local clips "
                                 f"(URL cameras: {', '.join(urls) or 'none'})")
        return self

    @property
    def effective_route(self) -> str:
        """The route requests go to."""
        if self.route is not None:
            return self.route
        return "/v1/chat/completions" if self.api == "openai" else "/v1/video/query"

    @model_validator(mode="after")
    def _unique_ids(self) -> RunSettings:
        ids = [c.id for c in self.cameras]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"camera ids must be unique (repeated: {', '.join(dup)})")
        return self

    @property
    def effective_slo_s(self) -> float:
        """The freshness SLO in seconds."""
        return self.slo_s if self.slo_s is not None else max(c.window_s for c in self.cameras)

    @property
    def effective_drain_s(self) -> float:
        """Seconds to wait for answers after the last send."""
        return self.drain_s if self.drain_s is not None else 2 * self.effective_slo_s

    def intervals_s(self) -> list[float]:
        """Per camera: its window (realtime) or the open-loop interval, seconds."""
        if self.schedule == "realtime" or self.interval_s is None:
            return [c.window_s for c in self.cameras]
        return [self.interval_s] * len(self.cameras)


def make_cameras(
    n: int,
    sources: list[str] | None = None,
    *,
    window_s: float = 10.0,
    fps: float | None = None,
    max_frames: int | None = None,
    questions: list[str] | None = None,
    prefix: str = "cam-",
) -> list[CameraSpec]:
    """``n`` cameras replaying ``sources`` round-robin (default: the bundled clip)."""
    sources = sources or [DEFAULT_SOURCE]
    qs = questions or list(DEFAULT_QUESTIONS)
    return [
        CameraSpec(id=f"{prefix}{i}", source=sources[i % len(sources)], window_s=window_s, fps=fps,
                   max_frames=max_frames, questions=qs)
        for i in range(n)
    ]


def load_cameras_file(path: str | Path, defaults: dict[str, Any]) -> list[CameraSpec]:
    """Cameras from a YAML list; keys missing in an entry come from ``defaults``.

    Raises:
        pydantic.ValidationError: an unknown key or a bad value.
        ValueError: the file is not a non-empty list.
    """
    doc = yaml.safe_load(Path(path).read_text())
    if isinstance(doc, dict) and "cameras" in doc:
        doc = doc["cameras"]
    if not isinstance(doc, list) or not doc:
        raise ValueError(f"{path}: expected a non-empty YAML list of cameras")
    out = []
    for i, entry in enumerate(doc):
        entry = {"id": f"cam-{i}", **{k: v for k, v in defaults.items() if v is not None}, **(entry or {})}
        if isinstance(entry.get("questions"), str):
            entry["questions"] = [entry["questions"]]
        out.append(CameraSpec.model_validate(entry))
    return out


class ServerLimitError(ValueError):
    """The run asks for something the server's config refuses."""


def check_against_server(settings: RunSettings, app_config: AppConfig) -> None:
    """Checks the run against a server's :class:`serve_app.config.AppConfig` before sending.

    Raises:
        ServerLimitError: max_tokens, max_frames or a window over the server's limits,
            ignore_eos without ``model.allow_ignore_eos``, or path transport without allowed roots.
    """
    lim = app_config.limits
    problems = []
    if settings.max_tokens > lim.max_tokens:
        problems.append(f"max_tokens {settings.max_tokens} exceeds the server limit {lim.max_tokens}")
    if settings.ignore_eos and not app_config.model.allow_ignore_eos:
        problems.append("ignore_eos needs model.allow_ignore_eos: true in the server config")
    for c in settings.cameras:
        if c.max_frames is not None and c.max_frames > lim.max_frames:
            problems.append(f"{c.id}: max_frames {c.max_frames} exceeds the server limit {lim.max_frames}")
        if c.window_s > lim.max_clip_duration_s:
            problems.append(f"{c.id}: window {c.window_s} s exceeds the clip limit {lim.max_clip_duration_s} s")
    if settings.transport == "path" and not app_config.sources.allowed_roots:
        problems.append("transport 'path' needs sources.allowed_roots in the server config")
    if problems:
        raise ServerLimitError("; ".join(problems))

