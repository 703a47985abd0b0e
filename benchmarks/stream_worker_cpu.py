"""Bench: the stream worker's CPU per camera, and how fast its streams API answers, as cameras grow.

The stream worker is one Serve replica that owns every live camera (``serve_app/deployments/stream_worker.py``):
it reads and decodes each camera, keeps the frames on the 4-fps grid at the model's size, measures quiet
scenes and hands windows to the model. With quiet-scene skipping on, the GPU answers few windows and this
process, not the GPU, decides how many cameras one service takes (issue 27). Against a running service
(``serve run`` of any config whose ``sources.allowed_roots`` holds ``--file``), per level of ``--cameras``:
``python -m loadtest --streams`` registers the cameras (staggered over the forced-answer period) and reads the
answers; meanwhile this samples the StreamWorker process's CPU time from ``/proc`` (Linux) and, at the end,
times ``GET /v1/streams`` every 2 s (the streams API that the same process answers).

    serve run configs/cpu.yaml   # then, with sources.allowed_roots holding the clip's folder (e.g. .gpu-clips,
    #                              written by python -m benchmarks.quiet_scenes --write-clip):
    python -m benchmarks.stream_worker_cpu --cameras 2,4,8 --file generated_quiet_room.mp4 \\
        --skip-unchanged 0.01 --out results/cpu/quiet_scenes/stream_worker_cpu.json

Result per level: cameras, stream-worker cores used (mean over the measured time, user + system), cores per
camera, the stream list's p50/p95 (ms), and the load tester's verdict (answers, p95 freshness, windows skipped).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any, Self

import httpx

from benchmarks.result import command, machine, write_result
from loadtest.statistics import percentile

#: Clock ticks per second of /proc/<pid>/stat's utime and stime (proc(5)).
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def find_pids(name: str = "StreamWorker") -> list[int]:
    """Process ids whose command line names ``name`` (the replica's Ray process title holds the deployment)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if name.encode() in cmdline and b"ServeReplica" in cmdline:
                pids.append(int(entry.name))
    return pids


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (all its threads) so far, from ``/proc/<pid>/stat``.

    Raises:
        OSError: the process is gone.
    """
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime (fields 14, 15 of proc(5))


class _Periodic:
    """Calls ``self._tick()`` every ``every_s`` seconds in a thread, from :meth:`start` until :meth:`stop`."""

    def __init__(self, every_s: float):
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tick(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self._tick()
            self._stop.wait(self.every_s)

    def start(self) -> Self:
        """Starts the thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the thread and waits for it."""
        self._stop.set()
        self._thread.join()


class CpuSampler(_Periodic):
    """Samples the CPU seconds of ``pids`` (summed, and each: one process per stream worker with
    ``streams.workers``) every ``every_s`` seconds."""

    def __init__(self, pids: list[int], every_s: float = 1.0):
        super().__init__(every_s)
        self.pids = pids
        self.samples: list[tuple[float, float]] = []  # (wall time s, cpu s of all)
        self.each: dict[int, list[tuple[float, float]]] = {pid: [] for pid in pids}  # pid → (wall s, cpu s)

    def _tick(self) -> None:
        total, now = 0.0, time.time()
        for pid in self.pids:
            with contextlib.suppress(OSError):  # a replica that ended counts no more
                used = cpu_s(pid)
                total += used
                self.each[pid].append((now, used))
        self.samples.append((now, total))

    def stop(self) -> None:
        """Stops sampling (one last sample)."""
        super().stop()
        self._tick()

    def cores_between(self, t0: float, t1: float, pid: int | None = None) -> float | None:
        """Mean cores used between wall times ``t0`` and ``t1`` (s), by all the processes or by ``pid``;
        None without two samples in that span."""
        inside = [(t, c) for t, c in (self.samples if pid is None else self.each.get(pid, [])) if t0 <= t <= t1]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


class ApiProbe(_Periodic):
    """Times ``GET /v1/streams`` (the stream worker lists its streams) every ``every_s`` seconds."""

    def __init__(self, target: str, every_s: float = 2.0, transport: httpx.BaseTransport | None = None):
        super().__init__(every_s)
        self.client = httpx.Client(base_url=target, timeout=30, transport=transport)
        self.samples: list[tuple[float, float]] = []  # (wall time s, ms; inf for an error or a timeout)

    def _tick(self) -> None:
        t0 = time.perf_counter()
        try:
            ok = self.client.get("/v1/streams").status_code == 200
        except httpx.HTTPError:
            ok = False
        self.samples.append((time.time(), (time.perf_counter() - t0) * 1000 if ok else float("inf")))

    def stop(self) -> None:
        """Stops probing and closes the connection."""
        super().stop()
        self.client.close()

    def ms_between(self, t0: float, t1: float) -> list[float]:
        """The probe times (ms) taken between wall times ``t0`` and ``t1``."""
        return [ms for t, ms in self.samples if t0 <= t <= t1]


def main(argv: list[str] | None = None) -> int:
    from loadtest import streams

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="http://127.0.0.1:8000")
    p.add_argument("--cameras", default="2,4,8", help="camera counts, e.g. 2,4,8")
    p.add_argument("--file", action="append", required=True,
                   help="clip name under the server's allowed roots (looped); repeat for one per camera "
                   "(cameras take them in turn: python -m loadtest.distinct makes such copies)")
    p.add_argument("--window-s", type=float, default=10.0)
    p.add_argument("--fps", type=float, default=4.0)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--ignore-eos", action="store_true", help="answers run to --max-tokens (server must allow it)")
    p.add_argument("--skip-unchanged", type=float, default=None)
    p.add_argument("--max-skip-s", type=float, default=60.0)
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--slo-s", type=float, default=3.0)
    p.add_argument("--out", default="results/cpu/quiet_scenes/stream_worker_cpu.json")
    p.add_argument("--runs-dir", default="runs/stream_worker_cpu",
                   help="each level's load-tester folder goes to RUNS_DIR/cameras-NNN (answers.csv per answer)")
    args = p.parse_args(argv)
    pids = find_pids()
    if not pids:
        raise SystemExit("no StreamWorker replica process on this machine: start the service first")
    levels: list[dict[str, Any]] = []
    for n in [int(x) for x in args.cameras.split(",")]:
        files = [x for f in args.file for x in ("--file", f)]
        lt = ["--target", args.target, "--cameras", str(n), *files, "--window-s", str(args.window_s),
              "--fps", str(args.fps), "--max-tokens", str(args.max_tokens), "--duration-s", str(args.duration_s),
              "--slo-s", str(args.slo_s)]
        if args.ignore_eos:
            lt.append("--ignore-eos")
        if args.skip_unchanged is not None:
            lt += ["--skip-unchanged", str(args.skip_unchanged), "--max-skip-s", str(args.max_skip_s)]
        ap = argparse.ArgumentParser()
        streams.add_arguments(ap)
        a = ap.parse_args(lt)
        sampler, probe = CpuSampler(pids).start(), ApiProbe(args.target).start()
        t_registered = time.time() + streams.stagger_period_s(a)  # registrations end about then
        try:
            doc = streams.run_level(a, n, Path(args.runs_dir) / f"cameras-{n:03d}", lt)
        finally:
            sampler.stop()
            probe.stop()
        t_end = t_registered + args.duration_s
        reads = probe.ms_between(t_registered, t_end)
        answered = [ms for ms in reads if ms != float("inf")]
        cores = sampler.cores_between(t_registered, t_end)
        level = {
            "cameras": n,
            "stream_worker_cores": round(cores, 3) if cores is not None else None,
            "cores_per_camera": round(cores / n, 4) if cores is not None else None,
            # one process per stream worker (streams.workers): the one that falls behind is the busiest
            "stream_worker_cores_each": {str(pid): round(c, 3) if (c := sampler.cores_between(t_registered, t_end, pid))
                                         is not None else None for pid in pids},
            # over the lists that answered; the failed ones (an error or a 30-s timeout) are counted apart
            "list_streams_ms_p50": percentile(answered, 50, 1),
            "list_streams_ms_p95": percentile(answered, 95, 1),
            "list_streams_failed": len(reads) - len(answered),
            "keeps_up": doc["summary"]["keeps_up"],
            "reasons": doc["summary"]["reasons"],
            "answers": doc["total"]["answers"],
            "freshness_s_p50": doc["total"].get("freshness_s_p50"),
            "freshness_s_p95": doc["total"]["freshness_s_p95"],
            "windows_cut": doc["total"]["windows_cut"],
            "windows_skipped": doc["total"]["windows_skipped"],
        }
        levels.append(level)
        print(level)
    result = {"bench": "stream_worker_cpu", "command": command("benchmarks.stream_worker_cpu", argv),
              "machine": machine(), "stream_worker_pids": pids, "settings": vars(args), "levels": levels}
    print(f"wrote {write_result(args.out, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
