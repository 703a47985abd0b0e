"""k8s/: the RayService and its overlays validate offline, and a wrong manifest fails.

Schemas: the KubeRay v1.7.0 RayService CRD made strict (tests/data/kuberay/),
Kubernetes' own schemas via kubernetes-validate (strict). Project rules on top
(serve_app.k8s.check_project_rules).
"""

import copy
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from serve_app import k8s

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
BUILDS = ["base", "overlays/hub-token", "overlays/pvc-cache"]
CONFIG = ROOT / "configs" / "a100.yaml"


@pytest.fixture(scope="module")
def builds() -> dict[str, list[dict]]:
    return {name: k8s.build_kustomization(K8S / name) for name in BUILDS}


@pytest.fixture
def rayservice(builds) -> dict:
    """A fresh copy of the base RayService to break."""
    return copy.deepcopy(next(o for o in builds["base"] if o["kind"] == "RayService"))


def problems_of(service: dict) -> list[str]:
    return k8s.validate_objects([service]) + k8s.check_project_rules(service, CONFIG)


def gpu_group(service: dict) -> dict:
    return next(g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == "gpu-a100")


def test_every_build_passes_the_check():
    results = k8s.check_builds(K8S, CONFIG)
    assert sorted(results) == sorted(str(K8S / name) for name in BUILDS)
    assert results == {str(K8S / name): [] for name in BUILDS}


def test_overlays_add_their_weight_source(builds):
    kinds = {name: sorted(o["kind"] for o in objs) for name, objs in builds.items()}
    assert kinds == {
        "base": ["RayService"],
        "overlays/hub-token": ["RayService", "Secret"],
        "overlays/pvc-cache": ["Job", "PersistentVolumeClaim", "RayService"],
    }
    for name in ("overlays/hub-token", "overlays/pvc-cache"):
        service = next(o for o in builds[name] if o["kind"] == "RayService")
        env = {e["name"]: e for e in gpu_group(service)["template"]["spec"]["containers"][0]["env"]}
        assert env["HF_HOME"]["value"] == "/models/hf"
        images = re.findall(r"image: (\S+)", yaml.safe_dump(builds[name]))
        assert images and set(images) == {"registry.example.com/cosmos-serve:0.1.0"}
    hub = next(o for o in builds["overlays/hub-token"] if o["kind"] == "RayService")
    token = {e["name"]: e for e in gpu_group(hub)["template"]["spec"]["containers"][0]["env"]}["HF_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "cosmos-hf-token", "key": "HF_TOKEN"}
    pvc = next(o for o in builds["overlays/pvc-cache"] if o["kind"] == "RayService")
    volumes = {v["name"]: v for v in gpu_group(pvc)["template"]["spec"]["volumes"]}
    assert volumes["model-cache"]["persistentVolumeClaim"] == {"claimName": "cosmos-model-cache"}


def test_download_job_fetches_the_configured_model(builds):
    job = next(o for o in builds["overlays/pvc-cache"] if o["kind"] == "Job")
    model_id = yaml.safe_load(CONFIG.read_text())["applications"][0]["args"]["model"]["model_id"]
    assert f"hf download {model_id} " in job["spec"]["template"]["spec"]["containers"][0]["args"][0]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
@pytest.mark.parametrize("name", BUILDS)
def test_build_equals_kubectl_kustomize(name, tmp_path):
    tree = tmp_path / "k8s"
    shutil.copytree(K8S, tree)
    token = tree / "overlays" / "hub-token" / "hf-token.env"
    shutil.copy(f"{token}.example", token)  # kubectl needs the real file; ours may fall back to the example
    out = subprocess.run(["kubectl", "kustomize", str(tree / name)], capture_output=True, text=True, check=True)
    expected = [o for o in yaml.safe_load_all(out.stdout) if o]
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(k8s.build_kustomization(tree / name, env_fallback=""), key=key) == sorted(expected, key=key)


# ------------------------------------------------------------- strictness is ours


def test_the_crd_alone_accepts_unknown_fields_and_the_strict_schema_does_not(rayservice):
    crd = yaml.load(k8s.CRD_PATH.read_text(), Loader=yaml.CSafeLoader)
    plain = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    rayservice["spec"]["rayClusterConfig"]["enableInTreeAutoscalng"] = True
    jsonschema.Draft7Validator(plain).validate(rayservice)  # the CRD as published: no error
    with pytest.raises(jsonschema.ValidationError, match="enableInTreeAutoscalng"):
        jsonschema.Draft7Validator(k8s.strict_crd_schema(crd)).validate(rayservice)


def test_strict_schema_respects_preserve_unknown_fields():
    crd = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {
            "metadata": {"type": "object"},
            "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "closed": {"type": "object", "properties": {"a": {"type": "string"}}},
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }}}]}}  # fmt: skip
    validator = jsonschema.Draft7Validator(k8s.strict_crd_schema(crd))
    assert not list(validator.iter_errors({"open": {"x": 1}, "map": {"k": "v"}, "metadata": {"name": "n"}}))
    assert [e.message for e in validator.iter_errors({"closed": {"b": 1}})] == [
        "Additional properties are not allowed ('b' was unexpected)"
    ]
    assert len(list(validator.iter_errors({"top": 1}))) == 1


