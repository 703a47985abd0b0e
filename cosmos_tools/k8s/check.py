"""``check``: build ``k8s/base`` and every ``k8s/overlays/*`` with kubectl, then schemas and project rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cosmos_tools.k8s import kustomize, rules, schema

DEFAULT_K8S_DIR = "k8s"


@dataclass(frozen=True)
class BuildReport:
    """What ``check`` found in one build directory.

    Attributes:
        problems: broken schemas or rules (``check`` fails on any).
        warnings: risky but deployable (``check`` prints them and passes).
        examples_used: git-ignored local files missing from the tree, filled from their ``.example``.
    """

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    examples_used: list[str] = field(default_factory=list)


def build_dirs(k8s_dir: str | Path = DEFAULT_K8S_DIR) -> list[Path]:
    """``base`` and every ``overlays/*`` folder that holds a ``kustomization.yaml``."""
    k8s_dir = Path(k8s_dir)
    overlays = sorted(p for p in (k8s_dir / "overlays").glob("*") if (p / "kustomization.yaml").exists())
    return [k8s_dir / "base", *overlays]


def check_build(
    directory: str | Path,
    k8s_dir: str | Path = DEFAULT_K8S_DIR,
    crd_path: str | Path = schema.CRD_PATH,
    k8s_version: str = schema.K8S_VERSION,
    config_path: str | Path | None = None,
) -> BuildReport:
    """Builds one kustomization (missing local files from their examples) and checks every object.

    Args:
        config_path: the Serve config the RayService must carry; None: the one its
            ``serveConfigV2`` header names.

    Raises:
        kustomize.KustomizeError: kubectl is missing (a failed build is a problem, not an exception).
    """
    kustomize.find_kubectl()
    try:
        built = kustomize.build(directory, k8s_dir)
    except kustomize.KustomizeError as exc:
        return BuildReport([f"kustomize build failed: {exc}"])
    objects = built.objects
    problems = schema.validate_objects(objects, crd_path, k8s_version)
    warnings: list[str] = []
    services = [o for o in objects if o.get("kind") == "RayService"]
    if len(services) != 1:
        problems.append(f"expected one RayService, found {len(services)}")
    for service in services:
        found, warned = rules.check_project_rules(service, config_path)
        problems += found
        warnings += warned
    for obj in objects:
        label = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        problems += [f"{label}: {p}" for p in rules.duplicate_keys(obj)]
        if obj.get("kind") == "Job":
            problems += rules.job_problems(obj)
    return BuildReport(problems, warnings, built.examples_used)


def check_builds(
    k8s_dir: str | Path = DEFAULT_K8S_DIR,
    crd_path: str | Path = schema.CRD_PATH,
    k8s_version: str = schema.K8S_VERSION,
) -> dict[str, BuildReport]:
    """:func:`check_build` of every directory of :func:`build_dirs`, keyed by its path."""
    return {str(d): check_build(d, k8s_dir, crd_path, k8s_version) for d in build_dirs(k8s_dir)}
