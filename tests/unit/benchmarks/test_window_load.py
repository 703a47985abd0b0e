"""benchmarks.window_load: the closed loop's rate is read over its measured interval only, it keeps the asked
number of windows in flight, never sends a window twice, and says when the windows ran out."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

import benchmarks.lifecycle as lc
from benchmarks import window_load as wl
from benchmarks.window_load import WindowOutcome


def test_only_windows_answered_inside_the_interval_count():
    outcomes = [
        WindowOutcome(200, 768, 0.0, 9.0),  # ended in the warm-up: not counted
        WindowOutcome(200, 768, 1.0, 12.0),
        WindowOutcome(200, 768, 2.0, 20.0),
        WindowOutcome(503, 0, 3.0, 15.0),  # refused: not counted, but in the statuses
        WindowOutcome(200, 768, 25.0, 41.0),  # ended in the drain, after sending stopped: not counted
        WindowOutcome(0, 0, 26.0, 30.0),  # no response
    ]
    res = wl.sustained_figures(outcomes, 3, warmup_s=10.0, end_s=40.0, concurrency=4, ran_out=False)
    assert res["counted"] == 2 and res["measured_s"] == 30.0
    assert res["windows_per_s"] == round(2 / 30, 3) and res["answers_per_s"] == round(6 / 30, 3)
    assert res["statuses"] == {"0": 1, "200": 4, "503": 1} and res["sent"] == 6
    assert (res["latency_p50_s"], res["latency_p95_s"]) == (14.5, 17.65)  # of 11 and 18 s, interpolated
    assert res["completion_tokens_counted"] == 2 * 768
    # answered windows by the 10-s bin they ended in, up to the end of sending (the drain's one is left out)
    assert res["ended_per_10s"] == [1, 1, 1, 0]


def test_a_lockstep_loop_reads_the_same_rate_by_latency_wherever_the_interval_cuts_its_cohorts():
    # 4 windows in flight, all sent together and answered together 10 s later, again and again (as on the H200)
    outcomes = [WindowOutcome(200, 256, 10.0 * k, 10.0 * (k + 1)) for k in range(4) for _ in range(4)]
    short = wl.sustained_figures(outcomes, 1, warmup_s=5.0, end_s=27.0, concurrency=4, ran_out=False)
    longer = wl.sustained_figures(outcomes, 1, warmup_s=5.0, end_s=32.0, concurrency=4, ran_out=False)
    assert (short["counted"], longer["counted"]) == (8, 12)
    assert (short["windows_per_s"], longer["windows_per_s"]) == (round(8 / 22, 3), round(12 / 27, 3))
    assert short["windows_per_s_by_latency"] == longer["windows_per_s_by_latency"] == 0.4  # 4 / 10 s
    assert short["latency_mean_s"] == 10.0
    assert short["ended_per_10s"] == [0, 4, 4]


def test_the_servers_split_is_averaged_over_the_counted_windows_that_carry_it():
    outcomes = [
        WindowOutcome(200, 256, 0.0, 9.0, 100.0, 1000.0, 8000.0),  # ended in the warm-up: not counted
        WindowOutcome(200, 256, 1.0, 13.0, 300.0, 2000.0, 11000.0, 10000.0),
        WindowOutcome(200, 256, 2.0, 18.0, 500.0, 4000.0, 15000.0, 12000.0),
        WindowOutcome(200, 256, 3.0, 19.0),  # counted, but the response had no timings
    ]
    res = wl.sustained_figures(outcomes, 1, warmup_s=10.0, end_s=40.0, concurrency=3, ran_out=False)
    assert res["counted"] == 3
    assert res["server_split_mean_ms"] == {"windows": 2, "decode": 400.0, "ttft": 3000.0, "replica": 11000.0,
                                           "server_total": 13000.0, "client_total": 14000.0}
    assert wl.server_split_ms(outcomes[3:]) is None
    no_replica = wl.server_split_ms([WindowOutcome(200, 256, 1.0, 13.0, 300.0, 2000.0, 11000.0)])
    assert no_replica is not None and "replica" not in no_replica and no_replica["server_total"] == 11000.0


def test_no_rate_is_read_from_a_loop_that_stopped_within_its_warm_up():
    with pytest.raises(ValueError, match="warm-up"):
        wl.sustained_figures([WindowOutcome(200, 256, 0.0, 1.0)], 1, warmup_s=5.0, end_s=3.0, concurrency=1,
                             ran_out=True)


@dataclass
class Double:
    """What the double of /v1/video/query saw: the paths asked, in order, and the most requests in flight."""

    paths: list[str] = field(default_factory=list)
    in_flight: int = 0
    most: int = 0


def _serve(monkeypatch: pytest.MonkeyPatch, delay_s: float) -> Double:
    """A double of /v1/video/query that answers every question after ``delay_s``."""
    seen = Double()

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.paths.append(body["video_path"])
        seen.in_flight += 1
        seen.most = max(seen.most, seen.in_flight)
        await asyncio.sleep(delay_s)
        seen.in_flight -= 1
        answers = [{"usage": {"completion_tokens": 256}} for _ in body["questions"]]
        timings = {"decode_ms": 120.5, "queue_ms": 1.0, "model_ms": 900.0, "ttft_ms": 300.25, "total_ms": 1500.0}
        return httpx.Response(200, json={"answers": answers, "timings": timings})

    real = httpx.AsyncClient
    monkeypatch.setattr(httpx, "AsyncClient", lambda **kw: real(transport=httpx.MockTransport(handler), **kw))
    return seen


def test_the_loop_keeps_the_concurrency_in_flight_and_sends_no_window_twice(monkeypatch, tmp_path):
    seen = _serve(monkeypatch, delay_s=0.02)
    files = [tmp_path / f"w{i:03d}.mp4" for i in range(500)]
    res = asyncio.run(wl.sustain("http://127.0.0.1:1", files, ["a", "b", "c"], concurrency=3, duration_s=0.4,
                                 warmup_s=0.1))
    paths = seen.paths
    assert seen.most == 3
    assert paths == [str(f) for f in files[: len(paths)]]  # in order, none twice
    assert res["windows_used"] == len(paths) < len(files) and not res["ran_out_of_windows"]
    assert res["counted"] > 0 and res["measured_s"] == pytest.approx(0.3)
    assert res["completion_tokens_counted"] == res["counted"] * 3 * 256
    split = res["server_split_mean_ms"]  # read from each response's timings
    assert (split["windows"], split["decode"], split["ttft"], split["server_total"]) == (res["counted"], 120.5,
                                                                                         300.2, 1500.0)
    assert split["replica"] == 901.0  # queue_ms + model_ms
    assert split["client_total"] >= 20.0  # the double waits 0.02 s before it answers


def test_a_staggered_loop_spreads_its_first_sends_and_then_keeps_the_concurrency(monkeypatch, tmp_path):
    sent_s: list[float] = []
    seen = _serve(monkeypatch, delay_s=0.3)
    real_ask = wl.ask_window

    async def timed(client, url, path, questions, t0):
        sent_s.append(time.perf_counter() - t0)
        return await real_ask(client, url, path, questions, t0)

    monkeypatch.setattr(wl, "ask_window", timed)
    files = [tmp_path / f"w{i:03d}.mp4" for i in range(100)]
    res = asyncio.run(wl.sustain("http://127.0.0.1:1", files, ["a"], concurrency=4, duration_s=0.5, warmup_s=0.0,
                                 stagger_s=0.4))
    first = sorted(sent_s)[:4]
    assert all(s >= i * 0.1 - 0.01 for i, s in enumerate(first))  # slot i waits i x 0.4 / 4 s first
    assert first[3] - first[0] >= 0.29 and first[0] < 0.1
    assert seen.most == 4 and res["stagger_s"] == 0.4
    with pytest.raises(ValueError, match="stagger_s"):
        asyncio.run(wl.sustain("http://127.0.0.1:1", files, ["a"], 1, 1.0, 0.0, stagger_s=-1.0))


def test_the_loop_says_when_the_windows_ran_out(monkeypatch, tmp_path):
    seen = _serve(monkeypatch, delay_s=0.01)
    files = [tmp_path / f"w{i}.mp4" for i in range(6)]
    res = asyncio.run(wl.sustain("http://127.0.0.1:1", files, ["a"], concurrency=2, duration_s=30.0, warmup_s=0.0))
    assert res["ran_out_of_windows"] and res["windows_used"] == 6 and len(seen.paths) == 6
    assert res["measured_s"] < 30.0


def _lifecycle(folder: Path, windows: int, burst_offset: int, sustain_s: float) -> lc.Lifecycle:
    """A lifecycle run (no server started) with ``--burst 2`` over ``windows`` new window files in ``folder``
    (plus the single queries' last ones), pointed at the double's address."""
    for i in range(lc.QUERY_WINDOWS + windows):
        (folder / f"win-{i:03d}.mp4").write_bytes(b"")
    run = object.__new__(lc.Lifecycle)
    run.args = argparse.Namespace(burst=2, windows_dir=str(folder), burst_offset=burst_offset, sustain_s=sustain_s,
                                  sustain_warmup_s=0.0, sustain_stagger_s=0.0)
    run.url = "http://127.0.0.1:1"
    return run


def test_the_sustain_step_takes_new_windows_and_leaves_the_single_queries_ones(monkeypatch, tmp_path):
    seen = _serve(monkeypatch, delay_s=0.01)
    run = _lifecycle(tmp_path, windows=10, burst_offset=4, sustain_s=30.0)
    res = run.sustain(1)
    names = [Path(p).name for p in seen.paths]
    assert names == [f"win-{i:03d}.mp4" for i in range(4, 10)]  # the 16 last are the single queries'
    assert res["ran_out_of_windows"] and res["first_window"] == "win-004.mp4"
    assert run.args.burst_offset == 10  # a later step takes windows no step used


def test_a_sustain_step_named_with_a_count_keeps_that_many_in_flight(monkeypatch, tmp_path):
    seen = _serve(monkeypatch, delay_s=0.05)
    run = _lifecycle(tmp_path, windows=60, burst_offset=0, sustain_s=0.3)
    res = run.sustain(1, 5)
    assert seen.most == 5 and res["concurrency"] == 5  # not --burst's 2
