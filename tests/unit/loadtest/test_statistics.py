"""Load-test records, statistics and sweep decisions on synthetic timings: percentiles, freshness,
deadline misses, lag growth, verdicts, sweeps."""

import csv
import io

import pytest

from loadtest.records import RequestRecord
from loadtest.statistics import (
    Criteria,
    distribution,
    lag_growth,
    percentile,
    percentiles,
    summarize,
    timeline,
    verdict,
)
from loadtest.sweep import next_search_level, sweep_decision


def rec(cam="cam-0", end=10.0, done=None, *, deadline=10.0, sent=None, status=200, kind=None, warmup=False,
        seq=0, stopped=None, tokens=8, first=None):
    sent = end if sent is None else sent
    return RequestRecord(
        seq=seq, camera_id=cam, window_index=0, warmup=warmup, scheduled_s=end, sent_s=sent, window_end_s=end,
        deadline_s=deadline, done_s=done, stopped_s=stopped, status=status, error_kind=kind,
        completion_tokens=tokens if kind is None else None, first_token_s=first,
    )


def test_distribution_percentiles_follow_numpy_linear_interpolation():
    d = distribution(range(1, 101))
    assert d["count"] == 100 and d["mean"] == 50.5 and d["max"] == 100
    assert d["p50"] == pytest.approx(50.5)
    assert d["p90"] == pytest.approx(90.1)
    assert d["p95"] == pytest.approx(95.05)
    assert d["p99"] == pytest.approx(99.01)


def test_distribution_drops_missing_values_and_handles_empty():
    assert distribution([None, 3.0, None])["p99"] == 3.0
    empty = distribution([None])
    assert empty["count"] == 0 and empty["p95"] is None and empty["max"] is None


def test_percentiles_name_each_q_drop_missing_values_and_round_on_request():
    assert percentiles([1, 2, 3, 4], (50, 99.9)) == {"p50": 2.5, "p99.9": pytest.approx(3.997)}
    assert percentiles([0.12345, None, float("nan")], (50,), digits=3) == {"p50": 0.123}
    assert percentiles([], (50, 95)) == {"p50": None, "p95": None}


def test_one_percentile_is_the_same_value_rounded_to_3_decimals_by_default():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([0.12345, 0.12345], 95) == 0.123 and percentile([0.12345], 95, digits=None) == 0.12345
    assert percentile([1.0, 2.0, 10.0], 95) == percentiles([1.0, 2.0, 10.0], (95,), digits=3)["p95"] == 9.2
    assert percentile([], 95) is None and percentile([None], 50) is None


def test_freshness_is_answer_time_minus_window_end_and_misses_use_the_next_window():
    r = rec(end=10.0, done=12.5, sent=10.1, deadline=2.0)
    assert r.ok and r.freshness_s == pytest.approx(2.5)
    assert r.latency_ms == pytest.approx(2400.0)
    assert r.lag_ms == pytest.approx(100.0)
    assert r.missed  # answered 2.5 s after the window, the next one ended after 2 s
    assert not rec(end=10.0, done=12.5, deadline=3.0).missed


def test_unfinished_and_timeouts_have_lower_bound_freshness_other_errors_none():
    unfinished = rec(end=10.0, done=None, stopped=30.0, kind="unfinished", status=0)
    assert not unfinished.ok and unfinished.freshness_s == pytest.approx(20.0) and unfinished.missed
    timeout = rec(end=10.0, done=25.0, kind="timeout", status=0)
    assert timeout.freshness_s == pytest.approx(15.0) and timeout.missed
    http = rec(end=10.0, done=10.2, kind="http", status=503)
    assert http.freshness_s is None and http.missed and not http.ok


def test_lag_growth_is_the_slope_of_freshness_over_time():
    t = [0, 10, 20, 30, 40]
    assert lag_growth(t, [0.5 + 0.2 * x for x in t]) == pytest.approx(0.2)
    assert lag_growth(t, [1.0] * 5) == pytest.approx(0.0, abs=1e-12)
    assert lag_growth(t[:3], [1, 2, 3]) is None  # too few points
    assert lag_growth([5, 5, 5, 5], [1, 2, 3, 4]) is None  # no spread in time
    with pytest.raises(ValueError):
        lag_growth([1, 2], [1])


@pytest.mark.parametrize(
    "p95,err,growth,ok,fragment",
    [
        (9.0, 0.0, 0.0, True, None),
        (10.5, 0.0, 0.0, False, "p95 freshness 10.50 s > SLO 10 s"),
        (5.0, 0.01, 0.0, False, "error rate 1.0%"),  # the limit itself fails: "under 1%"
        (5.0, 0.0, 0.2, False, "lag growth +0.200 s/s"),
        (None, 0.0, None, False, "no answered requests"),
    ],
)
def test_verdict_names_each_failed_criterion(p95, err, growth, ok, fragment):
    passed, reasons = verdict(p95, err, growth, Criteria(slo_s=10.0))
    assert passed is ok
    if fragment:
        assert any(fragment in r for r in reasons), reasons
    else:
        assert reasons == []


def fleet():
    """cam-0 keeps up (2 s freshness); cam-1 falls behind (freshness grows 0.5 s/s); one 503; one warm-up."""
    out, seq = [], 0
    for k in range(8):
        end = 10.0 * (k + 1)
        out.append(rec("cam-0", end, end + 2.0, seq=seq, first=end + 0.5))
        seq += 1
        out.append(rec("cam-1", end, end + 1.0 + 0.5 * end, seq=seq))
        seq += 1
    out.append(rec("cam-0", 85.0, 85.1, status=503, kind="http", seq=seq))
    out.append(rec("cam-0", 1.0, 100.0, warmup=True, seq=seq + 1))
    return out


