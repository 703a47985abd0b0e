"""The real engine in the Serve graph on a GPU (vLLM AsyncLLM, dummy 7B weights).

Skipped without CUDA + vLLM; run on the GPU machine with
``bash benchmarks/gpu_machine.sh tests``.
"""

import importlib.util
import json
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from httpx_sse import EventSource

ROOT = Path(__file__).resolve().parents[2]
DUMMY = ROOT / "checkpoints" / "cosmos-reason1-7b-dummy"


def _gpu_ready() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed"
    try:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA GPU"
    except Exception as e:  # noqa: BLE001 - any import or CUDA failure means "skip: no usable GPU"
        return f"torch unavailable: {e}"
    return None


pytestmark = pytest.mark.skipif(_gpu_ready() is not None, reason=f"GPU test: {_gpu_ready()}")

QUESTION = "Is anyone in this scene in danger? Answer with reasoning."


@pytest.fixture(scope="module")
def gpu_app():
    """The project's graph on the GPU: vLLM AsyncLLM on the full-size dummy checkpoint (``configs/h200.yaml``)."""
    from gpuapp import gpu_graph

    from serve_app.model.checkpoint import ensure_checkpoint

    ensure_checkpoint("full-dummy", DUMMY)
    with gpu_graph("h200.yaml", DUMMY, "cosmos-reason1-7b-dummy", "gpu") as url:
        yield url


def test_engine_answers_a_real_clip(gpu_app, data_dir):
    with open(data_dir / "intel_car-detection.mp4", "rb") as f:
        r = httpx.post(
            f"{gpu_app}/v1/video/query",
            files={"video": ("car.mp4", f, "video/mp4")},
            data={"question": QUESTION, "start_s": "10", "end_s": "20", "max_tokens": "32", "ignore_eos": "true"},
            timeout=300,
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["random_weights"] is True and body["model"] == "cosmos-reason1-7b-dummy"
    assert body["video"]["num_frames"] == 40 and body["usage"]["video_tokens"] == 8100
    assert body["usage"]["prompt_tokens"] > 8100
    assert body["usage"]["completion_tokens"] == 32 and body["finish_reason"] == "length"
    ts = np.asarray(body["video"]["timestamps_s"])
    assert np.all(np.diff(ts) > 0)


def test_streaming_delivers_tokens_as_generated(gpu_app, data_dir):
    arrivals = []
    with open(data_dir / "intel_car-detection.mp4", "rb") as f, httpx.stream(
        "POST",
        f"{gpu_app}/v1/video/query",
        files={"video": ("car.mp4", f, "video/mp4")},
        data={"question": QUESTION, "end_s": "10", "max_tokens": "64", "ignore_eos": "true", "stream": "true"},
        timeout=300,
    ) as r:
        assert r.status_code == 200
        for sse in EventSource(r).iter_sse():
            if sse.data != "[DONE]":
                arrivals.append((time.perf_counter(), json.loads(sse.data)))
    kinds = [e["type"] for _, e in arrivals]
    assert kinds[0] == "clip" and kinds[-1] == "done"
    deltas = [t for t, e in arrivals if e["type"] == "delta"]
    assert len(deltas) >= 8  # many chunks, not one blob at the end
    assert arrivals[-1][1]["usage"]["completion_tokens"] == 64
    assert "".join(e["text"] for _, e in arrivals if e["type"] == "delta") == arrivals[-1][1]["text"]


def test_bad_override_is_a_clear_4xx(gpu_app):
    r = httpx.post(
        f"{gpu_app}/v1/video/query",
        json={"question": "q", "video_path": "intel_car-detection.mp4", "top_p": 0},
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_p"


def test_disconnect_frees_the_engine_slot(gpu_app, data_dir):
    from ray import serve

    model = serve.get_deployment_handle("VideoModel", app_name="gpu")
    with open(data_dir / "intel_car-detection.mp4", "rb") as f, httpx.stream(
        "POST",
        f"{gpu_app}/v1/video/query",
        files={"video": ("car.mp4", f, "video/mp4")},
        data={"question": QUESTION, "end_s": "4", "max_tokens": "4000", "ignore_eos": "true", "stream": "true"},
        timeout=300,
    ) as r:
        seen = 0
        for sse in EventSource(r).iter_sse():
            if '"delta"' in sse.data:
                seen += 1
                if seen == 3:
                    busy = model.num_unfinished.remote().result()
                    break  # client goes away mid-generation
    assert busy >= 1  # the 4000-token generation was running when the client left
    deadline = time.time() + 30
    while time.time() < deadline and model.num_unfinished.remote().result() > 0:
        time.sleep(0.5)
    assert model.num_unfinished.remote().result() == 0


def test_health_check_passes_on_a_live_engine(gpu_app):
    from ray import serve

    model = serve.get_deployment_handle("VideoModel", app_name="gpu")
    model.check_health.remote().result()
    assert model.replica_start_s.remote().result() > 0


def _proc(pid: int) -> tuple[int, str, str]:
    """(parent pid, kernel name, command line) of a running process, from /proc."""
    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ppid, comm, cmd


def test_the_engine_core_is_forked_from_the_preloaded_fork_server(gpu_app):
    # model.engine_process: forkserver (the default): the engine core (named VLLM::EngineCor by the kernel)
    # is a child of the fork server, whose parent is the model replica (serve_app.model.engines.engine_process).
    cores = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid, comm, _ = _proc(int(d.name))
            except (OSError, ValueError, IndexError):
                continue
            if comm.startswith("VLLM::EngineCor"):
                cores.append((int(d.name), ppid))
    assert len(cores) == 1, cores
    server_ppid, _, server_cmd = _proc(cores[0][1])
    assert "multiprocessing.forkserver" in server_cmd
    assert "VideoModel" in _proc(server_ppid)[2]
