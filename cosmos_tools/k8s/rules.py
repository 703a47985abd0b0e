"""The project's rules on top of the schemas (k8s/README.md, "Checks"): problems fail ``check``, warnings do not.

Each rule guards a failure that schemas cannot see: a ``serveConfigV2`` that
drifted from its config, a head that runs replicas, a CPU pod whose Ray sees a
GPU, a GPU group without a GPU, a pod evicted for its own cache, an ingress
without its API key, an immutable Job that blocks the next apply, two list
entries with one key (the API server keeps one of them, silently), a stream
database that is not on a volume of the pod that runs the stream worker, a
compile cache that is not on a volume of the pods that run the model.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cosmos_tools.k8s.render import ROOT, SERVE_PORT, RenderError, display_path, render_file, source_of
from cosmos_tools.k8s.schema import groups
from serve_app.config import AppConfig, DeploymentOptions

GPU_RESOURCE = "nvidia.com/gpu"
UPGRADE_TYPES = ("NewCluster", "NewClusterWithIncrementalUpgrade", "None")
#: Keyed lists of a pod spec and the key of each (Kubernetes' ``x-kubernetes-list-map-keys``
#: / ``patchMergeKey``): the API server merges two entries with one key into one.
LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "env": ("name",),
    "ports": ("containerPort", "protocol"),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "workerGroupSpecs": ("groupName",),
    "imagePullSecrets": ("name",),
}
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def ray_container(group: Mapping[str, Any]) -> dict[str, Any]:
    """The Ray container of a group's pod template: KubeRay's convention is the first one."""
    containers = group.get("template", {}).get("spec", {}).get("containers") or [{}]
    first: dict[str, Any] = containers[0]
    return first


def quantity(value: Any) -> float:
    """A Kubernetes quantity as a number: ``"500m"`` → 0.5, ``"8Gi"`` → 8 * 2**30, ``"2"`` → 2.0.

    Raises:
        ValueError: not a quantity.
    """
    text = str(value)
    binary = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
    decimal = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
    if text[-2:] in binary:
        return float(text[:-2]) * binary[text[-2:]]
    if text[-1:] in decimal:
        return float(text[:-1]) * decimal[text[-1:]]
    return float(text)


def ray_resources(group: Mapping[str, Any]) -> tuple[float, float]:
    """(CPUs, GPUs) one pod of the group gives Ray: rayStartParams, else the container limits (as KubeRay)."""
    params = group.get("rayStartParams") or {}
    limits = ray_container(group).get("resources", {}).get("limits", {})
    cpus = float(params["num-cpus"]) if "num-cpus" in params else math.ceil(quantity(limits.get("cpu", 0)))
    gpus = float(params["num-gpus"]) if "num-gpus" in params else quantity(limits.get(GPU_RESOURCE, 0))
    return cpus, gpus


def custom_resources(group: Mapping[str, Any]) -> dict[str, float]:
    """Ray custom resources one pod of the group offers: ``rayStartParams.resources``, KubeRay's
    ``'"{\\"name\\": units}"'`` (a JSON object inside quotes, passed to ``ray start --resources``).

    Raises:
        ValueError: the value is not a JSON object of numbers.
    """
    import json

    text = str((group.get("rayStartParams") or {}).get("resources", "")).strip()
    if not text:
        return {}
    parsed = json.loads(text.strip('"').replace('\\"', '"'))
    if not isinstance(parsed, dict) or not all(isinstance(v, (int, float)) for v in parsed.values()):
        raise ValueError(f"rayStartParams.resources {text!r} is not a JSON object of numbers")
    return {str(k): float(v) for k, v in parsed.items()}


def mount_at(group: Mapping[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The mount (in the group's Ray container) with the deepest mount path that is ``path`` or holds it,
    and its volume: ``(volumeMount, volume)``, or None when no mount covers ``path``."""
    spec = group.get("template", {}).get("spec", {})
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    path = path.rstrip("/")
    best: tuple[dict[str, Any], dict[str, Any]] | None = None
    depth = -1
    for mount in ray_container(group).get("volumeMounts") or []:
        where = str(mount.get("mountPath", "")).rstrip("/")
        if (path == where or path.startswith(where + "/")) and len(where) > depth:
            best, depth = (mount, volumes.get(mount.get("name"), {})), len(where)
    return best


