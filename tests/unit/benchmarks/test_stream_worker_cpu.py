"""benchmarks.stream_worker_cpu: CPU time read from /proc and turned into cores used over a span."""

from __future__ import annotations

import json
import os
import sys
import time

import httpx
import pytest

from benchmarks import stream_worker_cpu as bench

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_cpu_seconds_of_a_process_grow_with_its_work():
    before = bench.cpu_s(os.getpid())
    t_end = time.process_time() + 0.3
    while time.process_time() < t_end:  # 0.3 s of this process's CPU
        pass
    assert bench.cpu_s(os.getpid()) - before >= 0.2  # /proc counts in clock ticks (10 ms)


def test_a_gone_process_raises_and_the_sampler_counts_it_as_nothing():
    with pytest.raises(OSError):
        bench.cpu_s(2**22 + 12345)  # above the kernel's pid_max limit: never a process
    sampler = bench.CpuSampler([2**22 + 12345])
    sampler._tick()
    assert sampler.samples[-1][1] == 0.0


def test_cores_between_is_cpu_seconds_over_wall_seconds_inside_the_span():
    sampler = bench.CpuSampler([])
    sampler.samples = [(100.0, 5.0), (101.0, 5.5), (103.0, 6.5), (110.0, 20.0)]
    assert sampler.cores_between(100.0, 103.0) == pytest.approx(0.5)  # 1.5 CPU s in 3 s
    assert sampler.cores_between(101.0, 101.5) is None  # one sample: no rate
    assert bench.find_pids("no-such-deployment-name-here") == []


def test_cores_are_also_read_per_process_for_several_stream_workers():
    me = os.getpid()
    sampler = bench.CpuSampler([me, 2**22 + 12345])  # this process, and one that is gone
    sampler._tick()
    t_end = time.process_time() + 0.3
    while time.process_time() < t_end:  # 0.3 s of this process's CPU
        pass
    sampler._tick()
    t0, t1 = sampler.samples[0][0], sampler.samples[-1][0]
    mine = sampler.cores_between(t0, t1, me)
    assert mine is not None and mine > 0 and mine == pytest.approx(sampler.cores_between(t0, t1))
    assert sampler.cores_between(t0, t1, 2**22 + 12345) is None  # no sample of a gone process


def test_the_api_probe_times_each_list_and_marks_a_failed_one_infinite():
    answers = iter([httpx.Response(200, json={"data": []}), httpx.Response(503), httpx.Response(200, json={})])

    def reply(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/streams"
        return next(answers)

    probe = bench.ApiProbe("http://service", every_s=60, transport=httpx.MockTransport(reply))
    for _ in range(3):
        probe._tick()
    probe.client.close()
    ms = [m for _, m in probe.samples]
    assert ms[1] == float("inf") and all(0 <= m < 5_000 for m in (ms[0], ms[2]))
    t0 = probe.samples[0][0]
    assert len(probe.ms_between(t0, t0 + 60)) == 3 and probe.ms_between(t0 - 10, t0 - 1) == []


def test_main_writes_each_level_into_the_runs_dir_and_reports_its_figures(tmp_path, monkeypatch):
    seen: list[tuple[int, object]] = []

    def run_level(a, n, out_dir, argv):  # the load tester's level, without a service
        seen.append((n, out_dir))
        return {"summary": {"keeps_up": False, "reasons": ["p95 freshness 4.2 s > SLO 3 s"]},
                "total": {"answers": 7, "freshness_s_p50": 2.8, "freshness_s_p95": 4.2, "windows_cut": 20,
                          "windows_skipped": 13}}

    monkeypatch.setattr(bench, "find_pids", lambda name="StreamWorker": [os.getpid()])
    from loadtest import streams

    monkeypatch.setattr(streams, "run_level", run_level)
    monkeypatch.setattr(streams, "stagger_period_s", lambda a: -1.0)  # the span opens 1 s before now
    start = bench.ApiProbe.start

    def start_with_one_list(self):  # one list timed before the thread runs, so the span holds one
        self._tick()
        return start(self)

    monkeypatch.setattr(bench.ApiProbe, "start", start_with_one_list)
    out = tmp_path / "r.json"
    assert bench.main(["--target", "http://127.0.0.1:9", "--cameras", "3", "--file", "a.mp4", "--duration-s", "5",
                       "--out", str(out), "--runs-dir", str(tmp_path / "runs")]) == 0
    assert seen == [(3, tmp_path / "runs" / "cameras-003")]
    (level,) = json.loads(out.read_text())["levels"]
    assert level["freshness_s_p50"] == 2.8 and level["freshness_s_p95"] == 4.2 and level["windows_skipped"] == 13
    assert level["keeps_up"] is False and level["reasons"] == ["p95 freshness 4.2 s > SLO 3 s"]
    # nothing listens on port 9: every list failed, so no latency figure (not NaN or Infinity in the JSON)
    assert level["list_streams_ms_p95"] is None and level["list_streams_failed"] >= 1