# ------------------------------------------------------------ wrong manifests fail


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda s: s["spec"].__setitem__("upgradeStrategey", {"type": "None"}), "'upgradeStrategey' was unexpected"),
        (
            lambda s: s["spec"]["rayClusterConfig"]["headGroupSpec"].__setitem__(
                "rayStartParam", s["spec"]["rayClusterConfig"]["headGroupSpec"].pop("rayStartParams")
            ),
            "'rayStartParam' was unexpected",
        ),
        (
            lambda s: gpu_group(s)["template"]["spec"].__setitem__("nodeSelecter", {"a": "b"}),
            "'nodeSelecter' was unexpected",
        ),
        (
            lambda s: gpu_group(s)["template"]["spec"]["containers"][0].__setitem__("imagePullPolcy", "Always"),
            "'imagePullPolcy' was unexpected",
        ),
        (lambda s: s["metadata"].__setitem__("label", {"a": "b"}), "'label' was unexpected"),
    ],
    ids=["spec", "head-group", "pod-spec", "container", "metadata"],
)
def test_misspelled_field_fails(rayservice, mutate, expected):
    mutate(rayservice)
    problems = k8s.validate_objects([rayservice])
    assert problems and all(expected in p for p in problems), problems


def test_pod_template_is_checked_against_kubernetes_schema(rayservice):
    ports = gpu_group(rayservice)["template"]["spec"]["containers"][0]["ports"]
    ports.append({"containerPort": 8080, "name": "metrics", "protocl": "TCP"})
    problems = k8s.validate_objects([rayservice])
    assert any("gpu-a100 pod template" in p and "Kubernetes 1.33 schema" in p for p in problems), problems


def test_wrong_type_fails_the_crd(rayservice):
    gpu_group(rayservice)["maxReplicas"] = "four"
    assert any("maxReplicas: 'four' is not of type 'integer'" in p for p in k8s.validate_objects([rayservice]))


def test_gpu_group_without_gpu_limit_fails(rayservice):
    del gpu_group(rayservice)["template"]["spec"]["containers"][0]["resources"]["limits"][k8s.GPU_RESOURCE]
    assert k8s.validate_objects([rayservice]) == []  # schema-valid: only the project rule catches it
    problems = k8s.check_project_rules(rayservice, CONFIG)
    assert any("gpu-a100 is a GPU group without a resources.limits[nvidia.com/gpu]" in p for p in problems), problems


def test_gpu_request_must_equal_limit(rayservice):
    gpu_group(rayservice)["template"]["spec"]["containers"][0]["resources"]["requests"][k8s.GPU_RESOURCE] = "2"
    assert any("must equal limits" in p for p in k8s.check_project_rules(rayservice, CONFIG))


def test_config_that_needs_gpus_without_any_gpu_group_fails(rayservice):
    group = gpu_group(rayservice)
    for key in ("nodeSelector", "tolerations"):
        group["template"]["spec"].pop(key)
    for kind in ("limits", "requests"):
        group["template"]["spec"]["containers"][0]["resources"][kind].pop(k8s.GPU_RESOURCE)
    problems = k8s.check_project_rules(rayservice, CONFIG)
    assert any("model_replica replica" in p for p in problems), problems
    assert any(re.search(r"need [\d.]+ CPUs and 1 GPUs, .* give Ray [\d.]+ CPUs and 0 GPUs", p) for p in problems), problems


@pytest.mark.parametrize("params", [{}, {"num-cpus": "2"}])
def test_head_that_can_run_replicas_fails(rayservice, params):
    rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"] = params
    assert problems_of(rayservice) == [
        'RayService/cosmos-serve: head rayStartParams must set num-cpus: "0" (the head runs no replicas)'
    ]


