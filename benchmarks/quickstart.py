"""Bench: the README's quick start on this machine — first start and one request.

Runs ``serve run`` of ``configs/cpu.yaml`` (or ``--config``, e.g. ``configs/cpu-reason2.yaml``) with the
tiny checkpoint redirected to an empty temporary folder, so the first start includes building the
checkpoint (tokenizer from ``qwen.tiktoken`` + random weights), waits for the
model replica's "ready" log line and for ``GET /readyz`` to answer 200, then
times ``--requests`` uploads of the README's clip (the ``curl`` example) and
writes JSON; ``--response-out`` keeps the last response body (the README shows it).

    python -m benchmarks.quickstart --out results/cpu/quickstart.json \
        --response-out results/cpu/curl-intel_car-detection.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.harness import stop_process_group
from benchmarks.lifecycle_log import deploy_failure
from benchmarks.result import finite
from serve_app.config import app_config_from_file

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "tests" / "data" / "intel_car-detection.mp4"
READY = "model replica ready in"


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--timeout-s", type=float, default=600)
    p.add_argument("--out", default="results/cpu/quickstart.json")
    p.add_argument("--response-out", help="also write the last response body here (JSON)")
    a = p.parse_args(argv)
    ckpt = Path(app_config_from_file(a.config).model.model_id).name  # tiny-qwen2_5_vl, tiny-qwen3_vl
    with tempfile.TemporaryDirectory() as tmp:
        derived = Path(tmp) / "cpu.yaml"
        subprocess.run(
            [sys.executable, "-m", "serve_app.config", "override", a.config,
             f"model.model_id={tmp}/{ckpt}", "-o", str(derived)],
            check=True, cwd=ROOT,
        )
        serve_bin = Path(sys.executable).with_name("serve")
        t0 = time.perf_counter()
        # PYTHONUNBUFFERED reaches the replicas (Ray's workers inherit it), so READY is read when it is logged,
        # not when a replica's buffer next fills (benchmarks/lifecycle.py, a CPU run of 2026-12-02: minutes late).
        proc = subprocess.Popen([str(serve_bin), "run", str(derived)], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ready = threading.Event()
        log: list[str] = []

        def reader() -> None:
            assert proc.stdout is not None  # stdout=PIPE
            for line in proc.stdout:
                log.append(line)
                if READY in line or deploy_failure("".join(log[-2:])) is not None:
                    ready.set()  # ready, or Serve refused the app (`serve run` itself keeps waiting)

        threading.Thread(target=reader, daemon=True).start()
        try:
            ready.wait(a.timeout_s)
            if (failed := deploy_failure("".join(log))) is not None:
                raise SystemExit(f"Serve refused the app: {failed}")
            if not ready.is_set():
                raise SystemExit("the app did not become ready:\n" + "".join(log[-30:]))
            first_start_s = time.perf_counter() - t0
            ready_s = None
            while time.perf_counter() - t0 < a.timeout_s:
                try:
                    if httpx.get("http://127.0.0.1:8000/readyz", timeout=10).status_code == 200:
                        ready_s = time.perf_counter() - t0
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.25)
            if ready_s is None:
                raise SystemExit("GET /readyz never answered 200:\n" + "".join(log[-30:]))
            built = (Path(tmp) / ckpt / "model.safetensors").is_file()
            times, bodies = [], []
            for _ in range(a.requests):
                t = time.perf_counter()
                with open(CLIP, "rb") as f:
                    r = httpx.post("http://127.0.0.1:8000/v1/video/query", timeout=300,
                                   files={"video": (CLIP.name, f, "video/mp4")},
                                   data={"question": "Is anyone in this scene in danger?"})
                times.append(round(time.perf_counter() - t, 3))
                r.raise_for_status()
                bodies.append(r.json())
        finally:
            stop_process_group(proc, signal.SIGINT)  # like Ctrl-C on `serve run`
    doc = {
        "command": "python -m benchmarks.quickstart " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]},
        "first_start_s": round(first_start_s, 2),
        "first_start_includes_checkpoint_build": built,
        "readyz_200_s": round(ready_s, 2),
        "request_wall_s": times,
        "server_timings_ms": [b["timings"] for b in bodies],
        "video": {k: bodies[-1]["video"][k] for k in ("num_frames", "frame_width", "frame_height", "fps")},
        "usage": bodies[-1]["usage"],
        "model": bodies[-1]["model"],
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(finite(doc), indent=2, allow_nan=False))
    if a.response_out:
        Path(a.response_out).write_text(json.dumps(bodies[-1], ensure_ascii=False))
    print(json.dumps({k: doc[k] for k in ("first_start_s", "readyz_200_s", "request_wall_s")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
