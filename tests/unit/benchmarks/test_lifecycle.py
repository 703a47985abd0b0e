"""The lifecycle bench: its log reading (the model replica's start phases from a `serve run` log), its steps, and
its step names checked before anything starts."""

from __future__ import annotations

from datetime import datetime

import pytest

import benchmarks.lifecycle as lc
from benchmarks.lifecycle_log import line_time, replicas_ready_s, start_phases

# Lines as `serve run configs/h200.yaml` printed them on the H200 (results/gpu/lifecycle/, shortened).
LOG = "\n".join([
    "2026-12-01 21:40:29,010\tINFO scripts.py:489 -- Running config file: '/root/out/lifecycle_config.yaml'.",
    "\x1b[0m INFO 2026-12-01 21:40:38,651 controller 1 -- Adding 1 replica to Deployment(name='VideoModel', app='c').",
    "\x1b[0m INFO 12-01 21:40:57 [model.py:598] Resolved architecture: Qwen2_5_VLForConditionalGeneration",
    "\x1b[0m (EngineCore pid=11654) INFO 12-01 21:41:25 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with",
    "\x1b[0m (EngineCore pid=11654) INFO 12-01 21:42:03 [gpu_model_runner.py:6656] Graph capturing finished in 4 secs",
    "\x1b[0m (EngineCore pid=11654) INFO 12-01 21:42:03 [core.py:327] init engine (profile, create kv cache, warmup "
    "model) took 21.71 s (compilation: 10.78 s)",
    "\x1b[0m INFO 2026-12-01 21:42:04,100 cosmos-video_VideoModel ab12 -- vLLM AsyncLLM ready in 61.2 s (/m, random "
    "weights True; preflight + vLLM import 13.9 s; compile cache warm (212 files in /root/.cache/vllm/tcc))",
    "\x1b[0m INFO 2026-12-01 21:42:10,000 cosmos-video_VideoModel ab12 -- warm-up: 32 clips of (40, 420, 756) in 5.9 s "
    "(first clip alone 1.3 s; decode sweep of 128: 2.7 s)",
    "\x1b[0m INFO 2026-12-01 21:42:10,001 cosmos-video_VideoModel ab12 -- model replica ready in 84.4 s (backend vllm)",
])


def test_each_model_replicas_ready_time_is_read_after_the_start():
    since = datetime(2026, 12, 1, 21, 40, 29).timestamp()
    second = ("\x1b[0m INFO 2026-12-01 21:43:59,500 cosmos-video_VideoModel cd34 -- model replica ready in 190.2 s "
              "(backend vllm)")
    assert replicas_ready_s(LOG, since, 2026) == [101.0]
    assert replicas_ready_s(LOG + "\n" + second, since, 2026) == [101.0, 210.5]
    later = datetime(2026, 12, 1, 21, 43, 0).timestamp()  # a restart's log appended after the first run's
    assert replicas_ready_s(LOG + "\n" + second, later, 2026) == [59.5]


def test_both_timestamp_forms_are_read():
    ray = line_time("INFO 2026-12-01 21:40:38,651 controller -- x", 2026)
    vllm = line_time("(EngineCore pid=1) INFO 12-01 21:40:57 [model.py:598] y", 2026)
    assert ray is not None and vllm is not None
    assert round(vllm - ray, 3) == 18.349
    assert line_time("no time here", 2026) is None


def test_the_start_is_broken_into_phases():
    since = datetime(2026, 12, 1, 21, 40, 29).timestamp()
    p = start_phases(LOG, since, 2026)
    assert p["marks_s"] == {"replica_added": 9.7, "vllm_config": 28.0, "engine_core_started": 56.0,
                            "engine_ready": 94.0, "asyncllm_ready": 95.1, "warmup_done": 101.0,
                            "replica_ready": 101.0}
    assert (p["init_engine_s"], p["compile_s"], p["graph_capture_s"]) == (21.71, 10.78, 4.0)
    assert (p["warmup_s"], p["warmup_first_clip_s"], p["warmup_sweep_s"]) == (5.9, 1.3, 2.7)
    assert p["replica_ready_s"] == 84.4 and p["replica_import_s"] == 13.9
    assert p["compile_cache"] == "warm"


def test_lines_before_the_start_are_ignored():
    late = datetime(2026, 12, 1, 21, 41, 0).timestamp()
    p = start_phases(LOG, late, 2026)
    assert "replica_added" not in p["marks_s"] and "vllm_config" not in p["marks_s"]
    assert p["marks_s"]["engine_core_started"] == 25.0


