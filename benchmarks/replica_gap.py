"""Where a window's decode time goes between vLLM's engine core and the model replica: one burst's folder, summed up.

The fourteenth lease (``results/gpu/fleet-lease14/``) read ~2 s between vLLM's engine core and the model replica
at 64 windows in flight (see below for what that was). ``benchmarks/fleet_gpu.sh burst NAME sustain1`` run after
a ``graph-start`` with ``COSMOS_SERVE_ENGINE_TIMINGS`` leaves in ``NAME/``:

- ``lifecycle.json``: the closed loop's steps (:mod:`benchmarks.lifecycle`), each with ``started_s`` (wall clock,
  epoch seconds; older results only have ``at``, the machine's local ``HH:MM:SS``), ``warmup_s``, ``measured_s``;
- ``engine_timings.jsonl.gz``: one row per request (:mod:`serve_app.model.engines.vllm_timings`), with
  ``decode_ms`` (first to last token in the engine core) and ``received_first_ms`` / ``received_last_ms`` (when the
  replica's generator got the first and the finished output);
- ``loop_lag.jsonl.gz``: the replica's event-loop lag every 5 s (:mod:`serve_app.model.loop_lag`), each row with
  ``time_s`` (epoch seconds).

``python -m benchmarks.replica_gap DIR [DIR ...]`` prints, per folder and step, the received-minus-engine decode gap
(:func:`received_gap`) beside the loop lag inside the step's counted interval (:func:`lag_in_interval`): a lag near
the gap says the replica's loop is the bottleneck; a small one points at vLLM's side (its output thread, the socket).
For a 1-question step it also splits the replica's time over the counted windows' own engine rows
(:func:`counted_split`). The seventeenth lease (``results/gpu/fleet-lease17/``) found the ~2 s an artefact of the
means: the engine's were over all the step's requests, the ramp's faster ones included, the replica's over the
counted windows; over the same windows the replica and the engine core differ by ~250 ms, and the gap is ~0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest.statistics import percentiles


def received_gap(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per request, the decode as the replica received it less the engine core's decode:
    ``received_last_ms - received_first_ms - decode_ms`` (ms; percentiles by :func:`loadtest.statistics.percentiles`,
    linear interpolation).

    Args:
        rows: engine timing rows; those lacking ``decode_ms``, ``received_first_ms`` or ``received_last_ms`` (a
            request with no output, or a result from before session 25) are left out and counted in ``skipped``.

    Returns:
        ``{"rows", "skipped", "gap_mean_ms", "gap_p50_ms", "gap_p95_ms", "received_decode_mean_ms",
        "engine_decode_mean_ms"}``; only ``rows`` (0) and ``skipped`` when no row has all three.
    """
    usable = [r for r in rows if all(isinstance(r.get(k), int | float)
                                     for k in ("decode_ms", "received_first_ms", "received_last_ms"))]
    out: dict[str, Any] = {"rows": len(usable), "skipped": len(rows) - len(usable)}
    if not usable:
        return out
    received = [r["received_last_ms"] - r["received_first_ms"] for r in usable]
    gaps = [rec - r["decode_ms"] for rec, r in zip(received, usable, strict=True)]
    pcts = percentiles(gaps, (50, 95), digits=1)
    out.update(gap_mean_ms=round(statistics.fmean(gaps), 1), gap_p50_ms=pcts["p50"], gap_p95_ms=pcts["p95"],
               received_decode_mean_ms=round(statistics.fmean(received), 1),
               engine_decode_mean_ms=round(statistics.fmean(r["decode_ms"] for r in usable), 1))
    return out


