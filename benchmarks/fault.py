"""Fault bench: how long the service takes to recover from a killed decode replica and a dead engine.

Run (CPU, outside CI; starts its own Ray + Serve)::

    python -m benchmarks.fault --out results/fault-cpu.json

Scenarios (the same functions the fault tests call, with the tests' generous bounds):

* :func:`decoder_kill_run`: 4 cameras post clip windows back to back (the load tester's closed
  loop, :func:`loadtest.traffic.closed_loop`, in a thread of its own); one of two decode
  replicas is ``ray.kill``-ed; records which requests failed (status, when), when Serve had
  a replacement replica RUNNING, and the first success after the kill.
* :func:`engine_death_run`: a request kills the model replica's engine (the scripted engine's
  ``[die]`` marker); records when Serve's health check had replaced the replica and a request
  was answered by the new engine.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
import time
from typing import Any

import httpx

from benchmarks import replicas
from benchmarks.result import command, machine, write_result
from loadtest import traffic
from loadtest.records import RequestRecord
from loadtest.runner import Runner
from loadtest.statistics import percentiles
from serve_app.testing import local_serve
from serve_app.testing.engines import DIE_MARKER

logger = logging.getLogger(__name__)

SCRIPTED = "serve_app.testing.engines:scripted_engine"
#: A camera's request: a 10-s window (40 frames of 420×756: the benchmark workload) and 4 tokens.
CAMERA_QUERY = traffic.ClipQuery(local_serve.CLIP, "Is anyone in danger?", start_s=5, end_s=15)
CAMERA_MAX_TOKENS = 4


def fault_app_args(**overrides: Any) -> dict[str, Any]:
    """The graph with the weightless scripted engine (fast, fault-injectable) and two decode replicas."""
    base: dict[str, Any] = {
        "model": {"backend": SCRIPTED, "checkpoint": None, "served_model_name": "scripted", "warmup": False,
                  "max_concurrent_requests": 4, "model_id": str(local_serve.TINY_CKPT)},
        "decoder": {"num_cpus": 0, "num_replicas": 2, "max_ongoing_requests": 2, "max_queued_requests": 16},
        "model_replica": {"num_cpus": 0, "max_ongoing_requests": 8, "max_queued_requests": 16,
                          "health_check_period_s": 1, "health_check_timeout_s": 5},
    }
    for k, v in overrides.items():
        base[k] = {**base.get(k, {}), **v} if isinstance(v, dict) else v
    return local_serve.cpu_args(**base)


def decoder_kill_run(
    url: str, app: str, *, cameras: int = 4, warmup_s: float = 6.0, after_s: float = 6.0,
    recovery_timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Kills one decode replica under a ``cameras``-camera load; returns what happened.

    Returns a dict with (times in seconds from the start of the load):
        ``kill_s``, ``replaced_s`` (a new replica RUNNING, the deployment back to full size;
        None if not within ``recovery_timeout_s``), ``recovery_s`` (= replaced - kill),
        ``first_success_after_kill_s``, ``requests`` (count), ``failures`` (each: camera,
        start_s, end_s, status, error; status 0 = client timeout), ``after_recovery``
        (requests started after the replacement: total and ok).
    """
    held: dict[str, Any] = {}
    records: list[RequestRecord] = []
    started = threading.Event()

    def keep(runner: Runner) -> None:
        held.update(runner=runner, loop=asyncio.get_running_loop())
        started.set()

    def run_load() -> None:
        records.extend(asyncio.run(traffic.closed_loop(
            url, CAMERA_QUERY, clients=cameras, duration_s=3600, max_tokens=CAMERA_MAX_TOKENS,
            request_timeout_s=recovery_timeout_s, started=keep)))

    th = threading.Thread(target=run_load, daemon=True)
    th.start()
    started.wait(timeout=30)
    runner: Runner = held["runner"]
    time.sleep(warmup_s)  # every time below is on the runner's clock: seconds since the load began
    before = replicas.replica_actor_names(app, "VideoDecoder")
    target = len(before)
    victim = before[0]
    kill_s = runner.clock()
    replicas.kill_replica(victim)
    logger.info("killed %s at %.1f s", victim, kill_s)
    replaced_s = None
    while runner.clock() - kill_s < recovery_timeout_s:
        names = replicas.replica_actor_names(app, "VideoDecoder")
        if victim not in names and len(names) == target and replicas.running_replicas(app, "VideoDecoder") == target:
            replaced_s = runner.clock()
            break
        time.sleep(0.2)
    time.sleep(after_s)
    held["loop"].call_soon_threadsafe(runner.stop, True)  # stop sending; answers in flight are awaited
    th.join(timeout=recovery_timeout_s + 30)
    ok = [r for r in records if r.status == 200 and r.done_s is not None]
    oks_after_kill = [r.done_s for r in ok if r.done_s is not None and r.done_s > kill_s]
    after = [r for r in records if replaced_s is not None and r.sent_s > replaced_s]
    return {
        "cameras": cameras,
        "victim": victim,
        "kill_s": round(kill_s, 2),
        "replaced_s": None if replaced_s is None else round(replaced_s, 2),
        "recovery_s": None if replaced_s is None else round(replaced_s - kill_s, 2),
        "first_success_after_kill_s": round(min(oks_after_kill) - kill_s, 2) if oks_after_kill else None,
        "requests": len(records),
        "ok": len(ok),
        "failures": [
            {"camera": int(r.camera_id.removeprefix("cam-")), "start_s": round(r.sent_s, 2),
             "end_s": None if r.done_s is None else round(r.done_s, 2), "status": r.status,
             "error": r.error_type or r.error_kind}
            for r in records if r.status != 200
        ],
        "after_recovery": {"requests": len(after), "ok": sum(r.status == 200 for r in after)},
        "latency_p50_s": percentiles([r.latency_ms / 1000 for r in ok if r.latency_ms is not None], (50,))["p50"],
    }