def test_the_questions_step_sends_distinct_windows_with_n_questions_and_counts_the_answers(tmp_path, monkeypatch):
    import argparse
    import json

    import httpx

    for i in range(6):
        (tmp_path / f"w{i:02d}.mp4").write_bytes(b"")
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        if body["video_path"].endswith("w03.mp4"):
            return httpx.Response(503, json={"error": {"message": "busy"}})
        answers = [{"usage": {"completion_tokens": 256}} for _ in body["questions"]]
        return httpx.Response(200, json={"usage": {"completion_tokens": 256}, "answers": answers})

    real = httpx.AsyncClient
    monkeypatch.setattr(lc.httpx, "AsyncClient", lambda **kw: real(transport=httpx.MockTransport(handler), **kw))
    run = object.__new__(lc.Lifecycle)
    run.args = argparse.Namespace(burst=4, windows_dir=str(tmp_path), burst_offset=1)
    run.url = "http://127.0.0.1:1"
    res = run.questions(3)
    assert sorted(b["video_path"].rsplit("/", 1)[1] for b in seen) == ["w01.mp4", "w02.mp4", "w03.mp4", "w04.mp4"]
    assert all(b["questions"] == list(lc.QUESTIONS[:3]) and b["ignore_eos"] and b["max_tokens"] == 256 for b in seen)
    assert res["ok"] == 3 and res["statuses"] == {"200": 3, "503": 1}
    assert res["completion_tokens"] == 3 * 3 * 256
    assert abs(res["answers_per_s"] - 3 * res["windows_per_s"]) < 0.01
    assert run.args.burst_offset == 5  # the next burst takes the next windows


def test_engine_cores_are_found_by_title_or_by_kernel_name():
    from benchmarks.lifecycle_procs import parse_ps

    ps = "\n".join([
        "    PID    PPID COMMAND         COMMAND",
        "    100       1 ray::ServeRepli ray::ServeReplica:cosmos-video:VideoModel",
        "    101     100 python3         python3 -B -c from multiprocessing.forkserver import main",
        "    102     101 VLLM::EngineCor python3 -B -c from multiprocessing.forkserver import main",
        "    103     100 VLLM::EngineCor VLLM::EngineCore",
        "    104       1 ray::ServeRepli ray::ServeReplica:cosmos-video:Ingress",
        # the GPU call's own shell, whose text names both (results/gpu/lifecycle-pair/, 2026-12-02)
        "    105       1 bash            bash -c ps aux | grep -c -E 'EngineCore|ServeReplica:x:VideoModel'",
    ])
    rows = {r["pid"]: r for r in parse_ps(ps)}
    assert sorted(rows) == [100, 102, 103]  # the fork server, the ingress and the shell are none
    assert "EngineCor" in rows[102]["cmd"] and rows[102]["ppid"] == 101
    assert rows[103]["cmd"] == "VLLM::EngineCore"


def test_ray_processes_are_found_by_title_or_executable_not_by_mention():
    from benchmarks.lifecycle_procs import parse_ray_ps

    ps = "\n".join([
        "STAT COMMAND",
        "Ssl  /root/site/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/ray/session/sockets/raylet",
        "Sl   /root/site/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray",
        "Sl   ray::ServeReplica:cosmos-video:Ingress",
        "Z    [ray::IDLE] <defunct>",
        "Ss   bash -c ps aux | grep -c -E 'EngineCore|raylet'",
        "S    timeout -k 10 600 bash -c ray stop --force; ray::x",
    ])
    found = parse_ray_ps(ps)
    names = [c.split()[0].rsplit("/", 1)[-1] for c in found]
    assert names == ["raylet", "gcs_server", "ray::ServeReplica:cosmos-video:Ingress"]


