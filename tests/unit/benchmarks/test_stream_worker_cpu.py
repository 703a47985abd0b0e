"""benchmarks.stream_worker_cpu: CPU time read from /proc and turned into cores used over a span."""

from __future__ import annotations

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
