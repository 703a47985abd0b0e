"""The KubeRay deployment: ``serveConfigV2`` rendered from a Serve config, and offline checks of ``k8s/``.

One source of truth: ``configs/a100.yaml``. The RayService in
``k8s/base/rayservice.yaml`` carries it as ``serveConfigV2`` (a YAML string),
produced by :func:`render_serve_config` under these rules:

1. ``http_options.host`` becomes ``0.0.0.0`` and ``http_options.port`` becomes
   8000: on Kubernetes the proxy must listen on the pod IP, on the port that
   KubeRay's Serve Service and its worker readiness probe use (the container
   port named ``serve``). Other ``http_options`` keys pass through.
2. Every application's ``args`` must load as :class:`serve_app.config.AppConfig`
   and then pass through **unchanged**, so the cluster runs the same application.
3. Settings that only make sense on the machine that holds the file are
   refused: a generated checkpoint (``model.checkpoint``), a relative local
   ``model.model_id`` and relative ``sources.allowed_roots`` (relative to what,
   inside a pod?). Use a hub id or an absolute path inside the image or a volume.
4. Everything else (``proxy_location``, ``logging_config``, …) passes through.

Commands (run from the project root)::

    python -m serve_app.k8s render configs/a100.yaml                      # print serveConfigV2
    python -m serve_app.k8s render configs/a100.yaml --write k8s/base/rayservice.yaml
    python -m serve_app.k8s check                                         # validate base + overlays

``check`` needs the ``test`` extra (jsonschema, kubernetes-validate, jsonpatch);
``render`` needs only PyYAML and pydantic. Neither imports Ray.
"""

from __future__ import annotations

import argparse
import base64
import copy
import difflib
import functools
import logging
import math
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from serve_app.config import AppConfig, DeploymentOptions

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
#: The KubeRay v1.7.0 RayService CRD (see tests/data/kuberay/README.md).
CRD_PATH = ROOT / "tests" / "data" / "kuberay" / "ray.io_rayservices.yaml"
DEFAULT_CONFIG = "configs/a100.yaml"
DEFAULT_K8S_DIR = "k8s"
#: Serve's HTTP port on KubeRay: the container port named ``serve`` (KubeRay's default).
SERVE_PORT = 8000
#: Kubernetes version whose schemas the standard objects are checked against
#: (kubernetes-validate ships 1.25–1.37): an old one, so that a field newer than
#: it fails here instead of on an older cluster.
K8S_VERSION = "1.33"
GPU_RESOURCE = "nvidia.com/gpu"
UPGRADE_TYPES = ("NewCluster", "NewClusterWithIncrementalUpgrade", "None")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RenderError(ValueError):
    """The Serve config cannot be carried to Kubernetes as it is (message says why and what to do)."""


# --------------------------------------------------------------------------- render


