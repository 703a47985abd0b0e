"""Fixtures of the k8s/ manifest tests: every build once per session (read only: a test that breaks a manifest
breaks ``rayservice``, a fresh copy), a fresh base RayService to break, and a copy of k8s/ without the real local
files."""

import copy
import shutil
from pathlib import Path

import pytest
from k8s_builds import BUILDS, K8S, service_of

from cosmos_tools.k8s import kustomize


@pytest.fixture(scope="session")
def builds() -> dict[str, list[dict]]:
    return {name: kustomize.build(K8S / name, K8S).objects for name in BUILDS}


@pytest.fixture
def rayservice(builds) -> dict:
    """A fresh copy of the base RayService to break."""
    return copy.deepcopy(service_of(builds["base"]))


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of k8s/ without any real local file (only the committed examples)."""
    copy_ = tmp_path / "k8s"
    shutil.copytree(K8S, copy_, ignore=shutil.ignore_patterns("*.env"))
    return copy_
