"""serveConfigV2 rendered from a Serve config: the render rules, the round-trip write, the CLI."""

import sys
from pathlib import Path

import pytest
import yaml

from cosmos_tools.k8s import render as k8s
from cosmos_tools.k8s.__main__ import main

ROOT = Path(__file__).resolve().parents[4]
A100 = ROOT / "configs" / "a100.yaml"
MANIFEST = ROOT / "k8s" / "base" / "rayservice.yaml"


def a100_doc() -> dict:
    return yaml.safe_load(A100.read_text())


def test_render_keeps_the_application_and_translates_http_options():
    doc = a100_doc()
    doc["http_options"] = {"host": "127.0.0.1", "port": 8123, "request_timeout_s": 30}
    rendered = yaml.safe_load(k8s.render_serve_config(doc))
    assert rendered["http_options"] == {"host": "0.0.0.0", "port": 8000, "request_timeout_s": 30}
    # args pass through unchanged, but for the stream database's place (rule 4) and the compile cache's (rule 5)
    args = rendered["applications"][0].pop("args")
    expected = doc["applications"][0].pop("args")
    assert rendered["applications"] == doc["applications"]
    assert args["model"].pop("compile_cache_dir") == k8s.COMPILE_CACHE_MOUNT
    assert "compile_cache_dir" not in expected["model"]
    assert args.pop("streams") == {**expected.pop("streams", {}), "db_path": k8s.STREAMS_DB_PATH}
    # no stream_worker section in the config: its defaults are written out, with the resource ask
    assert args.pop("stream_worker") == {"num_cpus": 0.5, "num_replicas": 1, "max_ongoing_requests": 256,
                                         "resources": {k8s.STREAMS_RESOURCE: 1}}
    assert "stream_worker" not in expected
    assert args == expected
    assert rendered["proxy_location"] == doc["proxy_location"]


def test_render_puts_the_stream_database_on_its_volume_and_keeps_other_stream_settings():
    doc = a100_doc()
    doc["applications"][0]["args"]["streams"] = {"max_streams": 8}
    doc["applications"][0]["args"]["stream_worker"] = {"num_cpus": 2, "resources": {"other": 0.5}}
    args = yaml.safe_load(k8s.render_serve_config(doc))["applications"][0]["args"]
    assert args["streams"] == {"max_streams": 8, "db_path": "/data/streams/streams.sqlite"}
    assert args["stream_worker"] == {"num_cpus": 2, "resources": {"other": 0.5, "cosmos_streams_db": 1}}


@pytest.mark.parametrize("workers, share", [(2, 0.5), (3, 0.3333), (6, 0.1666)])
def test_render_shares_the_stream_pods_resource_among_the_stream_workers(workers, share):
    doc = a100_doc()
    doc["applications"][0]["args"]["streams"] = {"workers": workers}
    args = yaml.safe_load(k8s.render_serve_config(doc))["applications"][0]["args"]
    assert args["stream_worker"]["resources"] == {"cosmos_streams_db": share}
    assert workers * share <= 1  # every worker fits on the one pod that offers 1 unit


def test_render_puts_the_vllm_compile_cache_on_the_model_pods_volume_whatever_the_config_says():
    doc = a100_doc()
    assert "compile_cache_dir" not in doc["applications"][0]["args"]["model"]  # `serve run` keeps vLLM's defaults
    model = yaml.safe_load(k8s.render_serve_config(doc))["applications"][0]["args"]["model"]
    assert model["compile_cache_dir"] == "/var/cache/cosmos-serve" == k8s.COMPILE_CACHE_MOUNT
    doc["applications"][0]["args"]["model"]["compile_cache_dir"] = "~/.cache/cosmos-serve"  # a local folder
    model = yaml.safe_load(k8s.render_serve_config(doc))["applications"][0]["args"]["model"]
    assert model["compile_cache_dir"] == k8s.COMPILE_CACHE_MOUNT


def test_render_leaves_the_compile_cache_alone_on_the_transformers_backend():
    rendered = yaml.safe_load(k8s.render_file(ROOT / "configs" / "k8s-cpu-smoke.yaml"))
    model = rendered["applications"][0]["args"]["model"]
    assert model["backend"] == "transformers" and "compile_cache_dir" not in model


@pytest.mark.parametrize(
    "section, value, message",
    [
        ("streams", {"db_path": "./streams.sqlite"}, "on KubeRay the stream database is /data/streams/streams.sqlite"),
        ("streams", {"db_path": "/tmp/s.sqlite"}, "leave db_path unset"),
        ("stream_worker", {"num_replicas": 2}, "stream_worker runs one replica"),
        ("stream_worker", {"autoscaling_config": {"max_replicas": 2}}, "for more cameras set streams.workers"),
    ],
)
def test_render_refuses_another_stream_database_or_more_stream_workers(section, value, message):
    doc = a100_doc()
    doc["applications"][0]["args"][section] = value
    with pytest.raises(k8s.RenderError, match=message):
        k8s.render_serve_config(doc)