def counted_rows(rows: Sequence[dict[str, Any]], step: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The engine rows of the windows a 1-question step counted: those that ended inside its counted interval.

    The rows are in the order the requests ended, and the step's ``ended_per_10s`` counts every answered window
    that ended before the interval's end (:func:`benchmarks.window_load.sustained_figures`), so the counted windows
    are the ``counted`` rows before row ``sum(ended_per_10s)``.

    Args:
        rows: the step's engine rows, one per request, in the order they ended.
        step: a ``lifecycle.json`` step with ``questions_per_window``, ``counted`` and ``ended_per_10s``.

    Returns:
        The counted windows' rows; None for a step of several questions per window (a window's rows interleave with
        others', so its end is not one row's) or one that lacks the counts or does not fit ``rows``.
    """
    bins, counted = step.get("ended_per_10s"), step.get("counted")
    if step.get("questions_per_window", 1) != 1 or not isinstance(bins, list) or not isinstance(counted, int):
        return None
    ended = sum(bins)
    if not 0 < counted <= ended <= len(rows):
        return None
    return list(rows[ended - counted:ended])


def counted_split(rows: Sequence[dict[str, Any]], step: dict[str, Any]) -> dict[str, Any] | None:
    """The replica's mean time over a 1-question step's counted windows, split by their own engine rows (ms).

    ``replica_not_engine_core_ms`` is ``replica - frontend_ms - (engine_queue_ms + prefill_ms + decode_ms)``: the
    request's way into vLLM's engine core and its outputs' way back. ``replica_less_received_ms`` is ``replica -
    frontend_ms - received_last_ms``; the replica's time ends when its generator gets the last output, so a value
    near 0 says the rows are the counted windows' (:func:`counted_rows`).

    Returns:
        ``{"rows", "frontend_ms", "engine_queue_ms", "prefill_ms", "decode_ms", "received_last_ms",
        "replica_not_engine_core_ms", "replica_less_received_ms"}`` (the last only where the rows carry
        ``received_last_ms``); None where :func:`counted_rows` gives None or the step has no replica split.
    """
    mine = counted_rows(rows, step)
    replica = (step.get("server_split_mean_ms") or {}).get("replica")
    keys = ("frontend_ms", "engine_queue_ms", "prefill_ms", "decode_ms")
    if not mine or not isinstance(replica, int | float) or not all(k in r for r in mine for k in keys):
        return None
    means = {k: statistics.fmean(r[k] for r in mine) for k in keys}
    out: dict[str, Any] = {"rows": len(mine), **{k: round(v, 1) for k, v in means.items()}}
    out["replica_not_engine_core_ms"] = round(replica - sum(means.values()), 1)
    if all(isinstance(r.get("received_last_ms"), int | float) for r in mine):
        received = statistics.fmean(r["received_last_ms"] for r in mine)
        out["received_last_ms"] = round(received, 1)
        out["replica_less_received_ms"] = round(replica - means["frontend_ms"] - received, 1)
    return out


def step_start_s(step: dict[str, Any], day: dt.date) -> float:
    """The step's start, epoch seconds: its ``started_s``, else its ``at`` (``HH:MM:SS``) read as UTC on ``day``
    (the GPU machines run in UTC).

    Raises:
        ValueError: the step has neither, or ``at`` is not ``HH:MM:SS``.
    """
    if isinstance(step.get("started_s"), int | float):
        return float(step["started_s"])
    at = step.get("at")
    if not isinstance(at, str):
        raise ValueError(f"step {step.get('step')!r} has neither started_s nor at")
    clock = dt.datetime.strptime(at, "%H:%M:%S").time()
    return dt.datetime.combine(day, clock, tzinfo=dt.UTC).timestamp()


def lag_in_interval(lag_rows: Sequence[dict[str, Any]], step: dict[str, Any]) -> dict[str, Any]:
    """The loop-lag rows (``time_s``, ``lag_mean_ms``, ``lag_p95_ms``, ``lag_max_ms``) whose time falls inside the
    step's counted interval, ``[start + warmup_s, start + warmup_s + measured_s]`` (seconds; start by
    :func:`step_start_s`, the day taken from the last row).

    Returns:
        ``{"rows": n, "lag_mean_ms", "lag_p95_ms_max", "lag_max_ms"}`` (the mean of the rows' means, the largest
        p95 and max); ``{"rows": 0, "all_rows": n}`` when none falls inside.
    """
    if not lag_rows:
        return {"rows": 0, "all_rows": 0}
    day = dt.datetime.fromtimestamp(lag_rows[-1]["time_s"], dt.UTC).date()
    lo = step_start_s(step, day) + float(step.get("warmup_s", 0.0))
    hi = lo + float(step["measured_s"])
    inside = [r for r in lag_rows if lo <= r["time_s"] <= hi]
    if not inside:
        return {"rows": 0, "all_rows": len(lag_rows)}
    return {"rows": len(inside), "lag_mean_ms": round(statistics.fmean(r["lag_mean_ms"] for r in inside), 2),
            "lag_p95_ms_max": max(r["lag_p95_ms"] for r in inside), "lag_max_ms": max(r["lag_max_ms"] for r in inside)}


def _jsonl_gz(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def summarize(folder: Path, min_prompt_tokens: int = 1000) -> dict[str, Any]:
    """One burst folder's steps: the closed loop's rates and latency, :func:`received_gap` over the engine rows of
    the steps' questions (rows with more than ``min_prompt_tokens`` prompt tokens: the replica's warm-up prompts are
    shorter), :func:`counted_split` and :func:`lag_in_interval` per step.

    The server's timings file also holds its earlier bursts' rows, first: the last ``sum(sent x
    questions_per_window)`` rows are this folder's, split over its steps in the order the requests ended (as
    ``results/gpu/fleet-lease14/summarize.py`` does).

    Raises:
        FileNotFoundError: ``folder/lifecycle.json`` is missing.
        ValueError: the engine rows do not match the questions the steps sent.
    """
    steps = json.loads((folder / "lifecycle.json").read_text())["steps"]
    rows = [r for r in _jsonl_gz(folder / "engine_timings.jsonl.gz") if r.get("prompt_tokens", 0) > min_prompt_tokens]
    lags = _jsonl_gz(folder / "loop_lag.jsonl.gz")
    sent = [int(s.get("sent", 0)) * int(s.get("questions_per_window", 1)) for s in steps]
    if rows and len(rows) < sum(sent):
        raise ValueError(f"{folder.name}: {len(rows)} engine rows, but the steps sent {sum(sent)} questions")
    rows = rows[len(rows) - sum(sent):]  # the server's file holds its earlier bursts' rows first
    out: dict[str, Any] = {}
    at = 0
    for step, n in zip(steps, sent, strict=True):
        keep = {k: step.get(k) for k in ("concurrency", "sent", "counted", "windows_per_s", "windows_per_s_by_latency",
                                         "latency_mean_s", "latency_p95_s", "server_split_mean_ms")}
        out[step["step"]] = {**keep, "gap": received_gap(rows[at:at + n]),
                             "counted_split": counted_split(rows[at:at + n], step),
                             "loop_lag": lag_in_interval(lags, step) if "measured_s" in step else {"rows": 0},
                             "stacks": (folder / "stacks.tgz").exists()}
        at += n
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("folders", nargs="+", type=Path, help="burst folders (NAME/ of benchmarks/fleet_gpu.sh burst)")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    try:
        result = {f.name: summarize(f) for f in args.folders}
    except (FileNotFoundError, ValueError) as e:
        print(f"replica_gap: {e}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