def test_summary_counts_rates_and_per_camera_verdicts():
    res = summarize(fleet(), Criteria(slo_s=10.0))
    s = res["summary"]
    assert s["requests"] == 18 and s["warmup_requests"] == 1 and s["measured"] == 17
    assert s["ok"] == 16 and s["errors"] == 1 and s["error_rate"] == pytest.approx(1 / 17)
    assert s["errors_by_status"] == {"503": 1} and s["errors_by_kind"] == {"http": 1}
    # measured span: first send (10 s) → last completion (cam-1: 80 + 1 + 40 = 121 s)
    assert s["measured_span_s"] == pytest.approx(111.0)
    assert s["qps"] == pytest.approx(16 / 111.0)
    assert s["output_tokens_per_s"] == pytest.approx(16 * 8 / 111.0)
    assert s["ttft_ms"]["count"] == 8 and s["ttft_ms"]["p50"] == pytest.approx(500.0)
    # cam-1 misses from window 2 on (freshness 1 + 0.5·20 = 11 s > 10 s); the 503 is a miss too
    assert s["deadline_misses"] == 7 + 1
    assert not s["keeps_up"]
    cams = {c["camera_id"]: c for c in res["cameras"]}
    assert cams["cam-0"]["freshness_s"]["max"] == pytest.approx(2.0)
    assert cams["cam-0"]["errors"] == 1 and not cams["cam-0"]["keeps_up"]  # 1 error in 9 requests
    assert cams["cam-1"]["lag_growth_s_per_s"] == pytest.approx(0.5)
    assert not cams["cam-1"]["keeps_up"] and any("lag growth" in r for r in cams["cam-1"]["reasons"])
    assert s["cameras_keeping_up"] == 0


def test_a_healthy_fleet_keeps_up():
    recs = [rec(f"cam-{c}", 5.0 * k + c, 5.0 * k + c + 1.5, seq=k) for c in range(3) for k in range(1, 10)]
    s = summarize(recs, Criteria(slo_s=5.0))["summary"]
    assert s["keeps_up"] and s["reasons"] == [] and s["cameras_keeping_up"] == 3
    assert s["freshness_s"]["p95"] == pytest.approx(1.5) and s["deadline_misses"] == 0


def test_cameras_sort_naturally():
    recs = [rec(f"cam-{c}", 10.0, 11.0) for c in (10, 2, 1)]
    assert [c["camera_id"] for c in summarize(recs, Criteria(5.0))["cameras"]] == ["cam-1", "cam-2", "cam-10"]


def test_timeline_bins_completions_by_time():
    recs = [rec(end=0.0, done=0.5), rec(end=0.2, done=0.9), rec(end=1.0, done=1.5, kind="http", status=500)]
    tl = timeline(recs, 1.0)
    assert tl["t_s"] == [0.0, 1.0] and tl["qps"] == [2.0, 0.0] and tl["errors"] == [0, 1]
    assert tl["latency_p50_ms"][0] == pytest.approx(600.0) and tl["latency_p50_ms"][1] is None


def test_record_round_trips_through_csv_strings():
    r = rec(end=3.0, done=4.25, first=3.5)
    r.server_ttft_ms, r.request_id, r.num_frames = 12.5, "vq-1", 40
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(r.row()))
    w.writeheader()
    w.writerow({k: "" if v is None else v for k, v in r.row().items()})
    back = RequestRecord.from_row(next(csv.DictReader(io.StringIO(buf.getvalue()))))
    assert back == r and back.freshness_s == r.freshness_s


@pytest.mark.parametrize(
    "levels,best",
    [
        ([(1, True), (2, True), (4, False), (8, True)], 2),  # a pass above a failure is noise
        ([(4, True), (1, True), (2, True)], 4),
        ([(1, False), (2, True)], None),
        ([], None),
    ],
)
def test_sweep_decision_is_the_largest_count_below_the_first_failure(levels, best):
    assert sweep_decision(levels) == best


def test_sweep_search_bisects_between_best_pass_and_first_failure():
    assert next_search_level([(1, True), (2, True), (4, True), (8, False)]) == 6
    assert next_search_level([(4, True), (6, False), (8, False)]) == 5
    assert next_search_level([(4, True), (5, False)]) is None
    assert next_search_level([(1, True), (2, True)]) is None
    assert next_search_level([(1, False)]) is None


def test_freshness_counts_a_window_once_with_its_last_answer():
    # all_questions: three requests about each window; the window is answered when the last one is.
    recs = [rec("cam-0", 10.0 * k, 10.0 * k + f, seq=3 * k + i)
            for k in range(1, 5) for i, f in enumerate((1.0, 1.2, 2.5))]
    s = summarize(recs, Criteria(slo_s=2.0))["summary"]
    assert s["measured"] == 12 and s["freshness_s"]["count"] == 4  # windows, not requests
    assert s["freshness_s"]["p50"] == pytest.approx(2.5) and s["freshness_s"]["max"] == pytest.approx(2.5)
    assert not s["keeps_up"] and any("p95 freshness 2.50" in r for r in s["reasons"])
    one = summarize([r for r in recs if r.seq % 3 == 0], Criteria(slo_s=2.0))["summary"]  # first questions only
    assert one["keeps_up"] and one["freshness_s"]["p95"] == pytest.approx(1.0)
