"""Schema checks of built manifests: the KubeRay RayService CRD made strict, Kubernetes' own schemas.

The CRD is the KubeRay v1.7.0 release's (``k8s/crd/``). Its ``openAPIV3Schema``
never sets ``additionalProperties: false``, so the API server would silently
prune a misspelled field; :func:`strict_crd_schema` forbids unknown fields the
way ``kubectl apply --validate=strict`` does. Standard objects (and the pod
templates and metadata inside a RayService) are checked with
``kubernetes-validate`` in strict mode.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
#: The KubeRay v1.7.0 RayService CRD (see k8s/crd/README.md).
CRD_PATH = ROOT / "k8s" / "crd" / "ray.io_rayservices.yaml"
#: Kubernetes version whose schemas the standard objects are checked against
#: (kubernetes-validate ships 1.25 to 1.37): an old one, so that a field newer than
#: it fails here instead of on an older cluster.
K8S_VERSION = "1.33"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def strict_crd_schema(crd: Mapping[str, Any], version: str = "v1") -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema`` with unknown fields forbidden, as ``--validate=strict`` does.

    Every object schema without ``additionalProperties`` gets
    ``additionalProperties: false``, except where the schema says
    ``x-kubernetes-preserve-unknown-fields``. The root ``metadata`` is left open:
    the API server checks it as ObjectMeta (:func:`validate_objects` does too).

    Raises:
        StopIteration: the CRD has no such version.
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


def where(path: Iterable[Any]) -> str:
    """A JSON path as ``a.b.0.c`` (``<root>`` when empty)."""
    return ".".join(str(p) for p in path) or "<root>"


def groups(rayservice: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(name, group spec)`` of the head (named ``head``) and every worker group, in manifest order."""
    cluster = rayservice.get("spec", {}).get("rayClusterConfig", {})
    out = [("head", cluster.get("headGroupSpec") or {})]
    return out + [(g.get("groupName", f"worker[{i}]"), g) for i, g in enumerate(cluster.get("workerGroupSpecs") or [])]


def validate_objects(
    objects: list[dict[str, Any]], crd_path: str | Path = CRD_PATH, k8s_version: str = K8S_VERSION
) -> list[str]:
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
            problems.append(f"{label}: {where(exc.path)}: {exc.message} (Kubernetes {exc.version} schema)")
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
            problems.append(f"{label}: {where(err.path)}: {err.message} (KubeRay v1.7.0 CRD, strict)")
        k8s({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata", {})}, f"{label} metadata")
        for name, group in groups(obj):
            if isinstance(group.get("template"), dict):
                pod = {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": name},
                    "template": group["template"],
                }
                k8s(pod, f"{label} {name} pod template")
    return problems
