"""The k8s/ builds the manifest tests check: paths, the builds (``kubectl kustomize`` folders), the platforms'
node labels, and helpers that pick a RayService's parts (a service, a worker group, a container's env)."""

from pathlib import Path

from cosmos_tools.k8s import rules, schema

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
PLATFORMS = {
    "gke": {"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"},
    "eks": {"node.kubernetes.io/instance-type": "p4de.24xlarge"},
    "gfd": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
}
BUILDS = [
    "base",
    "overlays/cpu-smoke",
    *(f"overlays/{p}" for p in PLATFORMS),
    "overlays/hub-token",
    "overlays/pvc-cache",
]
CONFIG = ROOT / "configs" / "a100.yaml"
GPU_IMAGE = "registry.example.com/cosmos-serve:0.1.0"
CPU_IMAGE = "registry.example.com/cosmos-serve-cpu:0.1.0"


def service_of(objects: list[dict]) -> dict:
    return next(o for o in objects if o["kind"] == "RayService")


def problems_of(service: dict) -> list[str]:
    return schema.validate_objects([service]) + rules.check_project_rules(service, CONFIG)[0]


def group(service: dict, name: str) -> dict:
    return next(g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == name)


def gpu_group(service: dict) -> dict:
    return group(service, "gpu-a100")


def env_of(g: dict) -> dict[str, dict]:
    return {e["name"]: e for e in g["template"]["spec"]["containers"][0].get("env", [])}
