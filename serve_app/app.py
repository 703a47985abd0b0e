"""The application builder: the ``import_path`` of every Serve config.

``serve run configs/cpu.yaml`` calls :func:`build_app` with the YAML's
``args:``; the graph is Ingress → VideoDecoder → VideoModel (and Ingress → StreamWorker(s) →
VideoModel for live cameras), composed with
``DeploymentHandle``s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve import Application, Deployment
from ray.serve.exceptions import RayServeException

from serve_app.config import AppConfig
from serve_app.deployments.decoder import VideoDecoder
from serve_app.deployments.ingress import Ingress
from serve_app.deployments.ingress_guards import ingress_slots
from serve_app.deployments.model import VideoModel
from serve_app.deployments.stream_worker import StreamWorker
from serve_app.log_limit import get_logger
from serve_app.model.preflight import HardwareError, check_build

logger = get_logger(__name__)


def resolve_paths(config: AppConfig) -> AppConfig:
    """Makes relative local paths absolute against the current directory.

    Replicas may run with another working directory, so ``model_id`` (when it
    is a local path or a checkpoint to build) and the allowed roots are fixed
    here, where the user's relative paths mean what they wrote.
    """
    model = config.model
    model_id = model.model_id
    is_local = model.checkpoint is not None or model_id.startswith((".", "/", "~")) or Path(model_id).exists()
    if is_local:
        model_id = str(Path(model_id).expanduser().resolve())
    roots = [str(Path(r).expanduser().resolve()) for r in config.sources.allowed_roots]
    db = config.streams.db_path
    db_path = None if db in (None, ":memory:") else str(Path(db).expanduser().resolve())
    return config.model_copy(
        update={
            "model": model.model_copy(update={"model_id": model_id}),
            "sources": config.sources.model_copy(update={"allowed_roots": roots}),
            "streams": config.streams.model_copy(update={"db_path": db_path}),
        }
    )


#: Appended to a refusal at build time: what ``serve run`` does next, and the check that exits.
SERVE_RUN_NOTE = (
    "(`serve run` keeps waiting until Ctrl-C; `python -m serve_app.preflight CONFIG` checks a config "
    "before deploying it and exits non-zero.)"
)


class BuildRefusedError(HardwareError, RayServeException):
    """The preflight's refusal as Ray Serve reports it best.

    Serve's controller builds a config file's application in a task. An exception of type
    ``RayServeException`` raised there becomes the application's ``DEPLOY_FAILED`` message as it
    is (``serve status``, and one controller log line in the ``serve run`` terminal); any other
    exception is retried three times and logged inside Ray's tracebacks (Ray 2.60,
    ``ray/serve/_private/application_state.py``: ``build_serve_application``). ``serve run`` keeps
    running either way: ``python -m serve_app.preflight CONFIG`` is the check that exits.
    """


def stream_worker_name(shard: int) -> str:
    """The deployment name of stream worker ``shard``: ``StreamWorker``, then ``StreamWorker1``, ``StreamWorker2`` …
    (worker 0 keeps the one-worker name, so logs, metrics and dashboards of one worker read as before)."""
    return "StreamWorker" if shard == 0 else f"StreamWorker{shard}"


def as_deployment(cls: object) -> Deployment:
    """The :class:`ray.serve.Deployment` that a ``@serve.deployment`` class became.

    Type checkers keep a decorated class's own type; this checks, at run time, what Serve made of it.

    Raises:
        TypeError: ``cls`` is not a Serve deployment.
    """
    if not isinstance(cls, Deployment):
        raise TypeError(f"{cls!r} is not a Serve deployment (decorate it with @serve.deployment)")
    return cls


def build_app(args: dict[str, Any] | None = None) -> Application:
    """Builds the Serve application from a Serve config's ``args``.

    Raises:
        pydantic.ValidationError: ``args`` do not match :class:`AppConfig`.
        BuildRefusedError: (a :class:`serve_app.model.preflight.HardwareError`) on a local one-node Ray,
            the model replica needs vLLM or GPUs that are missing, or the deployments more CPUs
            than the node has (see :mod:`serve_app.model.preflight`).
    """
    config = resolve_paths(AppConfig.model_validate(args or {}))
    try:
        check_build(config)
    except HardwareError as e:
        raise BuildRefusedError(f"{e} {SERVE_RUN_NOTE}") from None
    cfg = config.model_dump(mode="json")
    decoder = as_deployment(VideoDecoder).options(**config.decoder.ray_options()).bind(cfg)
    model = as_deployment(VideoModel).options(**config.model_replica.ray_options()).bind(cfg)
    ingress = config.ingress.ray_options()
    # security: Serve's slots = admitted requests + event subscribers + slots kept for health checks
    ingress["max_ongoing_requests"] = ingress_slots(config)
    if config.streams.max_streams == 0:
        return as_deployment(Ingress).options(**ingress).bind(cfg, decoder, model)
    workers = [
        as_deployment(StreamWorker)
        .options(name=stream_worker_name(k), **config.stream_worker.ray_options())
        .bind(cfg, model, k)
        for k in range(config.streams.workers)
    ]
    return as_deployment(Ingress).options(**ingress).bind(cfg, decoder, model, workers)
