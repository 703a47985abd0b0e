"""Issue 25's two high findings re-run as attacks, with figures (CPU; starts its own local Ray and Serve).

``python -m benchmarks.attacks [--steps memory,health] [--config configs/cpu.yaml] [--out-dir results/cpu/attacks]``
serves the config's application as shipped (its stream database in memory, so nothing is written next to
the config) on a free loopback port and writes one JSON result per step, each with its command:

* ``memory`` (item 1, ``memory.json``): 64 registrations of 60 s × 8 fps windows (480 frames: accepted
  before, ~367 MiB each), then 64 of 16 s × 8 fps (128 frames, the stream cap) looping a test clip in
  real time; how many were admitted and why the others were refused; the stream worker's memory
  (RSS, and private = RSS − shared, the shared part being Ray's object store pages) sampled while the
  admitted streams run, against ``streams.max_frame_memory_bytes``; Ray's object store in use; a normal
  clip query's latency meanwhile; the worker's memory after every stream is deleted.
* ``health`` (item 2, ``health.json``): two attacks, each held while ``/healthz`` and ``/readyz`` are
  polled (every ``--poll-every-s``, each poll given 10 s): 80 slow ``POST /v1/streams`` bodies; then
  ``streams.max_subscribers`` event subscribers plus ``ingress.max_ongoing_requests`` slow clip uploads.
  Per route: statuses, p50/p99/max latency, polls that got no answer in time.

Every attack is bounded (a count of connections, a duration) and stops by itself; everything runs on
127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from loadtest.statistics import percentiles
from serve_app.cameras.protocol import StreamCreate
from serve_app.cameras.rules import stream_frame_bytes
from serve_app.config import AppConfig, load_serve_config
from serve_app.testing import local_serve

ROOT = Path(__file__).resolve().parents[1]
APP = "attacks"
#: The looping camera of the memory attack (small source: decoding it costs little; the pixel budget sets
#: the held frame size, not the source).
CAMERA_CLIP = "dashcam_320x180_h264.mp4"
QUERY_CLIP = "dashcam_0p4s.mp4"
MiB = 2**20


def latency_summary(values: list[float]) -> dict[str, float | int | None]:
    """p50, p99 and max of ``values`` (seconds), 4 decimals (:func:`loadtest.statistics.percentiles`), and ``n``."""
    return {**percentiles(values, (50, 99), 4), "max": round(max(values), 4) if values else None, "n": len(values)}


def worker_memory(root_pid: int) -> dict[str, float] | None:
    """RSS and private (RSS − shared) MiB of this Serve's stream-worker replica."""
    from benchmarks.replicas import serve_processes

    for p in serve_processes(root_pid):
        try:
            if f"ServeReplica:{APP}:StreamWorker" in " ".join(p.cmdline()):
                mi = p.memory_info()
                return {"rss_mib": round(mi.rss / MiB, 1), "private_mib": round((mi.rss - mi.shared) / MiB, 1)}
        except Exception:  # noqa: BLE001 - the process may be gone between listing and reading
            continue
    return None


def object_store_used_mib() -> float:
    import ray

    total = float(ray.cluster_resources().get("object_store_memory", 0.0))  # type: ignore[no-untyped-call]  # unannotated in Ray
    free = float(ray.available_resources().get("object_store_memory", 0.0))  # type: ignore[no-untyped-call]  # unannotated in Ray
    return round((total - free) / MiB, 1)


def app_args(config: Path) -> dict[str, Any]:
    args: dict[str, Any] = json.loads(json.dumps(load_serve_config(config)["applications"][0]["args"]))
    args.setdefault("streams", {})["db_path"] = None  # in memory: the bench writes no database
    model = args.setdefault("model", {})
    if str(model.get("model_id", "")).startswith("./"):
        model["model_id"] = str(ROOT / model["model_id"][2:])
    args.setdefault("sources", {})["allowed_roots"] = [str(ROOT / "tests" / "data")]
    return args


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]}