def test_serve_config_drift_fails(rayservice, tmp_path):
    config = tmp_path / "a100.yaml"
    config.write_text(CONFIG.read_text().replace("max_frames: 128", "max_frames: 96", 1))
    problems = k8s.check_project_rules(rayservice, config)
    assert len(problems) == 1 and "spec.serveConfigV2 differs from the render" in problems[0]
    assert "render " + str(config) + " --write k8s/base/rayservice.yaml" in problems[0]
    assert "-      max_frames: 128" in problems[0] and "+      max_frames: 96" in problems[0]


def test_hand_edited_serve_config_fails(rayservice):
    rayservice["spec"]["serveConfigV2"] = rayservice["spec"]["serveConfigV2"].replace("fps: 4", "fps: 2")
    assert any("differs from the render" in p for p in problems_of(rayservice))


def test_probes_written_by_hand_fail(rayservice):
    head = rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["readinessProbe"] = {"httpGet": {"path": "/-/healthz", "port": 8000}}
    assert any("head: remove readinessProbe" in p for p in problems_of(rayservice))


def test_unknown_upgrade_strategy_fails(rayservice):
    rayservice["spec"]["upgradeStrategy"]["type"] = "BlueGreen"
    assert any("upgradeStrategy.type 'BlueGreen'" in p for p in problems_of(rayservice))


def test_head_without_serve_port_fails(rayservice):
    head = rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["ports"] = [p for p in head["ports"] if p["name"] != "serve"]
    assert any("named `serve`" in p for p in problems_of(rayservice))


def test_too_small_worker_groups_fail(rayservice, tmp_path):
    config = tmp_path / "a100.yaml"
    text = CONFIG.read_text().replace("max_replicas: 16", "max_replicas: 40", 1)
    config.write_text(text)
    rayservice["spec"]["serveConfigV2"] = k8s.render_file(config)
    problems = k8s.check_project_rules(rayservice, config)
    args = yaml.safe_load(text)["applications"][0]["args"]
    need = sum(
        args[d]["num_cpus"] * (args[d].get("autoscaling_config") or {}).get("max_replicas", args[d].get("num_replicas") or 1)
        for d in ("ingress", "decoder", "model_replica")
    )
    assert need > 40
    assert problems == [
        f"RayService/cosmos-serve: at their max replicas the deployments need {need:g} CPUs and 1 GPUs, "
        "the worker groups at maxReplicas give Ray 40 CPUs and 4 GPUs"
    ]


def test_check_command_exit_codes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert k8s.main(["check"]) == 0
    assert capsys.readouterr().out.count("ok   k8s/") == len(BUILDS)
    tree = tmp_path / "k8s"
    shutil.copytree(K8S, tree)
    manifest = tree / "base" / "rayservice.yaml"
    manifest.write_text(manifest.read_text().replace('num-cpus: "0"', 'num-cpus: "1"'))
    assert k8s.main(["check", "--k8s-dir", str(tree)]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL") == len(BUILDS) and 'must set num-cpus: "0"' in out


def test_kustomization_with_unsupported_feature_is_refused(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("namePrefix: x-\nresources: []\n")
    with pytest.raises(ValueError, match="namePrefix"):
        k8s.build_kustomization(tmp_path)


def test_failing_json_patch_test_op_is_reported(tmp_path):
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n")
    (tmp_path / "p.yaml").write_text("- {op: test, path: /data/k, value: w}\n")
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [cm.yaml]\npatches:\n- {path: p.yaml, target: {kind: ConfigMap, name: a}}\n"
    )
    with pytest.raises(ValueError, match="patch p.yaml failed"):
        k8s.build_kustomization(tmp_path)


# ------------------------------------------------------------------ consistency


def test_ray_version_matches_the_pin_and_the_image():
    pin = re.search(r'"ray\[serve\]==([\d.]+)"', (ROOT / "pyproject.toml").read_text())[1]
    manifest = yaml.safe_load((K8S / "base" / "rayservice.yaml").read_text())
    assert manifest["spec"]["rayClusterConfig"]["rayVersion"] == pin
    assert re.search(rf"^ARG RAY_IMAGE=rayproject/ray:{re.escape(pin)}-", (ROOT / "Dockerfile").read_text(), re.M)


def test_crd_test_data_is_the_recorded_copy():
    notes = (ROOT / "tests" / "data" / "kuberay" / "README.md").read_text()
    for name in ("ray.io_rayservices.yaml", "LICENSE"):
        digest = hashlib.sha256((k8s.CRD_PATH.parent / name).read_bytes()).hexdigest()
        assert f"{digest}  {name}" in notes
