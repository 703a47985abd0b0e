"""Ray Serve options of the deployments (``ingress:``, ``decoder:``, ``model_replica:``, ``stream_worker:``)
and each one's defaults, which a partial block keeps."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import Field, model_validator

from serve_app.config.base import _Model


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
