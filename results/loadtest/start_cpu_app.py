"""Starts the CPU app from a Serve config on a port of your choice (for the committed CPU sweep).

    .venv/bin/python results/loadtest/start_cpu_app.py --config configs/cpu.yaml --port 8470

Same as ``serve run configs/cpu.yaml`` except the HTTP port (8000 may be taken
on a shared machine) and the logical CPU count Ray declares. Runs until
interrupted (Ctrl-C / SIGTERM), then shuts Serve and Ray down. Not part of the
load tester (which never imports Ray).
"""

from __future__ import annotations

import argparse
import signal
import time

import ray
from ray import serve

from serve_app.app import build_app
from serve_app.config import load_serve_config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/cpu.yaml")
    p.add_argument("--port", type=int, default=8470)
    p.add_argument("--num-cpus", type=int, default=8, help="logical CPUs Ray declares")
    a = p.parse_args()
    app = load_serve_config(a.config)["applications"][0]
    ray.init(num_cpus=a.num_cpus, include_dashboard=False)
    serve.start(http_options={"host": "127.0.0.1", "port": a.port})
    serve.run(build_app(app.get("args") or {}), name=app.get("name", "app"), route_prefix=app.get("route_prefix", "/"))
    print(f"READY http://127.0.0.1:{a.port}", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