def volume_at(group: Mapping[str, Any], path: str) -> tuple[str, dict[str, Any]] | None:
    """The volume mounted (in the group's Ray container) at the deepest mount path that holds ``path``:
    ``(mountPath, volume)``, or None when no mount holds it."""
    found = mount_at(group, path)
    return (str(found[0].get("mountPath", "")).rstrip("/"), found[1]) if found else None


def wants_gpu(group: Mapping[str, Any]) -> bool:
    """True when the group requests, limits, tolerates or selects GPUs, or tells Ray it has some."""
    spec = group.get("template", {}).get("spec", {})
    resources = ray_container(group).get("resources", {})
    return (
        any(GPU_RESOURCE in (resources.get(kind) or {}) for kind in ("limits", "requests"))
        or any(t.get("key") == GPU_RESOURCE for t in spec.get("tolerations") or [])
        or any("gpu" in key or "accelerator" in key for key in spec.get("nodeSelector") or {})
        or float((group.get("rayStartParams") or {}).get("num-gpus", 0)) > 0
    )


def _max_replicas(options: DeploymentOptions) -> int:
    if options.autoscaling_config is not None:
        return int(options.autoscaling_config.get("max_replicas", 1))
    return options.num_replicas or 1


def _app_configs(serve_config: str) -> list[tuple[str, AppConfig]]:
    doc = yaml.load(serve_config, Loader=_Loader) or {}
    return [
        (app.get("name", "?"), AppConfig.model_validate(app.get("args") or {})) for app in doc.get("applications") or []
    ]


def check_project_rules(
    rayservice: Mapping[str, Any], config_path: str | Path | None = None
) -> tuple[list[str], list[str]]:
    """Checks one RayService against the project's rules.

    ``serveConfigV2`` equals the render of the config its header names (or of
    ``config_path`` when given); a known ``upgradeStrategy``; the head runs no
    work (``num-cpus: "0"``) and exposes the ``serve`` port; every group
    without a GPU sets ``num-gpus: "0"``; a GPU group requests and limits
    ``nvidia.com/gpu`` (equal, at least 1); no hand-written probes on Ray
    containers (KubeRay injects its own); every Ray container requests
    ``ephemeral-storage`` covering its disk ``emptyDir`` size limits; every
    deployment's replica fits one pod of some group, and all deployments at
    their max replicas fit the groups at ``maxReplicas``; the stream database
    on its claim; vLLM's ``model.compile_cache_dir`` on a volume that every
    group able to run the model replica mounts at that path. Warning: a group an
    ingress replica can land on without the API key variable from a Secret.

    Returns:
        ``(problems, warnings)``: one line per broken rule; empty lists when all hold.
    """
    problems: list[str] = []
    warnings: list[str] = []
    spec = rayservice.get("spec", {})
    label = f"RayService/{rayservice.get('metadata', {}).get('name')}"
    actual = spec.get("serveConfigV2", "")
    source = str(config_path) if config_path is not None else source_of(actual)
    if source is None:
        return [f"{label}: spec.serveConfigV2 has no `# Generated from <config>` header: render it from a config"], []
    path = Path(source) if Path(source).is_absolute() else ROOT / source
    try:
        expected = render_file(path)
    except (RenderError, OSError) as exc:
        return [f"{label}: cannot render {source}: {exc}"], []
    if actual != expected:
        diff = "".join(
            list(difflib.unified_diff(actual.splitlines(True), expected.splitlines(True), "manifest", "render"))[:40]
        )
        problems.append(
            f"{label}: spec.serveConfigV2 differs from the render of {display_path(path)}; run "
            f"`python -m cosmos_tools.k8s render {display_path(path)} --write <the manifest that carries it>`\n{diff}"
        )
    kind = (spec.get("upgradeStrategy") or {}).get("type", "NewCluster")
    if kind not in UPGRADE_TYPES:
        problems.append(f"{label}: spec.upgradeStrategy.type {kind!r} is not one of {UPGRADE_TYPES}")
    all_groups = groups(rayservice)
    head = all_groups[0][1]
    if (head.get("rayStartParams") or {}).get("num-cpus") != "0":
        problems.append(f'{label}: head rayStartParams must set num-cpus: "0" (the head runs no replicas)')
    ports = {p.get("name"): p.get("containerPort") for p in ray_container(head).get("ports") or []}
    if ports.get("serve") != SERVE_PORT:
        problems.append(f"{label}: the head's Ray container must expose containerPort {SERVE_PORT} named `serve`")
    for name, group in all_groups:
        problems += _group_problems(label, name, group)
    try:
        apps = _app_configs(actual)
    except ValidationError as exc:  # e.g. a hand edit that gives a stream worker two replicas
        reasons = "; ".join(str(e["msg"]) for e in exc.errors())
        return [*problems, f"{label}: spec.serveConfigV2's args do not load as the app's config: {reasons}"], warnings
    problems += _capacity_problems(label, all_groups[1:], apps)
    problems += _stream_db_problems(label, all_groups[1:], apps)
    problems += _compile_cache_problems(label, all_groups[1:], apps)
    warnings += _api_key_warnings(label, all_groups[1:], apps)
    return problems, warnings