# Lines of the kill step's replacement as the H200 printed them (results/gpu/lifecycle-forkserver/, shortened).
KILL_LOG = "\n".join([
    "\x1b[0m WARNING 2026-12-02 02:19:15,726 controller 9938 -- Actor for Replica(id='k00h9fvq', "
    "deployment='VideoModel', app='cosmos-video') crashed, marking it unhealthy immediately.",
    "\x1b[0m INFO 2026-12-02 02:19:15,729 controller 9938 -- Adding 1 replica to Deployment(name='VideoModel').",
    "\x1b[0m INFO 12-02 02:19:34 [model.py:598] Resolved architecture: Qwen2_5_VLForConditionalGeneration",
    "\x1b[0m (EngineCore pid=13763) INFO 12-02 02:19:43 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with",
    "\x1b[0m (EngineCore pid=13763) INFO 12-02 02:19:55 [gpu_model_runner.py:5255] Model loading took 15.67 GiB",
    "\x1b[0m (EngineCore pid=13763) INFO 12-02 02:19:56 [gpu_model_runner.py:6271] Encoder cache will be initialized "
    "with a budget of 16384 tokens, and profiled with 1 video items of the maximum feature size.",
    "\x1b[0m (EngineCore pid=13763) INFO 12-02 02:20:21 [gpu_model_runner.py:6483] Profiling CUDA graph memory: x",
])


def test_the_kill_steps_replacement_is_broken_into_phases_from_the_kill(tmp_path):
    import gzip
    import json

    from benchmarks.lifecycle_log import main

    kill = datetime(2026, 12, 2, 2, 19, 9).timestamp()
    marks = start_phases(KILL_LOG, kill, 2026)["marks_s"]
    assert marks == {"death_noticed": 6.7, "replica_added": 6.7, "vllm_config": 25.0, "engine_core_started": 34.0,
                     "weights_loaded": 46.0, "mm_profiling_started": 47.0, "cudagraph_profiling_started": 72.0}
    log = tmp_path / "serve.log.gz"
    log.write_bytes(gzip.compress(KILL_LOG.encode()))
    out = tmp_path / "phases.json"
    assert main([str(log), "--since", "2026-12-02 02:19:09", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["marks_s"] == marks


def test_the_killed_replicas_engine_is_found_below_it_and_not_its_neighbours():
    """Two replicas sharing a GPU: killing one must watch its own engine core (a grandchild through the fork
    server, or a spawned child), never the other replica's."""
    from benchmarks.lifecycle_procs import descendants

    pairs = [(100, 1), (101, 100), (102, 101),  # replica A → fork server → engine core
             (200, 1), (201, 200),  # replica B → spawned engine core
             (300, 1)]
    assert descendants(100, pairs) == {101, 102}
    assert descendants(200, pairs) == {201}
    assert descendants(300, pairs) == set() and descendants(999, pairs) == set()


def test_a_refused_deploy_is_read_from_the_serve_log_so_the_start_stops_waiting():
    from benchmarks.lifecycle_log import deploy_failure

    log = (
        "\x1b[36m(ServeController pid=22005)\x1b[0m INFO 2026-12-02 10:05:47,521 controller 22005 -- Deploying\n"
        "\x1b[36m(ServeController pid=22005)\x1b[0m ERROR 2026-12-02 10:05:48,541 controller 22005 -- Deploying app "
        "'cosmos-video' failed with exception:\n"
        "\x1b[36m(ServeController pid=22005)\x1b[0m this machine cannot run the config's deployments: 2.6 CPUs\n"
    )
    assert deploy_failure(log) == "this machine cannot run the config's deployments: 2.6 CPUs"
    assert deploy_failure(log.split("ERROR")[0]) is None  # still deploying
    assert deploy_failure(log.rsplit("\x1b[36m", 1)[0]) is None  # the reason's line not written yet


@pytest.mark.parametrize("steps", ["start,sustain1,sustian3,stop-sigint", "sustain1x0", "stop-kill", "questions",
                                   "start,,burst", ""])
def test_a_misspelt_step_stops_the_run_before_anything_starts(monkeypatch, tmp_path, capsys, steps):
    def no_start(*a, **kw):
        raise AssertionError("nothing may start before the steps are checked")

    monkeypatch.setattr(lc.subprocess, "run", no_start)
    monkeypatch.setattr(lc, "Lifecycle", no_start)
    with pytest.raises(SystemExit) as e:
        lc.main(["--config", "configs/cpu.yaml", "--windows-dir", str(tmp_path), "--tokenizer", "none",
                 "--steps", steps, "--out", str(tmp_path / "out" / "lifecycle.json")])
    assert e.value.code == 2
    assert "unknown steps" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_every_documented_step_form_is_accepted():
    steps = "start,burst,questions3,sustain1,sustain3x96,kill,stop-sigint,stop-shutdown,stop-ray"
    assert lc.parse_steps(steps) == steps.split(",")

