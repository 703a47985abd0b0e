"""The model replica's life cycle as a user sees it: start, first burst, crash and recovery, every stop path.

Runs on the GPU machine (``bash benchmarks/gpu_machine.sh lifecycle [ARGS]``), against ``serve run`` of a
config exactly as a user starts it (its own process group, the terminal's default SIGINT), and writes
one JSON result with its command. Steps (``--steps``, in order, comma-separated):

* ``start``: ``serve run`` → the first answered query (``POST /v1/video/query``, 8 tokens, polled every
  0.5 s), then the time at which every model replica is ready (``all_replicas_ready_s``; the step waits for
  it, so that the next steps meet the whole service), the first replica's start broken into phases from the
  log (:func:`benchmarks.lifecycle_log.start_phases`), and whether vLLM's compile cache was warm.
  ``--stacks-every-s`` samples the model replica's and engine core's Python stacks with py-spy meanwhile (a
  file under the result's folder) to find where a slow start spends its time.
* ``burst``: ``--burst`` distinct 10-s windows at once through ``vllm bench serve`` (vLLM's own client,
  ``/v1/chat/completions``, 256 tokens, ``ignore_eos``); clips/s. Two bursts after a start give the
  first-burst ratio.
* ``questionsN`` (``questions1``, ``questions3``): ``--burst`` distinct windows at once to
  ``POST /v1/video/query`` with N questions each (``questions``, 256 tokens each, ``ignore_eos``): windows/s.
  Run after one ``burst`` so both sides are warm; with ``COSMOS_SERVE_ENGINE_TIMINGS`` set the engine
  timings show each question's prefix-cache hits (``cached_tokens``).
* ``sustainN`` (``sustain1``, ``sustain3``): the same requests in a closed loop, ``--burst`` windows in
  flight for ``--sustain-s`` seconds; windows/s over those that end after ``--sustain-warmup-s``
  (:mod:`benchmarks.window_load`: a burst's wall time includes its ramp and drain, longer with 3 questions),
  and by Little's law (``--burst`` / mean latency); ``--sustain-stagger-s`` spreads the first sends (all at once,
  the loop runs in lockstep cohorts). Needs ``--burst`` + ~3 windows/s × ``--sustain-s`` new windows per step.
  ``sustainNxC`` (``sustain1x96``) keeps C windows in flight instead of ``--burst``: steps at several C on one
  server show whether a loop saturated the engine (its windows/s stops rising with C).
* ``kill``: SIGKILL of the model replica's worker while ``--kill-load`` clients keep asking; the time
  to the next answered query, every request's outcome meanwhile, when the killed replica's own engine
  core was gone, and when its replacement was ready (``replaced_s``; with replicas sharing a GPU,
  ``configs/h200-pair.yaml``, the other replica answers meanwhile, so the step waits for it).
* ``stop-sigint`` / ``stop-shutdown`` / ``stop-ray``: Ctrl-C of ``serve run`` (SIGINT to its process
  group, as a terminal sends it), ``serve shutdown -y`` (with ``RAY_AUTH_MODE=token``, as docs/gpu.md says),
  ``ray stop``; then the seconds until the GPU's
  memory is back to idle and the engine processes left. Whatever a stop leaves is then cleaned up by
  force (and recorded), so the next step starts clean.

The log reading is in :mod:`benchmarks.lifecycle_log`, the GPU and process inspection and the clean-up in
:mod:`benchmarks.lifecycle_procs`; this module holds the steps (:class:`Lifecycle`) and the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks import window_load
from benchmarks.lifecycle_log import deploy_failure, replicas_ready_s, start_phases
from benchmarks.lifecycle_procs import (
    descendants,
    dump_stacks,
    engine_processes,
    force_clean,
    gpu_name,
    gpu_state,
    process_pairs,
    ray_processes,
    wait_gpu_idle,
)
from benchmarks.workload import QUESTIONS
from serve_app.config import load_serve_config

#: Windows at the end of --windows-dir that single queries use (bursts use distinct ones from the front,
#: so no two requests of a burst or of two bursts share a clip).
QUERY_WINDOWS = 16


class Lifecycle:
    """One bench run: the ``serve run`` process, the windows, and the result being written."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.dir = self.out.parent
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "lifecycle_serve.log"
        self.result: dict[str, Any] = {"command": "python -m benchmarks.lifecycle " + " ".join(sys.argv[1:]),
                                       "config": args.config, "overrides": args.set,
                                       "machine": {"cpus": os.cpu_count(), "load_average_1_5_15": os.getloadavg(),
                                                   "gpu": gpu_name()}, "steps": []}
        app = load_serve_config(args.derived)["applications"][0]
        self.port = int(load_serve_config(args.derived).get("http_options", {}).get("port", 8000))
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = app["args"]["model"].get("served_model_name") or app["args"]["model"]["model_id"]
        self.model_replicas = int((app["args"].get("model_replica") or {}).get("num_replicas", 1))

    def save(self) -> None:
        self.out.write_text(json.dumps(self.result, indent=2) + "\n")

    def query_body(self, i: int) -> dict[str, Any]:
        files = sorted(Path(self.args.windows_dir).glob("*.mp4"))[-QUERY_WINDOWS:]  # bursts take theirs from the front
        return {"video_path": str(files[i % len(files)]), "question": "What happens?", "max_tokens": 8}

    def start(self) -> dict[str, Any]:
        """``serve run`` → first answered query (see the module doc)."""
        before = {"gpu": gpu_state(), "engine_processes": engine_processes()}
        t0 = time.time()
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            # PYTHONUNBUFFERED reaches the replicas (Ray's workers inherit it): without it a replica's lines can
            # reach this log minutes late (a CPU run of 2026-12-02: the second replica's "model replica ready"
            # of 12:49:35 came after lines of 12:53:09), and the steps read the log as it is written.
            self.proc = subprocess.Popen(  # a terminal's foreground job: own process group, default SIGINT
                ["serve", "run", self.args.derived], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        stacks = self.dir / "lifecycle_stacks.txt" if self.args.stacks_every_s else None
        next_stack = time.monotonic() + (self.args.stacks_every_s or 0)
        answered = None
        failed = None
        with httpx.Client(timeout=30) as client:
            while time.time() - t0 < self.args.start_timeout_s and self.proc.poll() is None:
                # Serve refused the app (`serve run` itself keeps waiting until Ctrl-C): stop waiting, say why.
                failed = deploy_failure(self.log_path.read_text(errors="replace"))
                if failed:
                    break
                with contextlib.suppress(httpx.HTTPError):
                    r = client.post(f"{self.url}/v1/video/query", json=self.query_body(0))
                    if r.status_code == 200:
                        answered = round(time.time() - t0, 1)
                        break
                if stacks is not None and time.monotonic() >= next_stack:
                    dump_stacks(stacks, round(time.time() - t0, 1))
                    next_stack += self.args.stacks_every_s
                time.sleep(0.5)
        year = datetime.now().year
        phases = start_phases(self.log_path.read_text(errors="replace"), t0, year)  # the first replica's phases
        # Several model replicas (configs/h200-pair.yaml) start one after another: the first answers while the
        # next is still starting on the same GPU. Wait for all, so that the bursts after this step measure the
        # whole service (2026-12-02: both bursts ran while the second replica was still starting).
        ready = replicas_ready_s(self.log_path.read_text(errors="replace"), t0, year)
        while (answered is not None and len(ready) < self.model_replicas and self.proc.poll() is None
               and time.time() - t0 < self.args.start_timeout_s):
            time.sleep(1)
            ready = replicas_ready_s(self.log_path.read_text(errors="replace"), t0, year)
        all_ready = ready[self.model_replicas - 1] if len(ready) >= self.model_replicas else None
        return {"first_answer_s": answered, "model_replicas": self.model_replicas,
                "all_replicas_ready_s": all_ready, "exited": self.proc.poll(), "deploy_failed": failed,
                "before": before, **phases}

    def burst(self) -> dict[str, Any]:
        """``--burst`` windows at once through ``vllm bench serve`` (see the module doc)."""
        n = self.args.burst
        files = sorted(Path(self.args.windows_dir).glob("*.mp4"))
        offset = self.args.burst_offset
        self.args.burst_offset += n
        chosen = [files[(offset + i) % len(files)] for i in range(n)]
        data = [{"id": f"w{i}", "conversations": [{"from": "human", "value": "Is anyone in this scene in danger?"},
                 {"from": "gpt", "value": "a b c d"}], "video": str(p)} for i, p in enumerate(chosen)]
        ds = Path(f"/tmp/lifecycle-burst-{offset}.json")
        ds.write_text(json.dumps(data))
        name = f"lifecycle_burst_{offset}.json"
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "openai-chat",
               "--base-url", self.url, "--endpoint", "/v1/chat/completions", "--model", self.model,
               "--tokenizer", self.args.tokenizer, "--dataset-name", "sharegpt", "--dataset-path", str(ds),
               "--num-prompts", str(n), "--max-concurrency", str(n), "--request-rate", "inf",
               "--sharegpt-output-len", "256", "--ignore-eos", "--disable-tqdm", "--save-result",
               "--result-dir", str(self.dir), "--result-filename", name]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
        res: dict[str, Any] = {"clips": n, "rc": p.returncode, "wall_s": round(time.time() - t0, 1)}
        with contextlib.suppress(OSError, ValueError):
            j = json.loads((self.dir / name).read_text())
            res.update({k: j.get(k) for k in ("completed", "failed", "request_throughput", "duration",
                                              "mean_e2el_ms", "total_input_tokens")})
            (self.dir / name).unlink()
        if p.returncode:
            res["stderr_tail"] = p.stderr[-1500:]
        return res

    def questions(self, n_questions: int) -> dict[str, Any]:
        """``--burst`` distinct windows at once to ``POST /v1/video/query``, each with ``n_questions`` questions.

        Every question gets 256 tokens (``ignore_eos``). Returns windows/s and answers/s over the burst's
        wall time, the requests' statuses, and the completion tokens counted from the responses' usage
        (:func:`benchmarks.window_load.burst`). The prefix cache's share per question is in the engine timings
        file (``cached_tokens``).
        """
        n = self.args.burst
        files = sorted(Path(self.args.windows_dir).glob("*.mp4"))
        offset = self.args.burst_offset
        self.args.burst_offset += n
        chosen = [files[(offset + i) % len(files)] for i in range(n)]
        res = asyncio.run(window_load.burst(self.url, chosen, list(QUESTIONS[:n_questions])))
        return {**res, "first_window": chosen[0].name}

    def sustain(self, n_questions: int, in_flight: int | None = None) -> dict[str, Any]:
        """``in_flight`` windows (default ``--burst``) kept in flight for ``--sustain-s`` seconds, each with
        ``n_questions`` questions; windows/s over the windows that end after ``--sustain-warmup-s``
        (:func:`benchmarks.window_load.sustain`).

        Takes the next windows of ``--windows-dir`` in order, none twice and none of the last
        :data:`QUERY_WINDOWS` (the single queries'); sending stops early if they run out (the result says so).
        """
        files = sorted(Path(self.args.windows_dir).glob("*.mp4"))[:-QUERY_WINDOWS]
        offset = self.args.burst_offset
        chosen = files[offset:]
        res = asyncio.run(window_load.sustain(self.url, chosen, list(QUESTIONS[:n_questions]),
                                              in_flight or self.args.burst,
                                              self.args.sustain_s, self.args.sustain_warmup_s,
                                              self.args.sustain_stagger_s))
        self.args.burst_offset += res["windows_used"]
        return {**res, "first_window": chosen[0].name if chosen else None}

    def kill(self) -> dict[str, Any]:
        """SIGKILL of the model replica's worker under load → next answered query (see the module doc)."""
        replicas = [p for p in engine_processes() if "VideoModel" in p["cmd"]]
        if not replicas:
            return {"error": "no VideoModel replica process"}
        # The killed replica's own engine core (replicas sharing a GPU: the other's engine stays, as it should).
        below = descendants(replicas[0]["pid"], process_pairs())
        engines_before = [p for p in engine_processes() if "EngineCor" in p["cmd"] and p["pid"] in below]
        outcomes: list[dict[str, Any]] = []
        answered: dict[str, float] = {}
        t_kill = 0.0

        async def client_loop(k: int) -> None:
            async with httpx.AsyncClient(timeout=300) as c:
                i = k
                while "s" not in answered and time.time() - t_kill < self.args.start_timeout_s:
                    t = time.time()
                    try:
                        r = await c.post(f"{self.url}/v1/video/query", json=self.query_body(i))
                        code: int | str = r.status_code
                    except httpx.HTTPError as e:
                        code = type(e).__name__
                    outcomes.append({"sent_s": round(t - t_kill, 2), "done_s": round(time.time() - t_kill, 2),
                                     "status": code})
                    if code == 200 and t > t_kill:
                        answered.setdefault("s", round(time.time() - t_kill, 1))
                    elif code != 200:
                        await asyncio.sleep(0.5)
                    i += self.args.kill_load

        async def run() -> None:
            nonlocal t_kill
            t_kill = time.time() + 3  # load runs 3 s before the kill
            tasks = [asyncio.create_task(client_loop(k)) for k in range(self.args.kill_load)]
            await asyncio.sleep(3)
            os.kill(replicas[0]["pid"], signal.SIGKILL)
            gone: float | None = None
            while not all(t.done() for t in tasks):
                alive = {p["pid"] for p in engine_processes()}
                if gone is None and not any(e["pid"] in alive for e in engines_before):
                    gone = round(time.time() - t_kill, 1)
                    answered["engine_gone_s"] = gone
                await asyncio.sleep(0.5)

        asyncio.run(run())
        # Replicas sharing a GPU answer at once (the other replica); the step still waits for the replacement
        # to be ready, so that the next step meets the full service again.
        phases = start_phases(self.log_path.read_text(errors="replace"), t_kill, datetime.now().year)
        while "replica_ready" not in phases["marks_s"] and time.time() - t_kill < self.args.start_timeout_s:
            time.sleep(2)
            phases = start_phases(self.log_path.read_text(errors="replace"), t_kill, datetime.now().year)
        codes: dict[str, int] = {}
        for o in outcomes:
            codes[str(o["status"])] = codes.get(str(o["status"]), 0) + 1
        # where the gap went: the replacement's phases from the log (above), seconds after the kill
        return {"replica_pid": replicas[0]["pid"], "replicas_before": len(replicas),
                "answered_again_s": answered.get("s"), "replaced_s": phases["marks_s"].get("replica_ready"),
                "old_engine_gone_s": answered.get("engine_gone_s"), "outcomes_by_status": codes,
                "phases_after_kill": phases, "requests": outcomes, "engine_processes_after": engine_processes()}

    def stop(self, how: str) -> dict[str, Any]:
        """One stop path, then GPU idle time and processes left (see the module doc). The GPU is watched from
        the moment the stop starts (``ray stop`` itself can wait out its grace period on zombies)."""
        t0 = time.time()
        cmd: subprocess.Popen[str] | None = None
        if how == "sigint":
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGINT)
        elif how in ("shutdown", "ray"):
            argv = ["serve", "shutdown", "-y"] if how == "shutdown" else ["ray", "stop"]
            # Ray >= 2.59 starts a local cluster with token authentication and saves the token in
            # ~/.ray/auth_token, but its CLI sends the token only when RAY_AUTH_MODE=token is set: without it
            # `serve shutdown` prints a token error, exits 0 and stops nothing (H200 and CPU runs, 2026-12).
            env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token")}
            cmd = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        idle = wait_gpu_idle(self.args.stop_wait_s)
        gpu_idle_s = None if idle is None else round(time.time() - t0, 1)
        out = ""
        if cmd is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                out = cmd.communicate(timeout=120)[0]
        elif self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(60)
        cmd_s = round(time.time() - t0, 1)
        res = {"path": how, "command_s": cmd_s, "gpu_idle_after_s": gpu_idle_s,
               "serve_run_exited": None if self.proc is None else self.proc.poll(),
               "engine_processes_left": [p for p in engine_processes() if "EngineCor" in p["cmd"]]}
        res["ray_processes_left"] = ray_processes()
        if cmd is not None:
            res.update(rc=cmd.returncode, output_tail=out[-600:])
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        res["forced_cleanup"] = force_clean()
        self.proc = None
        return res