def render_serve_config(doc: Mapping[str, Any], source: str = DEFAULT_CONFIG) -> str:
    """Renders a Serve config (a parsed ``configs/*.yaml``) as the RayService's ``serveConfigV2``.

    Args:
        doc: the Serve config file's content.
        source: the file's path as written in the generated header comment.

    Returns:
        YAML text (ends with a newline) under the module's render rules.

    Raises:
        RenderError: no applications, args that do not load as AppConfig, or a
            local-only setting (rule 3).
    """
    out = copy.deepcopy(dict(doc))
    apps = out.get("applications")
    if not apps:
        raise RenderError(f"{source}: no `applications` to deploy")
    http = dict(out.get("http_options") or {})
    http.update(host="0.0.0.0", port=SERVE_PORT)
    out["http_options"] = http
    for i, app in enumerate(apps):
        where = f"{source}: applications[{i}]"
        try:
            config = AppConfig.model_validate(app.get("args") or {})
        except Exception as exc:  # pydantic.ValidationError: say which file and app
            raise RenderError(f"{where}.args do not load as AppConfig: {exc}") from exc
        model = config.model
        if model.checkpoint is not None:
            raise RenderError(
                f"{where}.args.model.checkpoint={model.checkpoint!r} builds a test checkpoint on the local "
                "machine; on Kubernetes point model_id at a hub id or an absolute path in the image or a volume"
            )
        if model.model_id.startswith((".", "~")):
            raise RenderError(
                f"{where}.args.model.model_id={model.model_id!r} is relative to the local directory; "
                "use a hub id or an absolute path inside the pod"
            )
        relative = [r for r in config.sources.allowed_roots if not r.startswith("/")]
        if relative:
            raise RenderError(f"{where}.args.sources.allowed_roots {relative} must be absolute paths inside the pod")
    header = f"# Generated from {source} by `python -m serve_app.k8s render {source}`: edit the config, not this block.\n"
    return header + yaml.safe_dump(out, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


def render_file(path: str | Path) -> str:
    """:func:`render_serve_config` of a config file (its path relative to the project root goes into the header)."""
    return render_serve_config(yaml.load(Path(path).read_text(), Loader=_Loader), source=_display(path))


def _display(path: str | Path) -> str:
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


_BLOCK_START = re.compile(r"^(?P<indent>[ \t]*)serveConfigV2:\s*\|[-+]?\s*(#.*)?$")


def replace_serve_config(manifest_text: str, serve_config: str) -> str:
    """Replaces the ``serveConfigV2: |`` block of a manifest's text, keeping every other line (and comment).

    Raises:
        ValueError: the text has no ``serveConfigV2: |`` block.
    """
    lines = manifest_text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        match = _BLOCK_START.match(line.rstrip("\n"))
        if match:
            break
    else:
        raise ValueError("no `serveConfigV2: |` block in the manifest")
    indent = match["indent"]
    end = i + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > len(indent)):
        end += 1
    while end > i + 1 and not lines[end - 1].strip():  # blank lines after the block belong to the file
        end -= 1
    body = "".join(f"{indent}  {row}\n" if row else "\n" for row in serve_config.rstrip("\n").split("\n"))
    return "".join(lines[: i + 1]) + body + "".join(lines[end:])


# ------------------------------------------------------------ kustomize (a subset)

_KUSTOMIZE_KEYS = {"apiVersion", "kind", "resources", "patches", "secretGenerator", "generatorOptions", "images"}


def build_kustomization(directory: str | Path, env_fallback: str = ".example") -> list[dict[str, Any]]:
    """Builds a kustomization like ``kubectl kustomize``, for the subset ``k8s/`` uses.

    Supported: ``resources`` (files, directories), ``patches`` (RFC 6902 JSON
    patches from ``path`` with a ``target``), ``secretGenerator`` (``envs``,
    with ``generatorOptions.disableNameSuffixHash``) and ``images``. Tests
    compare the result with ``kubectl kustomize`` where kubectl is installed.

    Args:
        directory: folder holding ``kustomization.yaml``.
        env_fallback: a missing ``secretGenerator`` env file is read from
            ``<file><env_fallback>`` when that exists (``check`` validates with
            the committed example token); ``""`` to require the real file.

    Raises:
        ValueError: an unsupported kustomize feature, a missing file or a failed patch.
    """
    import jsonpatch  # test extra

    directory = Path(directory)
    spec = yaml.load((directory / "kustomization.yaml").read_text(), Loader=_Loader) or {}
    unknown = set(spec) - _KUSTOMIZE_KEYS
    if unknown:
        raise ValueError(f"{directory}/kustomization.yaml: {sorted(unknown)} not supported here; use kubectl kustomize")
    objects: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        path = directory / entry
        if path.is_dir():
            objects += build_kustomization(path, env_fallback)
        else:
            objects += [doc for doc in yaml.load_all(path.read_text(), Loader=_Loader) if doc]
    options = spec.get("generatorOptions") or {}
    for gen in spec.get("secretGenerator", []):
        if not options.get("disableNameSuffixHash"):
            raise ValueError(f"{directory}: secretGenerator needs generatorOptions.disableNameSuffixHash: true")
        data: dict[str, str] = {}
        for env in gen.get("envs", []):
            path = directory / env
            if not path.exists() and env_fallback and Path(f"{path}{env_fallback}").exists():
                path = Path(f"{path}{env_fallback}")
            for row in path.read_text().splitlines():
                if row.strip() and not row.lstrip().startswith("#"):
                    key, _, value = row.partition("=")
                    data[key.strip()] = base64.b64encode(value.encode()).decode()
        objects.append(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": gen["name"]}, "type": gen.get("type", "Opaque"), "data": data}
        )
    for patch in spec.get("patches", []):
        ops = yaml.load((directory / patch["path"]).read_text(), Loader=_Loader)
        target = patch.get("target") or {}
        hits = [o for o in objects if _matches(o, target)]
        if not hits:
            raise ValueError(f"{directory}: patch {patch['path']} matches no object ({target})")
        for obj in hits:
            try:
                patched = jsonpatch.apply_patch(obj, ops)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise ValueError(f"{directory}: patch {patch['path']} failed: {exc}") from exc
            objects[objects.index(obj)] = patched
    for image in spec.get("images", []):
        for obj in objects:
            _set_image(obj, image)
    return objects


