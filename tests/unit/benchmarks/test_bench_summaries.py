"""The robustness benches' summaries of load-tester records (overload, soak, attacks) and their memory samples."""


from benchmarks import overload, soak
from benchmarks.attacks import latency_summary
from benchmarks.memory import RssSample, RssSampler
from loadtest.records import RequestRecord


def rec(sent, done, status=200, kind=None, retry_after=None, cam="cam-0", etype=None):
    return RequestRecord(seq=0, camera_id=cam, window_index=0, warmup=False, scheduled_s=sent, sent_s=sent,
                         window_end_s=sent, deadline_s=10.0, done_s=done, status=status, error_kind=kind,
                         error_type=etype, retry_after_s=retry_after)


def test_overload_summary_splits_accepted_and_rejected_latency_and_counts_missing_retry_after():
    records = [rec(0, 2.0), rec(0, 4.0), rec(1, 1.05, 503, "http", 1.0), rec(1, 1.25, 503, "http", None),
               rec(2, 62.0, 0, "timeout")]
    s = overload.summarize(records)
    assert s["requests"] == 5 and s["by_status"] == {"200": 2, "503": 2, "0": 1}
    assert s["accepted_latency_s"] == {"p50": 3.0, "p95": 3.9, "p99": 3.98, "max": 4.0}
    assert s["rejected_latency_s"]["p50"] == 0.15 and s["rejected_latency_s"]["max"] == 0.25
    assert s["rejected_without_retry_after"] == 1
    assert overload.summarize([])["accepted_latency_s"] == {"p50": None, "p95": None, "p99": None, "max": None}


def test_overload_memory_summary_by_phase_and_halves():
    sampler = RssSampler()
    mb = 2**20
    sampler.samples = [RssSample(t, rss * mb, private * mb, 5, 1.0, phase) for t, rss, private, phase in (
        (0, 100, 50, "idle"), (1, 200, 80, "capacity"), (2, 210, 81, "overload"), (3, 220, 90, "overload"))]
    m = overload.memory_summary(sampler, [])
    assert m["by_phase"]["capacity"]["max_mb"] == 200.0 and m["by_phase"]["after"] is None
    assert m["overload_growth_over_capacity_peak_pct"] == 10.0
    assert (m["overload_first_half_max_mb"], m["overload_second_half_max_mb"]) == (210.0, 220.0)
    assert m["samples"][0] == {"t_s": 0, "rss_mb": 100.0, "private_mb": 50.0, "processes": 5, "phase": "idle",
                               "loadavg_1m": 1.0}


def test_soak_minutes_bin_requests_by_completion_and_samples_by_time():
    outcomes = [soak.outcome(r) for r in (rec(1, 3.0), rec(50, 61.0), rec(70, 71.5, 503, "http", etype="overloaded"))]
    assert outcomes[2]["error"] == "overloaded" and outcomes[0]["error"] is None and outcomes[1]["latency_s"] == 11.0
    mb = 2**20
    rss = [RssSample(10, 100 * mb, 10 * mb, 5, 0.5, "soak"), RssSample(70, 300 * mb, 30 * mb, 5, 0.5, "soak")]
    rows = soak.minute_stats(outcomes, rss, 120)
    assert [r["requests"] for r in rows] == [1, 2] and [r["errors"] for r in rows] == [0, 1]
    assert rows[0]["latency_p50_s"] == 2.0 and rows[1]["latency_p50_s"] == 11.0
    assert (rows[0]["rss_mean_mb"], rows[1]["private_mean_mb"]) == (100.0, 30.0)
    assert soak.verdict(rows, 0, outcomes)["goal_met"] is None  # two minutes: too short to judge


def test_the_attack_bench_latency_summary_interpolates_p50_p99_and_counts():
    assert latency_summary([0.1, 0.2, 0.3, 1.0]) == {"p50": 0.25, "p99": 0.979, "max": 1.0, "n": 4}
    assert latency_summary([]) == {"p50": None, "p99": None, "max": None, "n": 0}
