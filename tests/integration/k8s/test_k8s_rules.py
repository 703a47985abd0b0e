"""k8s/: a wrong manifest fails (the strict CRD schema, Kubernetes' schemas and the project's rules in
cosmos_tools.k8s.rules), the check command's exit codes, and what must stay consistent (the Ray pin, the CRD copy).
Fixtures: ``conftest.py`` here.
"""

import hashlib
import re

import jsonschema
import pytest
import yaml
from k8s_builds import BUILDS, CONFIG, K8S, ROOT, env_of, gpu_group, group, problems_of

from cosmos_tools.k8s import check, render, rules, schema
from cosmos_tools.k8s.__main__ import main
from serve_app.config import AppConfig

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
