"""The model replica's event-loop lag (serve_app.model.loop_lag): the summary, the sampler, the file rows, and
the replica starting it only when ``COSMOS_SERVE_LOOP_LAG`` names a file."""

from __future__ import annotations

import asyncio
import functools
import json
import os
from pathlib import Path

import pytest

from serve_app.model import loop_lag
from serve_app.model.loop_lag import LOOP_LAG_ENV, append_to, lag_summary, watch_loop_lag


def test_the_summary_gives_count_mean_percentiles_and_max():
    s = lag_summary([float(v) for v in range(1, 101)])  # 1..100 ms
    assert s == {"samples": 100, "lag_mean_ms": 50.5, "lag_p50_ms": 50.0, "lag_p95_ms": 95.0, "lag_max_ms": 100.0}
    assert lag_summary([7.0])["lag_p95_ms"] == 7.0


def test_no_samples_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="no loop-lag samples"):
        lag_summary([])


def test_the_sampler_reports_each_periods_lag_and_forgets_it():
    """A fake clock: sleeps of 10 ms that take 10 ms, except the 2nd and 3rd (60 ms: 50 ms late)."""
    now = [0.0]
    late = {2: 0.05, 3: 0.05}
    calls = [0]

    async def sleep(s: float) -> None:
        calls[0] += 1
        now[0] += s + late.get(calls[0], 0.0)
        if calls[0] >= 40:
            raise asyncio.CancelledError

    rows: list[dict[str, float]] = []
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(watch_loop_lag(rows.append, interval_s=0.01, report_s=0.1, clock=lambda: now[0], sleep=sleep))
    assert rows, "no row in 40 samples of a 0.1-s period"
    first = rows[0]
    assert first["samples"] == 3  # 0.01 + 0.06 + 0.06 s: the period ends after the third sample
    assert first["lag_max_ms"] == pytest.approx(50.0) and first["lag_p50_ms"] == pytest.approx(50.0)
    assert all(r["lag_max_ms"] == pytest.approx(0.0, abs=1e-6) for r in rows[1:])  # the late sleeps: period 1 only
    assert sum(r["samples"] for r in rows) <= 40 and "time_s" in first


def test_rows_are_appended_as_json_lines_with_the_process_id(tmp_path: Path):
    path = tmp_path / "lag.jsonl"
    write = append_to(str(path))
    write({"samples": 3, "lag_max_ms": 1.5})
    write({"samples": 2, "lag_max_ms": 0.5})
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["lag_max_ms"] for r in rows] == [1.5, 0.5] and {r["pid"] for r in rows} == {os.getpid()}


def test_an_unwritable_file_is_logged_and_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    append_to(str(tmp_path / "no-such-dir" / "lag.jsonl"))({"samples": 1})
    assert "could not append the loop lag" in caplog.text


def _replica_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: bool) -> list[dict[str, float]]:
    """Starts the model replica's class (no Ray; the scripted engine), lets its loop run 0.3 s, stops it."""
    from serve_app.deployments import model as model_deployment

    path = tmp_path / "lag.jsonl"
    if env:
        monkeypatch.setenv(LOOP_LAG_ENV, str(path))
    else:
        monkeypatch.delenv(LOOP_LAG_ENV, raising=False)
    monkeypatch.setattr(model_deployment, "watch_loop_lag", functools.partial(loop_lag.watch_loop_lag, report_s=0.05))
    cls = model_deployment.VideoModel.func_or_class
    config = {"model": {"backend": "serve_app.testing.engines:scripted_engine", "warmup": False}}

    async def run() -> None:
        replica = cls.__new__(cls)
        await replica.__init__(config)
        await asyncio.sleep(0.3)
        done = replica.__del__()
        if done is not None:
            await done

    asyncio.run(run())
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_replica_writes_its_loop_lag_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    rows = _replica_rows(tmp_path, monkeypatch, env=True)
    assert len(rows) >= 2 and all(r["samples"] > 0 and r["lag_max_ms"] >= 0 for r in rows)
    assert _replica_rows(tmp_path / "off", monkeypatch, env=False) == []
