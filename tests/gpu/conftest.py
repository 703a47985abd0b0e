"""GPU test fixtures: skip without CUDA + vLLM; one Serve app on the dummy 7B checkpoint."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DUMMY = ROOT / "checkpoints" / "cosmos-reason1-7b-dummy"


def _gpu_ready() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed"
    try:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA GPU"
    except Exception as e:  # noqa: BLE001
        return f"torch unavailable: {e}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_ready()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def gpu_app():
    """The project's graph on the GPU: vLLM AsyncLLM on the full-size dummy checkpoint.

    ``enforce_eager`` skips torch.compile/CUDA graphs: start time matters here, not speed.
    """
    import ray
    from ray import serve

    from serve_app.app import build_app
    from serve_app.checkpoint import ensure_checkpoint
    from serve_app.config import app_config_from_file

    ensure_checkpoint("full-dummy", DUMMY)
    cfg = app_config_from_file(ROOT / "configs" / "h200.yaml").model_dump(mode="json")
    cfg["model"].update(model_id=str(DUMMY), served_model_name="cosmos-reason1-7b-dummy", allow_ignore_eos=True)
    cfg["model"]["engine_args"].update(load_format="dummy", enforce_eager=True, max_num_seqs=16)
    cfg["sources"]["allowed_roots"] = [str(ROOT / "tests" / "data")]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ray.init(include_dashboard=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(cfg), name="gpu", route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()
