"""The engine-profile bench's pure parts: GPU busy time from a torch trace, the burst timeline."""

from __future__ import annotations

import gzip
import json

import pytest

from benchmarks.engine_profile import _timeline, kernel_summary, main


def _trace(tmp_path, events, gz=True):
    path = tmp_path / ("t.pt.trace.json.gz" if gz else "t.pt.trace.json")
    data = json.dumps({"traceEvents": events})
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(data)
    else:
        path.write_text(data)
    return path


@pytest.mark.parametrize("gz", [True, False])
def test_busy_time_is_the_union_of_kernel_intervals(tmp_path, gz):
    events = [
        {"cat": "kernel", "name": "gemm", "ts": 0, "dur": 100},
        {"cat": "kernel", "name": "gemm", "ts": 50, "dur": 100},  # overlaps the first: 0..150
        {"cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 300, "dur": 50},  # 300..350
        {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1000},  # host time is not GPU time
        {"cat": "kernel", "name": "attn", "ts": 900, "dur": 100},  # 900..1000
    ]
    s = kernel_summary(_trace(tmp_path, events, gz))
    assert s["window_ms"] == pytest.approx(1.0)  # 0..1000 µs
    assert s["busy_ms"] == pytest.approx(0.3)  # 150 + 50 + 100 µs
    assert s["busy_fraction"] == pytest.approx(0.3)
    assert s["kernels"][0] == {"name": "gemm", "ms": 0.2, "calls": 2}
    assert {k["name"] for k in s["kernels"]} == {"gemm", "Memcpy HtoD", "attn"}


def test_a_trace_without_kernels_says_so(tmp_path):
    assert kernel_summary(_trace(tmp_path, [{"cat": "cpu_op", "name": "x", "ts": 0, "dur": 5}])) == {"kernels": []}


def test_timeline_counts_from_the_first_arrival():
    rows = [
        {"queued": 10.0, "scheduled": 10.1, "first_token": 11.0, "last_token": 14.0},
        {"queued": 10.5, "scheduled": 12.0, "first_token": 15.0, "last_token": 16.0},
    ]
    t = _timeline(rows, prompt_tokens=1000)
    assert t["last_arrival_s"] == 0.5
    assert t["last_scheduled_s"] == 2.0
    assert t["last_first_token_s"] == 5.0
    assert t["last_token_s"] == 6.0
    assert t["prefill_tokens_per_s"] == 400.0  # 2 clips x 1000 tokens by 5 s
    assert t["decode_tail_s"] == 1.0
    assert t["prefill_s"]["mean"] == pytest.approx((0.9 + 3.0) / 2)  # scheduled -> first token


@pytest.mark.parametrize(("argv", "says"), [
    (["--profile-iters", "0"], "--profile-iters >= 1"),  # the default bursts include `profiled`
    (["--bursts", "cold", "profiled", "--profile-iters", "0"], "--profile-iters >= 1"),
    (["--inflight", "0", "--bursts", "cold"], "--inflight must be >= 1"),
])
def test_arguments_that_would_waste_a_gpu_run_are_refused_before_the_engine_starts(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert says in capsys.readouterr().err