def write(out_dir: Path, name: str, result: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


# --------------------------------------------------------------------------- item 1: memory


def memory_step(base: str, cfg: AppConfig, args: argparse.Namespace) -> dict[str, Any]:
    root = os.getpid()
    client = httpx.Client(timeout=60)
    baseline = worker_memory(root)
    body = {"url": CAMERA_CLIP, "loop": True, "questions": ["Is anyone in danger?"], "max_tokens": 8}

    wide = [client.post(f"{base}/v1/streams", json={**body, "window_s": 60, "fps": 8}) for _ in range(64)]
    wide_statuses = [r.status_code for r in wide]
    big = [client.post(f"{base}/v1/streams", json={**body, "window_s": 16, "fps": 8}) for _ in range(64)]
    big_statuses = [r.status_code for r in big]
    refused = next((r.json()["error"] for r in big if r.status_code != 201), None)
    ids = [r.json()["id"] for r in big if r.status_code == 201]
    need = stream_frame_bytes(StreamCreate(**{**body, "window_s": 16, "fps": 8}), cfg)

    samples, queries = [], []
    t0 = time.monotonic()
    next_query = t0
    while time.monotonic() - t0 < args.memory_s:
        mem = worker_memory(root)
        if mem is not None:
            samples.append({"t_s": round(time.monotonic() - t0, 1), **mem, "object_store_mib": object_store_used_mib()})
        if time.monotonic() >= next_query:  # a normal clip query while the attack runs
            q0 = time.monotonic()
            r = client.post(f"{base}/v1/video/query", timeout=120, json={
                "question": "What happens?", "video_path": QUERY_CLIP, "max_tokens": 4})  # fmt: skip
            queries.append({"status": r.status_code, "s": round(time.monotonic() - q0, 2)})
            next_query = time.monotonic() + args.query_every_s
        time.sleep(args.sample_every_s)
    statuses = client.get(f"{base}/v1/streams").json()["data"]
    frames = sum(s["frames_received"] for s in statuses)
    windows = {"cut": sum(s["windows_cut"] for s in statuses), "answered": sum(s["windows_answered"] for s in statuses),
               "dropped": sum(sum(s["windows_dropped"].values()) for s in statuses)}  # fmt: skip
    for sid in ids:
        client.delete(f"{base}/v1/streams/{sid}")
    time.sleep(args.settle_s)
    after = worker_memory(root)
    budget = cfg.streams.max_frame_memory_bytes
    peak_private = max((s["private_mib"] for s in samples), default=None)
    peak_rss = max((s["rss_mib"] for s in samples), default=None)
    base_private = baseline["private_mib"] if baseline else None
    return {
        "attack": "64 x POST /v1/streams 60 s x 8 fps, then 64 x 16 s x 8 fps looping " + CAMERA_CLIP,
        "wide_windows_statuses": {str(s): wide_statuses.count(s) for s in sorted(set(wide_statuses))},
        "wide_windows_message": wide[0].json()["error"]["message"] if wide_statuses[0] != 201 else None,
        "big_windows_statuses": {str(s): big_statuses.count(s) for s in sorted(set(big_statuses))},
        "big_windows_refusal": refused,
        "streams_admitted": len(ids),
        "reserved_per_stream_mib": round(need / MiB, 1),
        "budget_mib": round(budget / MiB, 1),
        "run_s": args.memory_s,
        "frames_received": frames,
        "windows": windows,
        "worker_before": baseline,
        "worker_peak": {"rss_mib": peak_rss, "private_mib": peak_private},
        "worker_private_growth_mib": None if peak_private is None or base_private is None
        else round(peak_private - base_private, 1),
        "within_budget": None if peak_private is None or base_private is None
        else (peak_private - base_private) * MiB <= budget,
        "object_store_peak_mib": max((s["object_store_mib"] for s in samples), default=None),
        "worker_after_delete": after,
        "queries_meanwhile": queries,
        "samples": samples,
    }


# --------------------------------------------------------------------------- item 2: health


class Held:
    """One request on a raw socket whose body never finishes (held until closed)."""

    def __init__(self, base: str, path: str, headers: dict[str, str], first: bytes, source: str, method: str = "POST"):
        host, port = base.split("//")[1].split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0))
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.sock.sendall(head.encode() + b"\r\n" + first)

    def status(self, timeout_s: float = 0.5) -> int | None:
        """The response status if one has arrived (None: still held)."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(64)
        except OSError:
            return None
        return int(data.split(b" ")[1]) if data.startswith(b"HTTP/") else None

    def close(self) -> None:
        self.sock.close()


def poll_health(base: str, duration_s: float, every_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    lat: dict[str, list[float]] = {"/healthz": [], "/readyz": []}
    codes: dict[str, dict[str, int]] = {"/healthz": {}, "/readyz": {}}
    t_end = time.monotonic() + duration_s
    with httpx.Client(timeout=10) as client:
        while time.monotonic() < t_end:
            for path in lat:
                t = time.monotonic()
                try:
                    code = str(client.get(base + path).status_code)
                except httpx.HTTPError as e:
                    code = type(e).__name__
                lat[path].append(time.monotonic() - t)
                codes[path][code] = codes[path].get(code, 0) + 1
            time.sleep(every_s)
    for path in lat:
        out[path] = {"statuses": codes[path], "latency_s": latency_summary(lat[path])}
    return out


def health_step(base: str, cfg: AppConfig, args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    # 1: 80 slow POST /v1/streams bodies (each declares 1,000 bytes and sends 10)
    held = [Held(base, "/v1/streams", {"Content-Type": "application/json", "Content-Length": "1000"},
                 b'{"url": "a"', f"127.0.0.{2 + i % 32}") for i in range(80)]  # fmt: skip
    time.sleep(1.0)
    refused_at_once = sum(1 for h in held if h.status(0.2) is not None)
    polled = poll_health(base, args.hold_s, args.poll_every_s)
    for h in held:
        h.close()
    runs.append({"attack": "80 slow POST /v1/streams bodies", "answered_at_once": refused_at_once, **polled})
    time.sleep(args.settle_s)

    # 2: every subscriber place, plus every admitted slot held by a slow clip upload
    subs = [Held(base, "/v1/events", {}, b"", "127.0.0.1", method="GET") for _ in range(cfg.streams.max_subscribers)]
    sub_statuses = [s.status(10) for s in subs]
    form = b'--b\r\nContent-Disposition: form-data; name="video"; filename="a.mp4"\r\n\r\n'
    uploads = [Held(base, "/v1/video/query", {"Content-Type": "multipart/form-data; boundary=b",
                                              "Content-Length": "500000"}, form + b"\0" * 10_000,
                    f"127.0.0.{2 + i % 32}") for i in range(cfg.ingress.max_ongoing_requests)]  # fmt: skip
    time.sleep(1.0)
    polled = poll_health(base, args.hold_s, args.poll_every_s)
    for h in subs + uploads:
        h.close()
    runs.append({
        "attack": f"{cfg.streams.max_subscribers} event subscribers + {cfg.ingress.max_ongoing_requests} slow clip "
        "uploads",
        "subscriber_statuses": {str(s): sub_statuses.count(s) for s in set(sub_statuses)},
        **polled,
    })
    return {
        "ingress_slots": {
            "admitted": cfg.ingress.max_ongoing_requests,
            "subscribers": cfg.streams.max_subscribers,
            "reserved": cfg.security.reserved_slots,
        },
        "hold_s": args.hold_s,
        "poll_every_s": args.poll_every_s,
        "runs": runs,
        "goal": "/healthz p99 <= 1 s and /readyz 200 during both attacks",
        "met": all(
            r["/healthz"]["latency_s"]["p99"] is not None and r["/healthz"]["latency_s"]["p99"] <= 1.0
            and set(r["/readyz"]["statuses"]) == {"200"} and set(r["/healthz"]["statuses"]) == {"200"}
            for r in runs
        ),
    }


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="memory,health",
                   help="comma-separated: memory, health (a step named twice runs twice in the same worker)")
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "cpu.yaml")
    p.add_argument("--out-dir", type=Path, default=ROOT / "results" / "cpu" / "attacks")
    p.add_argument("--memory-s", type=float, default=90.0, help="seconds the admitted big-window streams run")
    p.add_argument("--sample-every-s", type=float, default=2.0)
    p.add_argument("--query-every-s", type=float, default=15.0)
    p.add_argument("--hold-s", type=float, default=20.0, help="seconds each health attack is held and polled")
    p.add_argument("--poll-every-s", type=float, default=0.25)
    p.add_argument("--settle-s", type=float, default=10.0)
    args = p.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    command = "python -m benchmarks.attacks " + " ".join(sys.argv[1:] if argv is None else argv)
    app = app_args(args.config)
    cfg = AppConfig.model_validate(app)
    with local_serve.running(local_serve.free_port()) as base:
        local_serve.deploy(APP, "/", app)
        for i, step in enumerate(steps):
            started = datetime.now(UTC).isoformat(timespec="seconds")
            res = {"memory": memory_step, "health": health_step}[step](base, cfg, args)
            # a step named again runs again in the same worker (memory, memory: is what stays after the first
            # round a once-per-process cost or a leak?) and writes <step>-<n>.json
            n = steps[: i + 1].count(step)
            name = step if n == 1 else f"{step}-{n}"
            path = write(args.out_dir, name, {"command": command, "step": step, "round": n, "started": started,
                                               "config": str(args.config), "machine": machine(), **res})  # fmt: skip
            print(f"== {step}: {path}")
            print(json.dumps({k: v for k, v in res.items() if k not in ("samples", "runs")}, indent=1)[:1500])
            if "runs" in res:
                for r in res["runs"]:
                    print(r["attack"], {k: r[k] for k in ("/healthz", "/readyz")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
