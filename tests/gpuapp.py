"""The GPU tests' one way to run the project's graph on the GPU machine (tests/gpu): a GPU config on a
full-size dummy checkpoint, eager (start time matters there, not speed), on a free loopback port."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def gpu_graph(config: str, checkpoint: Path, served_name: str, name: str, **model: Any) -> Iterator[str]:
    """Runs ``configs/<config>`` on ``checkpoint`` (dummy weights, eager, 16 sequences and a decode sweep of at
    most 16, tests/data allowed) under a fresh Ray and Serve; yields the base URL, then shuts both down.
    ``model`` overrides model keys."""
    import ray
    from ray import serve

    from serve_app.app import build_app
    from serve_app.config import app_config_from_file

    cfg = app_config_from_file(ROOT / "configs" / config).model_dump(mode="json")
    cfg["model"].update(model_id=str(checkpoint), served_model_name=served_name, allow_ignore_eos=True, **model)
    cfg["model"]["engine_args"].update(load_format="dummy", enforce_eager=True, max_num_seqs=16)
    # The decode sweep is sized by max_num_seqs (configs/h200.yaml: 256): at 16 a longer sweep only queues.
    cfg["model"]["warmup_decode_sweep"] = min(cfg["model"]["warmup_decode_sweep"], 16)
    cfg["sources"]["allowed_roots"] = [str(ROOT / "tests" / "data")]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ray.init(include_dashboard=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(cfg), name=name, route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()
