"""benchmarks/replica_gap.py: the received-minus-engine decode gap and the loop lag of one burst's folder."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import replica_gap

T0 = 1_765_000_000.0  # a step's wall-clock start, epoch seconds


def _row(decode_ms: float, first_ms: float | None, last_ms: float | None, prompt: int = 8150) -> dict[str, Any]:
    row: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": 256, "decode_ms": decode_ms}
    if first_ms is not None:
        row["received_first_ms"] = first_ms
    if last_ms is not None:
        row["received_last_ms"] = last_ms
    return row


def _gz(path: Path, rows: list[dict[str, Any]]) -> None:
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def _step(name: str, sent: int, questions: int = 1, **extra: Any) -> dict[str, Any]:
    return {"step": name, "sent": sent, "questions_per_window": questions, "started_s": T0, "warmup_s": 45.0,
            "measured_s": 65.0, "windows_per_s": 2.9, **extra}


def test_the_gap_is_received_decode_less_engine_decode_per_request() -> None:
    rows = [_row(18_000, 2_000, 22_000), _row(18_500, 2_100, 22_100), _row(17_000, None, None)]
    gap = replica_gap.received_gap(rows)
    assert gap["rows"] == 2 and gap["skipped"] == 1
    assert gap["gap_mean_ms"] == pytest.approx((2_000 + 1_500) / 2)
    assert gap["received_decode_mean_ms"] == pytest.approx(20_000)
    assert gap["engine_decode_mean_ms"] == pytest.approx(18_250)
    assert gap["gap_p50_ms"] == pytest.approx(1_750) and gap["gap_p95_ms"] == pytest.approx(1_975)  # interpolated


def test_rows_without_the_received_stamps_give_no_gap() -> None:
    assert replica_gap.received_gap([_row(18_000, None, None)]) == {"rows": 0, "skipped": 1}


def test_only_loop_lag_rows_inside_the_counted_interval_count() -> None:
    rows = [{"time_s": T0 + t, "lag_mean_ms": lag, "lag_p95_ms": lag * 2, "lag_max_ms": lag * 3}
            for t, lag in ((10, 500.0), (50, 4.0), (100, 6.0), (115, 900.0))]
    lag = replica_gap.lag_in_interval(rows, _step("sustain1", 300))
    assert lag == {"rows": 2, "lag_mean_ms": 5.0, "lag_p95_ms_max": 12.0, "lag_max_ms": 18.0}


def test_an_older_step_is_placed_by_its_clock_time_read_as_utc() -> None:
    clock = dt.datetime.fromtimestamp(T0, dt.UTC)
    step = {"step": "sustain1", "at": clock.strftime("%H:%M:%S"), "warmup_s": 0.0, "measured_s": 10.0}
    rows = [{"time_s": T0 + 5, "lag_mean_ms": 3.0, "lag_p95_ms": 4.0, "lag_max_ms": 5.0},
            {"time_s": T0 + 20, "lag_mean_ms": 30.0, "lag_p95_ms": 40.0, "lag_max_ms": 50.0}]
    assert replica_gap.lag_in_interval(rows, step)["rows"] == 1
    with pytest.raises(ValueError, match="neither started_s nor at"):
        replica_gap.step_start_s({"step": "x"}, clock.date())


def test_a_folder_takes_the_last_rows_and_splits_them_over_its_steps(tmp_path: Path) -> None:
    earlier = [_row(1.0, 0.0, 1.0) for _ in range(4)]  # an earlier burst on the same server
    warmup = [_row(50.0, 0.0, 50.0, prompt=53)]  # the replica's warm-up prompt: not a window
    step1 = [_row(18_000, 0.0, 19_000) for _ in range(2)]
    step3 = [_row(18_000, 0.0, 21_000) for _ in range(3)]
    _gz(tmp_path / "engine_timings.jsonl.gz", earlier + warmup + step1 + step3)
    (tmp_path / "lifecycle.json").write_text(json.dumps({"steps": [_step("sustain1", 2), _step("sustain3", 1, 3)]}))
    out = replica_gap.summarize(tmp_path)
    assert out["sustain1"]["gap"]["gap_mean_ms"] == 1_000 and out["sustain1"]["gap"]["rows"] == 2
    assert out["sustain3"]["gap"]["gap_mean_ms"] == 3_000 and out["sustain3"]["gap"]["rows"] == 3
    assert out["sustain1"]["loop_lag"] == {"rows": 0, "all_rows": 0} and out["sustain1"]["stacks"] is False


def _timed(decode_ms: float, received_last_ms: float) -> dict[str, Any]:
    return {**_row(decode_ms, 1_000.0, received_last_ms), "frontend_ms": 200.0, "engine_queue_ms": 100.0,
            "prefill_ms": 900.0}


def test_the_split_takes_the_counted_windows_rows_not_the_ramps() -> None:
    # 2 windows ended in the warm-up (the ramp: short decodes), 2 were counted, 1 ended after the interval
    rows = [_timed(5_000, 6_100), _timed(10_000, 11_100), _timed(20_000, 21_300), _timed(20_400, 21_700),
            _timed(20_000, 21_100)]
    step = _step("sustain1", 5, counted=2, ended_per_10s=[1, 1, 0, 0, 2],
                 server_split_mean_ms={"replica": 200.0 + 21_500.0})
    assert replica_gap.counted_rows(rows, step) == rows[2:4]
    split = replica_gap.counted_split(rows, step)
    assert split is not None and split["rows"] == 2 and split["decode_ms"] == 20_200
    # replica 21,700 less frontend 200, queue 100, prefill 900 and decode 20,200
    assert split["replica_not_engine_core_ms"] == 300
    assert split["received_last_ms"] == 21_500 and split["replica_less_received_ms"] == 0


def test_no_split_where_the_rows_cannot_be_the_counted_windows() -> None:
    rows = [_timed(20_000, 21_300) for _ in range(3)]
    split: dict[str, Any] = {"server_split_mean_ms": {"replica": 21_500.0}}
    # several questions per window: a window's end is not one row's
    assert replica_gap.counted_rows(rows, _step("sustain3", 1, 3, counted=1, ended_per_10s=[1], **split)) is None
    # more windows ended than there are rows; or no counts at all (an older lifecycle.json)
    assert replica_gap.counted_rows(rows, _step("sustain1", 3, counted=2, ended_per_10s=[2, 2], **split)) is None
    assert replica_gap.counted_split(rows, _step("sustain1", 3, **split)) is None
    # the counted windows' rows, but no replica split to divide
    assert replica_gap.counted_split(rows, _step("sustain1", 3, counted=2, ended_per_10s=[3])) is None


def test_too_few_engine_rows_are_refused_with_what_was_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _gz(tmp_path / "engine_timings.jsonl.gz", [_row(18_000, 0.0, 19_000)])
    (tmp_path / "lifecycle.json").write_text(json.dumps({"steps": [_step("sustain1", 2)]}))
    assert replica_gap.main([str(tmp_path)]) == 2
    assert "1 engine rows, but the steps sent 2 questions" in capsys.readouterr().err
    assert replica_gap.main([str(tmp_path / "missing")]) == 2


def test_the_cli_writes_what_it_prints(tmp_path: Path) -> None:
    run = tmp_path / "a"
    run.mkdir()
    _gz(run / "engine_timings.jsonl.gz", [_row(18_000, 0.0, 20_000)])
    (run / "lifecycle.json").write_text(json.dumps({"steps": [_step("sustain1", 1)]}))
    assert replica_gap.main([str(run), "--out", str(tmp_path / "gap.json")]) == 0
    assert json.loads((tmp_path / "gap.json").read_text())["a"]["sustain1"]["gap"]["gap_mean_ms"] == 2_000
