"""The KubeRay page's commands match the manifests: paths, local files, image names, object names.

The deployment steps moved from README.md to docs/kubernetes.md ("Deploy on KubeRay").
"""

import re
from pathlib import Path

import yaml

from cosmos_tools.k8s import check

ROOT = Path(__file__).resolve().parents[4]
README = (ROOT / "docs" / "kubernetes.md").read_text()  # the deployment steps moved here from README.md


def kuberay_section() -> str:
    start = README.index("## Deploy on KubeRay")
    return README[start : README.index("\n## ", start + 1)]


def commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", kuberay_section(), re.S)
    lines = [ln.strip() for block in blocks for ln in block.replace("\\\n", " ").splitlines()]
    return [ln.lstrip("# ").strip() for ln in lines if ln]


def test_every_applied_overlay_exists_and_is_checked():
    applied = {p for c in commands() for p in re.findall(r"kubectl (?:apply|delete) -k (\S+)", c)}
    assert applied >= {"k8s/overlays/gke", "k8s/overlays/pvc-cache", "k8s/overlays/cpu-smoke"}
    checked = {str(d) for d in check.build_dirs(ROOT / "k8s")}
    assert all(str(ROOT / p) in checked for p in applied), applied


def test_every_local_file_written_has_its_committed_example():
    written = {p for c in commands() for p in re.findall(r"> (k8s/\S+\.env)", c)}
    assert written == {
        "k8s/base/api-key.env",
        "k8s/overlays/hub-token/hf-token.env",
        "k8s/overlays/pvc-cache/storage-class.env",
    }
    for path in written:
        example = (ROOT / f"{path}.example").read_text()
        key = next(c for c in commands() if f"> {path}" in c).split('"')[1].split("=")[0]
        assert re.search(rf"^{key}=", example, re.M), (path, key)


def test_built_images_are_the_ones_the_overlays_deploy():
    built = dict(re.findall(r"docker build --target (\w+) -t (\S+) \.", " ".join(commands())))
    dockerfile_targets = set(re.findall(r"^FROM \S+ AS (\w+)$", (ROOT / "Dockerfile").read_text(), re.M))
    assert set(built) == dockerfile_targets == {"gpu", "cpu"}
    for overlay in ("hub-token", "pvc-cache"):
        spec = yaml.safe_load((ROOT / "k8s" / "overlays" / overlay / "kustomization.yaml").read_text())
        deployed = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in spec["images"]}
        assert deployed == {"cosmos-serve": built["gpu"], "cosmos-serve-cpu": built["cpu"]}


def test_object_names_in_the_commands_match_the_rayservice():
    name = yaml.safe_load((ROOT / "k8s" / "base" / "rayservice.yaml").read_text())["metadata"]["name"]
    text = " ".join(commands())
    assert f"rayservice/{name}" in text
    assert f"svc/{name}-serve-svc 8000:8000" in text  # KubeRay names the Serve Service <rayservice>-serve-svc
    assert "--version 1.7.0" in text  # the operator release whose CRD check validates against


def test_the_page_states_what_was_not_run_here():
    section = " ".join(kuberay_section().split())
    assert "The images have **never been built**" in section
    assert "nothing has been **applied to a cluster**" in section