def _ask(url: str, question: str, timeout_s: float = 30) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/video/query",
        json={"question": question, "video_path": local_serve.CLIP.name, "end_s": 1, "max_tokens": 2},
        timeout=timeout_s,
    )


def engine_death_run(url: str, *, recovery_timeout_s: float = 60.0) -> dict[str, Any]:
    """Kills the model replica's engine with one request; returns when a new engine answered.

    Returns a dict: ``engine_before``, ``engine_after`` (the scripted engine's instance names),
    ``die_status``/``die_error`` (the killing request's answer), ``statuses_while_down``
    (answers while the replica was replaced), ``recovery_s`` (kill → first answer from a
    new engine; None if not within ``recovery_timeout_s``).
    """
    first = _ask(url, "Warm up.")
    first.raise_for_status()
    before = first.json()["text"].split()[0]
    t_kill = time.monotonic()
    die = _ask(url, f"Please {DIE_MARKER} now.")
    statuses: list[int] = []
    after, recovery_s = None, None
    while time.monotonic() - t_kill < recovery_timeout_s:
        try:
            r = _ask(url, "Still there?", timeout_s=10)
        except httpx.HTTPError:
            statuses.append(0)
            continue
        statuses.append(r.status_code)
        if r.status_code == 200 and r.json()["text"].split()[0] != before:
            after, recovery_s = r.json()["text"].split()[0], time.monotonic() - t_kill
            break
        time.sleep(0.25)
    return {
        "engine_before": before,
        "engine_after": after,
        "die_status": die.status_code,
        "die_error": die.json().get("error"),
        "statuses_while_down": sorted(set(statuses)),
        "recovery_s": None if recovery_s is None else round(recovery_s, 2),
    }


def main(argv: list[str] | None = None) -> None:
    """Command line: runs both scenarios on a local Serve and writes the result JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results/fault-cpu.json")
    ap.add_argument("--port", type=int, default=0, help="Serve's HTTP port on 127.0.0.1 (0: a free one)")
    ap.add_argument("--repeats", type=int, default=3, help="decoder kills to run (one after another)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    with local_serve.running(args.port) as url:
        local_serve.deploy("fault", "/", fault_app_args())
        kills = []
        for i in range(args.repeats):
            kills.append(decoder_kill_run(url, "fault"))
            logger.info("decoder kill %d: %s", i, kills[-1])
        death = engine_death_run(url)
        logger.info("engine death: %s", death)
    recov = [k["recovery_s"] for k in kills if k["recovery_s"] is not None]
    result = {
        "bench": "fault",
        "command": command("benchmarks.fault", argv),
        "machine": machine(),
        "setup": "CPU, real PyAV decoder (2 replicas), scripted weightless engine; 4 cameras, 10-s windows",
        "decoder_kill": kills,
        "decoder_recovery_s": {"min": min(recov, default=None), "max": max(recov, default=None)},
        "engine_death": death,
    }
    print(write_result(args.out, result))


if __name__ == "__main__":
    main()