def test_render_starts_with_the_generated_header():
    text = k8s.render_serve_config(a100_doc(), source="configs/a100.yaml")
    assert text.splitlines()[0].startswith("# Generated from configs/a100.yaml by `python -m cosmos_tools.k8s render")
    assert text.endswith("\n")


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("model", "checkpoint"), "tiny-random", "builds a test checkpoint"),
        (("model", "model_id"), "./checkpoints/x", "relative to the local directory"),
        (("sources", "allowed_roots"), ["./tests/data"], "must be absolute paths"),
        (("decode", "fsp"), 4, "do not load as AppConfig"),
    ],
)
def test_render_refuses_local_only_or_invalid_args(path, value, message):
    doc = a100_doc()
    args = doc["applications"][0]["args"]
    args.setdefault(path[0], {})[path[1]] = value
    with pytest.raises(k8s.RenderError, match=message):
        k8s.render_serve_config(doc)


def test_cpu_config_is_refused_with_its_local_checkpoint():
    with pytest.raises(k8s.RenderError, match=r"model_id='\./checkpoints/tiny-qwen2_5_vl' is relative"):
        k8s.render_file(ROOT / "configs" / "cpu.yaml")


def test_a_checkpoint_built_in_the_pod_is_accepted_at_an_absolute_path():
    rendered = yaml.safe_load(k8s.render_file(ROOT / "configs" / "k8s-cpu-smoke.yaml"))
    model = rendered["applications"][0]["args"]["model"]
    assert model["checkpoint"] == "tiny-random" and model["model_id"].startswith("/")


def test_source_of_reads_the_header():
    text = k8s.render_file(A100)
    assert k8s.source_of(text) == "configs/a100.yaml"
    assert k8s.source_of("proxy_location: EveryNode\n") is None


def test_render_refuses_a_config_without_applications():
    with pytest.raises(k8s.RenderError, match="no `applications`"):
        k8s.render_serve_config({"proxy_location": "EveryNode"})


def test_replace_block_keeps_the_rest_of_the_manifest():
    text = "a: 1  # keep\nspec:\n  serveConfigV2: |\n    old: 1\n\n    older: 2\n  rayClusterConfig:\n    x: 1\n"
    out = k8s.replace_serve_config(text, "# head\nnew: 2\nlist:\n- 1\n")
    assert out == (
        "a: 1  # keep\nspec:\n  serveConfigV2: |\n    # head\n    new: 2\n    list:\n    - 1\n"
        "  rayClusterConfig:\n    x: 1\n"
    )
    assert yaml.safe_load(out)["spec"]["serveConfigV2"] == "# head\nnew: 2\nlist:\n- 1\n"
    assert k8s.replace_serve_config(out, "# head\nnew: 2\nlist:\n- 1\n") == out  # idempotent


def test_replace_block_needs_a_block():
    with pytest.raises(ValueError, match="serveConfigV2"):
        k8s.replace_serve_config("spec: {}\n", "x: 1\n")
    with pytest.raises(ValueError, match="serveConfigV2"):
        k8s.replace_serve_config("- {op: replace, path: /spec/other, value: 1}\n", "x: 1\n")


def test_replace_block_in_a_json_patch_keeps_comments_and_other_ops():
    text = (
        "# header comment\n"
        "- op: test  # first\n  path: /spec/x\n  value: 1\n"
        "- op: replace\n  path: /spec/serveConfigV2\n  value: |\n    old: 1\n"
        "- op: add\n  path: /spec/y\n  value: {a: 1}\n"
    )
    out = k8s.replace_serve_config(text, "# head\nnew: 2\n")
    assert out == text.replace("    old: 1\n", "    # head\n    new: 2\n")
    assert yaml.safe_load(out)[1]["value"] == "# head\nnew: 2\n"


def test_replace_block_keeps_quotes_flow_style_and_comments_of_the_real_manifest():
    text = MANIFEST.read_text()
    current = yaml.safe_load(text)["spec"]["serveConfigV2"]
    assert k8s.replace_serve_config(text, current) == text


def test_cli_render_prints_what_the_manifest_carries(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["render", "configs/a100.yaml"]) == 0
    manifest = yaml.safe_load(MANIFEST.read_text())
    assert capsys.readouterr().out == manifest["spec"]["serveConfigV2"]


def test_cli_render_write_updates_a_stale_manifest(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    stale = MANIFEST.read_text().replace("max_num_seqs: 64", "max_num_seqs: 32", 1)
    target = tmp_path / "rayservice.yaml"
    target.write_text(stale)
    assert main(["render", "configs/a100.yaml", "--write", str(target)]) == 0
    assert target.read_text() == MANIFEST.read_text()


def test_cli_render_reports_a_refused_config(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["render", "configs/cpu.yaml"]) == 2
    assert "checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["kubernetes_validate", "jsonschema"])
def test_cli_check_without_the_k8s_extra_says_how_to_install_it(capsys, monkeypatch, missing):
    monkeypatch.chdir(ROOT)
    monkeypatch.setitem(sys.modules, missing, None)  # import of it raises ModuleNotFoundError, as when not installed
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert f"no module {missing!r}" in err and '-e ".[k8s]"' in err
    assert "Traceback" not in err


def test_cli_render_write_without_ruamel_says_how_to_install_it(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.setitem(sys.modules, "ruamel.yaml", None)
    target = tmp_path / "rayservice.yaml"
    target.write_text(MANIFEST.read_text())
    assert main(["render", "configs/a100.yaml", "--write", str(target)]) == 2
    assert '-e ".[k8s]"' in capsys.readouterr().err
    assert target.read_text() == MANIFEST.read_text()  # untouched