#: The step names ``--steps`` takes (see the module doc).
STEP_FORMS = ("start", "burst", r"questions\d", r"sustain\d(x[1-9]\d*)?", "kill", "stop-(sigint|shutdown|ray)")


def parse_steps(text: str) -> list[str]:
    """The comma-separated ``--steps`` as a list, every name checked before anything starts (a typo found after
    a 2-minute GPU start costs the start).

    Raises:
        ValueError: an empty list, or a name that matches none of :data:`STEP_FORMS` (named in the message).
    """
    steps = [s.strip() for s in text.split(",")]
    bad = [s for s in steps if not any(re.fullmatch(form, s) for form in STEP_FORMS)]
    if bad or not text.strip():
        raise ValueError(f"unknown steps {bad or [text]}: each must be start, burst, questionsN, sustainN or "
                         "sustainNxC (C windows in flight), kill, or stop-sigint|shutdown|ray")
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", nargs="*", default=[], help="key=value overrides (python -m serve_app.config override)")
    ap.add_argument("--steps", default="start,burst,burst,kill,stop-sigint",
                    help="comma-separated, in order: start, burst, questionsN, sustainN[xC], kill, stop-sigint|"
                         "shutdown|ray (checked before anything starts)")
    ap.add_argument("--windows-dir", required=True, help="folder of 10-s window files (under sources.allowed_roots)")
    ap.add_argument("--tokenizer", required=True, help="the checkpoint folder, for vllm bench serve")
    ap.add_argument("--burst", type=int, default=64, help="windows per burst, and in flight in a sustainN step")
    ap.add_argument("--sustain-s", type=float, default=60, help="seconds a sustainN step keeps sending")
    ap.add_argument("--sustain-stagger-s", type=float, default=0,
                    help="seconds over which a sustainN step spreads its first --burst sends (0: all at once)")
    ap.add_argument("--sustain-warmup-s", type=float, default=20,
                    help="seconds of a sustainN step before the windows that end are counted")
    ap.add_argument("--kill-load", type=int, default=4, help="clients asking during the kill step")
    ap.add_argument("--stacks-every-s", type=float, default=0, help="py-spy stack samples during start (0: off)")
    ap.add_argument("--start-timeout-s", type=float, default=400)
    ap.add_argument("--stop-wait-s", type=float, default=60)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        steps = parse_steps(args.steps)
    except ValueError as e:
        ap.error(str(e))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # a new folder for this run's files
    args.derived = str(Path(args.out).parent / "lifecycle_config.yaml")
    args.burst_offset = 0
    os.environ.setdefault("COSMOS_SERVE_STACKS_ON_SIGUSR1", "1" if args.stacks_every_s else "")
    subprocess.run([sys.executable, "-m", "serve_app.config", "override", args.config, *args.set, "-o", args.derived],
                   check=True)
    run = Lifecycle(args)
    try:
        for step in steps:
            t0 = time.time()
            if step == "start":
                res = run.start()
            elif step == "burst":
                res = run.burst()
            elif m := re.fullmatch(r"questions(\d)", step):
                res = run.questions(int(m.group(1)))
            elif m := re.fullmatch(r"sustain(\d)(?:x(\d+))?", step):
                res = run.sustain(int(m.group(1)), int(m.group(2)) if m.group(2) else None)
            elif step == "kill":
                res = run.kill()
            elif step.startswith("stop-"):
                res = run.stop(step.removeprefix("stop-"))
            else:
                raise SystemExit(f"unknown step {step}")
            run.result["steps"].append({"step": step, "at": time.strftime("%H:%M:%S", time.localtime(t0)),
                                        "started_s": round(t0, 3), **res})
            run.save()
            print(f"== {step}: " + json.dumps({k: v for k, v in res.items() if k not in ("requests", "before")})[:900],
                  flush=True)
    finally:
        if run.proc is not None:
            run.result["final_cleanup"] = run.stop("sigint")
            run.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