def _matches(obj: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    have = {"group": group, "version": version, "kind": obj.get("kind"), "name": obj.get("metadata", {}).get("name")}
    return all(have.get(key) == value for key, value in target.items())


def _set_image(node: Any, image: Mapping[str, str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for container in value:
                    name, _, tag = str(container.get("image", "")).partition(":")
                    if name == image["name"]:
                        new_tag = image.get("newTag", tag)
                        container["image"] = image.get("newName", name) + (f":{new_tag}" if new_tag else "")
            else:
                _set_image(value, image)
    elif isinstance(node, list):
        for item in node:
            _set_image(item, image)


# ------------------------------------------------------------------- validation


def strict_crd_schema(crd: Mapping[str, Any], version: str = "v1") -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema`` with unknown fields forbidden, as ``--validate=strict`` does.

    Every object schema without ``additionalProperties`` gets
    ``additionalProperties: false``, except where the schema says
    ``x-kubernetes-preserve-unknown-fields``. The root ``metadata`` is left open:
    the API server checks it as ObjectMeta (:func:`validate_objects` does too).

    Raises:
        KeyError: the CRD has no such version.
    """
    schema = next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)
    strict = _forbid_unknown(copy.deepcopy(schema))
    strict["properties"]["metadata"] = {"type": "object"}
    return strict


def _forbid_unknown(schema: dict[str, Any]) -> dict[str, Any]:
    for prop in schema.get("properties", {}).values():
        _forbid_unknown(prop)
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            _forbid_unknown(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, []):
            _forbid_unknown(sub)
    is_object = schema.get("type") == "object" or "properties" in schema
    if is_object and "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema["additionalProperties"] = False
    return schema


@functools.lru_cache(maxsize=4)
def _strict_schema_from(path: str) -> dict[str, Any]:
    return strict_crd_schema(yaml.load(Path(path).read_text(), Loader=_Loader))


def _where(path: Iterable[Any]) -> str:
    return ".".join(str(p) for p in path) or "<root>"


def validate_objects(objects: list[dict[str, Any]], crd_path: str | Path = CRD_PATH, k8s_version: str = K8S_VERSION) -> list[str]:
    """Schema problems of built objects: RayServices against the strict CRD, the rest against Kubernetes.

    A RayService's metadata and pod templates (core/v1 PodTemplateSpec) are also
    checked with kubernetes-validate (strict), like every standard object.

    Returns:
        One ``kind/name: field.path: message`` line per problem; empty when valid.
    """
    import jsonschema
    import kubernetes_validate

    strict = _strict_schema_from(str(crd_path))
    problems: list[str] = []

    def k8s(obj: dict[str, Any], label: str) -> None:
        try:
            kubernetes_validate.validate(obj, k8s_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{label}: {_where(exc.path)}: {exc.message} (Kubernetes {exc.version} schema)")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{label}: {exc.message}")

    for obj in objects:
        label = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        if obj.get("kind") != "RayService":
            k8s(obj, label)
            continue
        if obj.get("apiVersion") != "ray.io/v1":
            problems.append(f"{label}: apiVersion {obj.get('apiVersion')!r}: use ray.io/v1")
        for err in sorted(jsonschema.Draft7Validator(strict).iter_errors(obj), key=lambda e: list(map(str, e.path))):
            problems.append(f"{label}: {_where(err.path)}: {err.message} (KubeRay v1.7.0 CRD, strict)")
        k8s({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata", {})}, f"{label} metadata")
        for name, group in _groups(obj):
            if isinstance(group.get("template"), dict):
                pod = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": group["template"]}
                k8s(pod, f"{label} {name} pod template")
    return problems


def _groups(rayservice: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    cluster = rayservice.get("spec", {}).get("rayClusterConfig", {})
    groups = [("head", cluster.get("headGroupSpec") or {})]
    return groups + [(g.get("groupName", f"worker[{i}]"), g) for i, g in enumerate(cluster.get("workerGroupSpecs") or [])]


def _ray_container(group: Mapping[str, Any]) -> dict[str, Any]:
    containers = group.get("template", {}).get("spec", {}).get("containers") or [{}]
    return containers[0]  # KubeRay's Ray container is the first one


def _quantity(value: Any) -> float:
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _ray_resources(group: Mapping[str, Any]) -> tuple[float, float]:
    """(CPUs, GPUs) one pod of the group gives Ray: rayStartParams, else the container limits (as KubeRay)."""
    params = group.get("rayStartParams") or {}
    limits = _ray_container(group).get("resources", {}).get("limits", {})
    cpus = float(params["num-cpus"]) if "num-cpus" in params else math.ceil(_quantity(limits.get("cpu", 0)))
    gpus = float(params["num-gpus"]) if "num-gpus" in params else _quantity(limits.get(GPU_RESOURCE, 0))
    return cpus, gpus


def _wants_gpu(group: Mapping[str, Any]) -> bool:
    spec = group.get("template", {}).get("spec", {})
    resources = _ray_container(group).get("resources", {})
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


def check_project_rules(rayservice: Mapping[str, Any], config_path: str | Path = DEFAULT_CONFIG) -> list[str]:
    """The project's rules on top of the schema (see k8s/README.md, "Checks").

    serveConfigV2 equals the render of ``config_path``; the head runs no work
    (``num-cpus: "0"``); a GPU group requests and limits ``nvidia.com/gpu``
    (equal, at least 1); the head exposes the ``serve`` port; no hand-written
    liveness/readiness probes on Ray containers (KubeRay injects its own); a
    known ``upgradeStrategy``; every deployment's replica fits one pod of some
    group, and the deployments at their max replicas fit the groups at theirs.

    Returns:
        One line per broken rule; empty when all hold.
    """
    problems: list[str] = []
    spec = rayservice.get("spec", {})
    label = f"RayService/{rayservice.get('metadata', {}).get('name')}"
    try:
        expected = render_file(config_path)
    except (RenderError, OSError) as exc:
        return [f"{label}: cannot render {config_path}: {exc}"]
    actual = spec.get("serveConfigV2", "")
    if actual != expected:
        diff = "".join(list(difflib.unified_diff(actual.splitlines(True), expected.splitlines(True), "manifest", "render"))[:40])
        problems.append(
            f"{label}: spec.serveConfigV2 differs from the render of {_display(config_path)}; run "
            f"`python -m serve_app.k8s render {_display(config_path)} --write k8s/base/rayservice.yaml`\n{diff}"
        )
    kind = (spec.get("upgradeStrategy") or {}).get("type", "NewCluster")
    if kind not in UPGRADE_TYPES:
        problems.append(f"{label}: spec.upgradeStrategy.type {kind!r} is not one of {UPGRADE_TYPES}")
    groups = _groups(rayservice)
    head = groups[0][1]
    if (head.get("rayStartParams") or {}).get("num-cpus") != "0":
        problems.append(f'{label}: head rayStartParams must set num-cpus: "0" (the head runs no replicas)')
    ports = {p.get("name"): p.get("containerPort") for p in _ray_container(head).get("ports") or []}
    if ports.get("serve") != SERVE_PORT:
        problems.append(f"{label}: the head's Ray container must expose containerPort {SERVE_PORT} named `serve`")
    for name, group in groups:
        container = _ray_container(group)
        for probe in ("livenessProbe", "readinessProbe"):
            if probe in container:
                problems.append(f"{label}: {name}: remove {probe}; KubeRay injects probes that know Serve and token auth")
        if not _wants_gpu(group):
            continue
        resources = container.get("resources", {})
        limit = (resources.get("limits") or {}).get(GPU_RESOURCE)
        request = (resources.get("requests") or {}).get(GPU_RESOURCE)
        if limit is None or _quantity(limit) < 1:
            problems.append(f"{label}: {name} is a GPU group without a resources.limits[{GPU_RESOURCE}] of at least 1")
        elif request is not None and _quantity(request) != _quantity(limit):
            problems.append(f"{label}: {name}: requests[{GPU_RESOURCE}]={request} must equal limits ({limit})")
        elif request is None:
            problems.append(f"{label}: {name}: set requests[{GPU_RESOURCE}] equal to limits ({limit})")
    problems += _capacity_problems(label, groups[1:], config_path)
    return problems


def _capacity_problems(label: str, workers: list[tuple[str, dict[str, Any]]], config_path: str | Path) -> list[str]:
    doc = yaml.load(Path(config_path).read_text(), Loader=_Loader)
    pods = [(name, *_ray_resources(g), int(g.get("maxReplicas", 2**31 - 1))) for name, g in workers]
    problems, need_cpus, need_gpus = [], 0.0, 0.0
    for app in doc["applications"]:
        config = AppConfig.model_validate(app.get("args") or {})
        for dep_name in ("ingress", "decoder", "model_replica"):
            options: DeploymentOptions = getattr(config, dep_name)
            if not any(cpus >= options.num_cpus and gpus >= options.num_gpus for _, cpus, gpus, _ in pods):
                problems.append(
                    f"{label}: no worker group has a pod with {options.num_cpus} CPUs and {options.num_gpus} GPUs "
                    f"for one {app.get('name')}/{dep_name} replica"
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


def check_builds(
    k8s_dir: str | Path = DEFAULT_K8S_DIR,
    config_path: str | Path = DEFAULT_CONFIG,
    crd_path: str | Path = CRD_PATH,
    k8s_version: str = K8S_VERSION,
) -> dict[str, list[str]]:
    """Builds ``k8s/base`` and every ``k8s/overlays/*`` and checks each (schemas + project rules).

    Returns:
        Problems per build directory (an empty list: that build is valid).
    """
    k8s_dir = Path(k8s_dir)
    dirs = [k8s_dir / "base"] + sorted(p for p in (k8s_dir / "overlays").glob("*") if (p / "kustomization.yaml").exists())
    results: dict[str, list[str]] = {}
    for directory in dirs:
        try:
            objects = build_kustomization(directory)
        except (ValueError, OSError, KeyError) as exc:
            results[str(directory)] = [f"kustomize build failed: {exc}"]
            continue
        problems = validate_objects(objects, crd_path, k8s_version)
        services = [o for o in objects if o.get("kind") == "RayService"]
        if len(services) != 1:
            problems.append(f"expected one RayService, found {len(services)}")
        for service in services:
            problems += check_project_rules(service, config_path)
        results[str(directory)] = problems
    return results


# -------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """``render`` prints (or writes) serveConfigV2; ``check`` validates k8s/. Returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m serve_app.k8s", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render", help="render serveConfigV2 from a Serve config file")
    render.add_argument("config", help="Serve config file, e.g. configs/a100.yaml")
    render.add_argument("--write", metavar="MANIFEST", help="replace the serveConfigV2 block of this manifest in place")
    check = sub.add_parser("check", help="validate k8s/base and k8s/overlays/* offline")
    check.add_argument("--config", default=DEFAULT_CONFIG, help=f"source of truth (default {DEFAULT_CONFIG})")
    check.add_argument("--k8s-dir", default=DEFAULT_K8S_DIR, help=f"manifest folder (default {DEFAULT_K8S_DIR})")
    check.add_argument("--crd", default=str(CRD_PATH), help="RayService CRD file (default: the KubeRay v1.7.0 copy)")
    check.add_argument("--k8s-version", default=K8S_VERSION, help=f"Kubernetes schema version (default {K8S_VERSION})")
    args = parser.parse_args(argv)
    if args.command == "render":
        try:
            text = render_file(args.config)
        except RenderError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.write:
            path = Path(args.write)
            path.write_text(replace_serve_config(path.read_text(), text))
            print(f"wrote serveConfigV2 of {args.config} into {path}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    results = check_builds(args.k8s_dir, args.config, args.crd, args.k8s_version)
    for directory, problems in results.items():
        print(f"{'ok  ' if not problems else 'FAIL'} {directory}")
        for problem in problems:
            print(f"     - {problem}")
    return 1 if any(results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