def _group_problems(label: str, name: str, group: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    container = ray_container(group)
    for probe in ("livenessProbe", "readinessProbe"):
        if probe in container:
            problems.append(f"{label}: {name}: remove {probe}; KubeRay injects probes that know Serve and token auth")
    resources = container.get("resources", {})
    requests = resources.get("requests") or {}
    disk = [
        v["emptyDir"].get("sizeLimit")
        for v in group.get("template", {}).get("spec", {}).get("volumes") or []
        if isinstance(v.get("emptyDir"), dict) and v["emptyDir"].get("medium") != "Memory"
    ]
    if "ephemeral-storage" not in requests:
        problems.append(
            f"{label}: {name}: request ephemeral-storage (Ray's logs and spill, caches, disk emptyDirs) so the "
            "scheduler picks a node with room and the kubelet does not evict the pod"
        )
    elif any(size is None for size in disk):
        problems.append(f"{label}: {name}: give every disk emptyDir a sizeLimit (counted against ephemeral-storage)")
    elif sum(quantity(s) for s in disk) > quantity(requests["ephemeral-storage"]):
        problems.append(
            f"{label}: {name}: requests.ephemeral-storage {requests['ephemeral-storage']} is smaller than its disk "
            f"emptyDir size limits ({', '.join(disk)})"
        )
    if not wants_gpu(group):
        if (group.get("rayStartParams") or {}).get("num-gpus") != "0":
            problems.append(
                f'{label}: {name} has no GPU: set rayStartParams num-gpus: "0" so Ray never offers a GPU it '
                "detects on the node to a replica"
            )
        return problems
    limit = (resources.get("limits") or {}).get(GPU_RESOURCE)
    request = requests.get(GPU_RESOURCE)
    if limit is None or quantity(limit) < 1:
        problems.append(f"{label}: {name} is a GPU group without a resources.limits[{GPU_RESOURCE}] of at least 1")
    elif request is not None and quantity(request) != quantity(limit):
        problems.append(f"{label}: {name}: requests[{GPU_RESOURCE}]={request} must equal limits ({limit})")
    elif request is None:
        problems.append(f"{label}: {name}: set requests[{GPU_RESOURCE}] equal to limits ({limit})")
    return problems


def _capacity_problems(
    label: str, workers: list[tuple[str, dict[str, Any]]], apps: list[tuple[str, AppConfig]]
) -> list[str]:
    pods = [(name, *ray_resources(g), int(g.get("maxReplicas", 2**31 - 1))) for name, g in workers]
    problems, need_cpus, need_gpus = [], 0.0, 0.0
    for app_name, config in apps:
        for dep_name in ("ingress", "decoder", "model_replica", "stream_worker"):
            options: DeploymentOptions = getattr(config, dep_name)
            if not any(cpus >= options.num_cpus and gpus >= options.num_gpus for _, cpus, gpus, _ in pods):
                problems.append(
                    f"{label}: no worker group has a pod with {options.num_cpus} CPUs and {options.num_gpus} GPUs "
                    f"for one {app_name}/{dep_name} replica"
                )
            need_cpus += _max_replicas(options) * options.num_cpus
            need_gpus += _max_replicas(options) * options.num_gpus
    have_cpus = sum(cpus * n for _, cpus, _, n in pods)
    have_gpus = sum(gpus * n for _, _, gpus, n in pods)
    if need_cpus > have_cpus or need_gpus > have_gpus:
        problems.append(
            f"{label}: at their max replicas the deployments need {need_cpus:g} CPUs and {need_gpus:g} GPUs, "
            f"the worker groups at maxReplicas give Ray {have_cpus:g} CPUs and {have_gpus:g} GPUs"
        )
    return problems


def _stream_db_problems(
    label: str, workers: list[tuple[str, dict[str, Any]]], apps: list[tuple[str, AppConfig]]
) -> list[str]:
    """The stream worker lands only on pods that mount its database's PersistentVolumeClaim, one pod at most.

    Each app's ``stream_worker.resources`` must be offered by some worker group, every group that
    offers them must mount a ``persistentVolumeClaim`` volume over ``streams.db_path`` and run one
    pod at most (``maxReplicas: 1``: the claim is ReadWriteOnce). (One replica per stream worker is the
    config's own rule: :class:`serve_app.config.AppConfig` refuses more.)
    """
    problems: list[str] = []
    for app_name, config in apps:
        db_path = config.streams.db_path
        worker = config.stream_worker
        if not db_path or not db_path.startswith("/"):
            problems.append(
                f"{label}: {app_name}: streams.db_path {db_path!r} is not an absolute path on a volume: registered "
                "streams would be lost with the pod (render the config: it sets the path)"
            )
            continue
        if not worker.resources:
            problems.append(
                f"{label}: {app_name}: stream_worker asks for no custom resource, so it may land on a pod "
                f"without the volume that holds {db_path}"
            )
            continue
        hosts = []
        for name, group in workers:
            try:
                offered = custom_resources(group)
            except ValueError as exc:
                problems.append(f"{label}: {name}: {exc}")
                continue
            n = config.streams.workers  # every stream worker asks for these on the one pod
            if all(offered.get(k, 0.0) >= units * n - 1e-9 for k, units in worker.resources.items()):
                hosts.append((name, group))
        if not hosts:
            problems.append(
                f"{label}: {app_name}: no worker group offers {worker.resources} (rayStartParams.resources) for "
                "the stream worker"
            )
        for name, group in hosts:
            found = volume_at(group, db_path)
            if found is None or "persistentVolumeClaim" not in found[1]:
                problems.append(
                    f"{label}: {name} runs the stream worker but mounts no PersistentVolumeClaim over "
                    f"streams.db_path {db_path}: registered streams would be lost with the pod"
                )
            if int(group.get("maxReplicas", 2**31 - 1)) != 1:
                problems.append(
                    f"{label}: {name} runs the stream worker: set maxReplicas: 1 (its database volume is "
                    "ReadWriteOnce and one worker reads every camera)"
                )
    return problems


def _compile_cache_problems(
    label: str, workers: list[tuple[str, dict[str, Any]]], apps: list[tuple[str, AppConfig]]
) -> list[str]:
    """vLLM's compile cache lies on a volume of every pod that can run the model replica.

    For each app on the ``vllm`` backend, ``model.compile_cache_dir`` must be an absolute path, and
    every worker group whose pods fit one model replica (its CPUs and GPUs) must mount a writable
    volume at that path or above it. Otherwise the compiled graphs land in the container's own
    filesystem, lost with it, and every new pod compiles them again (~40 s of vLLM's engine start).
    """
    problems: list[str] = []
    for app_name, config in apps:
        if config.model.backend != "vllm":
            continue  # the transformers backend compiles nothing
        path = config.model.compile_cache_dir
        if not path or not path.startswith("/"):
            problems.append(
                f"{label}: {app_name}: model.compile_cache_dir {path!r} is not an absolute path on the model "
                "pods' cache volume: every new pod would compile vLLM's graphs again (render the config: it "
                "sets the path)"
            )
            continue
        options = config.model_replica
        for name, group in workers:
            cpus, gpus = ray_resources(group)
            if cpus < options.num_cpus or gpus < options.num_gpus:
                continue  # no model replica fits this group's pods
            found = mount_at(group, path)
            if found is None:
                problems.append(
                    f"{label}: {name} can run the model replica of {app_name} but mounts no volume at "
                    f"model.compile_cache_dir {path} (serveConfigV2): vLLM's compile cache would be lost with "
                    "the container; mount the compile-cache volume there, or render the config again"
                )
            elif found[0].get("readOnly"):
                problems.append(
                    f"{label}: {name}: the volume at model.compile_cache_dir {path} is mounted readOnly: vLLM "
                    "cannot write its compile cache there"
                )
    return problems


def _api_key_warnings(
    label: str, workers: list[tuple[str, dict[str, Any]]], apps: list[tuple[str, AppConfig]]
) -> list[str]:
    warnings = []
    for app_name, config in apps:
        variable = config.api_key_env
        if not variable:
            warnings.append(f"{label}: {app_name} sets api_key_env to null: the Serve port answers without a key")
            continue
        options = config.ingress
        for name, group in workers:
            cpus, gpus = ray_resources(group)
            if cpus < options.num_cpus or gpus < options.num_gpus:
                continue  # no ingress replica fits this group's pods
            env = {e.get("name"): e for e in ray_container(group).get("env") or []}
            ref = (env.get(variable) or {}).get("valueFrom", {}).get("secretKeyRef")
            if ref is None:
                warnings.append(
                    f"{label}: {name} can run an ingress replica of {app_name} but does not set {variable} from a "
                    "Secret: that replica would answer without authentication (see k8s/base/kustomization.yaml)"
                )
            elif ref.get("optional"):
                warnings.append(
                    f"{label}: {name}: the {variable} Secret reference is optional: a missing Secret "
                    "turns authentication off"
                )
    return warnings


def duplicate_keys(obj: Any, path: str = "") -> list[str]:
    """Entries of keyed lists (:data:`LIST_KEYS`) that share a key, anywhere in ``obj``.

    Returns:
        One ``path: two <list> entries with <key>=<value>`` line per duplicate.
    """
    found: list[str] = []
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            where = f"{path}.{key}" if path else str(key)
            if key in LIST_KEYS and isinstance(value, list):
                seen: set[tuple[Any, ...]] = set()
                for item in value:
                    if not isinstance(item, Mapping):
                        continue
                    fields = LIST_KEYS[key]
                    ident = tuple(item.get(f, "TCP" if f == "protocol" else None) for f in fields)
                    if ident in seen:
                        shown = ", ".join(f"{f}={v}" for f, v in zip(fields, ident, strict=True))
                        found.append(f"{where}: two {key} entries with {shown} (the API server keeps one)")
                    seen.add(ident)
            found += duplicate_keys(value, where)
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            found += duplicate_keys(item, f"{path}.{i}")
    return found


def job_problems(job: Mapping[str, Any]) -> list[str]:
    """A Job without ``ttlSecondsAfterFinished``: its pod template is immutable, so the next apply after an
    image bump fails; with a TTL the finished Job is deleted and the next apply creates it anew."""
    label = f"Job/{job.get('metadata', {}).get('name')}"
    if job.get("spec", {}).get("ttlSecondsAfterFinished") is None:
        return [
            f"{label}: set spec.ttlSecondsAfterFinished: a finished Job's pod template is immutable and "
            "blocks `kubectl apply` after an image bump"
        ]
    return []
