"""Run output: ``results.json``, ``requests.csv``, the rich live view and summary tables.

``results.json`` holds the settings, how the windows were cut, the summary and
per-camera metrics; ``requests.csv`` next to it holds every request (one row
each, the columns of :meth:`loadtest.records.RequestRecord.row`), from which
the summary can be recomputed. ``python -m loadtest
--report results.json`` re-renders tables and plots from a saved run or sweep.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table

from loadtest.records import RequestRecord
from loadtest.statistics import Criteria, distribution, summarize

if TYPE_CHECKING:
    from loadtest.runner import Runner
    from loadtest.settings import RunSettings

logger = logging.getLogger(__name__)

RESULTS_JSON = "results.json"
REQUESTS_CSV = "requests.csv"
SCHEMA_VERSION = 1


def now_iso() -> str:
    """The current UTC time, ISO 8601, seconds precision."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def criteria_of(settings: RunSettings) -> Criteria:
    """The keeps-up criteria of a :class:`loadtest.settings.RunSettings`."""
    return Criteria(settings.effective_slo_s, settings.max_error_rate, settings.max_lag_growth)


def build_results(
    settings: RunSettings, records: Sequence[RequestRecord], *, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``results.json`` document of one run."""
    doc: dict[str, Any] = {
        "kind": "run",
        "schema_version": SCHEMA_VERSION,
        "created_at": now_iso(),
        "target": settings.target,
        "settings": settings.model_dump(mode="json"),
        **(extra or {}),
    }
    doc.update(summarize(records, criteria_of(settings)))
    doc["requests_csv"] = REQUESTS_CSV
    return doc


def write_csv(records: Sequence[RequestRecord], path: Path) -> None:
    """One row per request (stored fields, then derived ones); empty cell = None."""
    rows = [r.row() for r in records]
    fields = list(rows[0]) if rows else [*RequestRecord.__dataclass_fields__, *RequestRecord.DERIVED]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})


def read_csv(path: Path) -> list[RequestRecord]:
    """Records from a ``requests.csv``."""
    with open(path, newline="") as f:
        return [RequestRecord.from_row(row) for row in csv.DictReader(f)]


def write_run(out_dir: Path, doc: dict[str, Any], records: Sequence[RequestRecord]) -> Path:
    """Writes ``results.json`` and ``requests.csv`` into ``out_dir``; returns the JSON path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(records, out_dir / REQUESTS_CSV)
    path = out_dir / RESULTS_JSON
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return path


def load_results(path: Path) -> dict[str, Any]:
    """A saved ``results.json`` (run or sweep)."""
    doc: dict[str, Any] = json.loads(Path(path).read_text())
    return doc


def records_of(doc: dict[str, Any], results_path: Path) -> list[RequestRecord]:
    """The request records of a saved run (its ``requests.csv``, next to ``results.json``).

    Raises:
        FileNotFoundError: the CSV is missing.
    """
    return read_csv(Path(results_path).parent / doc.get("requests_csv", REQUESTS_CSV))


# ---------------------------------------------------------------- rendering


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


DIST_ROWS = (
    ("latency_ms", "latency (ms)", 0),
    ("ttft_ms", "TTFT, client (ms)", 0),
    ("freshness_s", "freshness (s)", 2),
    ("scheduling_lag_ms", "scheduling lag (ms)", 2),
    ("server_decode_ms", "server decode (ms)", 0),
    ("server_queue_ms", "server queue (ms)", 0),
    ("server_model_ms", "server model (ms)", 0),
    ("server_ttft_ms", "server TTFT (ms)", 0),
    ("prompt_tokens", "prompt tokens", 0),
    ("completion_tokens", "completion tokens", 0),
)


def summary_table(summary: dict[str, Any]) -> Table:
    """Distributions (count, mean, p50/p90/p95/p99, max) of a run's summary."""
    t = Table(title="distributions (measured requests)", title_justify="left")
    t.add_column("metric")
    for col in ("n", "mean", "p50", "p90", "p95", "p99", "max"):
        t.add_column(col, justify="right")
    for key, label, digits in DIST_ROWS:
        d = summary.get(key) or {}
        if not d.get("count"):
            continue
        t.add_row(label, str(d["count"]), *(_fmt(d[k], digits) for k in ("mean", "p50", "p90", "p95", "p99", "max")))
    return t


def headline(summary: dict[str, Any]) -> str:
    """Counts, throughput, errors and the verdict as text."""
    s = summary
    errs = ", ".join(f"{k}: {v}" for k, v in s["errors_by_type"].items()) or "none"
    growth = s["lag_growth_s_per_s"]
    c = s["criteria"]
    verdict = "[bold green]KEEPS UP[/]"
    if not s["keeps_up"]:
        verdict = "[bold red]FALLS BEHIND[/] (" + "; ".join(s["reasons"]) + ")"
    return (
        f"requests {s['requests']} (warm-up {s['warmup_requests']}), ok {s['ok']}, errors {s['errors']} "
        f"({s['error_rate']:.2%}; {errs})\n"
        f"QPS {s['qps']:.2f}/s, output {s['output_tokens_per_s']:.1f} tokens/s over {s['measured_span_s']:.1f} s; "
        f"deadline misses {s['deadline_misses']} ({s['deadline_miss_rate']:.1%}); "
        f"lag growth {_fmt(growth, 3)} s/s\n"
        f"cameras keeping up {s['cameras_keeping_up']}/{s['cameras']}; criteria: p95 freshness ≤ {c['slo_s']:g} s, "
        f"errors < {c['max_error_rate']:.0%}, lag growth ≤ {c['max_lag_growth']:g} s/s\n"
        f"verdict: {verdict}"
    )


def camera_table(cameras: list[dict[str, Any]], limit: int = 24) -> Table:
    """Per-camera freshness, misses, lag growth and verdict (failing cameras first when cut)."""
    rows = cameras
    if len(cameras) > limit:  # show the worst
        rows = sorted(cameras, key=lambda c: (c["keeps_up"], -(c["freshness_s"]["p95"] or 0)))
    t = Table(title=f"cameras ({len(cameras)}" + (f", {limit} shown)" if len(cameras) > limit else ")"),
              title_justify="left")
    for col in ("camera", "req", "ok", "err", "fresh p50 s", "fresh p95 s", "fresh max s", "misses",
                "growth s/s", "keeps up"):
        t.add_column(col, justify="left" if col == "camera" else "right")
    for c in rows[:limit]:
        f = c["freshness_s"]
        t.add_row(c["camera_id"], str(c["requests"]), str(c["ok"]), str(c["errors"]), _fmt(f["p50"], 2),
                  _fmt(f["p95"], 2), _fmt(f["max"], 2), str(c["deadline_misses"]),
                  _fmt(c["lag_growth_s_per_s"], 3), "[green]yes[/]" if c["keeps_up"] else "[red]no[/]")
    return t


def render_run(doc: dict[str, Any], console: Console | None = None) -> None:
    """Prints a run's summary, distributions and per-camera table."""
    console = console or Console()
    console.print(Panel(headline(doc["summary"]), title=f"loadtest → {doc.get('target', '?')}", expand=False))
    console.print(summary_table(doc["summary"]))
    console.print(camera_table(doc["cameras"]))


def sweep_table(doc: dict[str, Any]) -> Table:
    """One row per sweep level."""
    t = Table(title=f"sweep: best = {doc['best_cameras']} cameras", title_justify="left")
    for col in ("cameras", "QPS", "fresh p50 s", "fresh p95 s", "lat p95 ms", "errors", "growth s/s", "keeps up"):
        t.add_column(col, justify="right")
    for lv in doc["levels"]:
        s = lv["summary"]
        t.add_row(str(lv["cameras"]), _fmt(s["qps"], 2), _fmt(s["freshness_s"]["p50"], 2),
                  _fmt(s["freshness_s"]["p95"], 2), _fmt(s["latency_ms"]["p95"], 0), f"{s['error_rate']:.1%}",
                  _fmt(s["lag_growth_s_per_s"], 3), "[green]yes[/]" if s["keeps_up"] else "[red]no[/]")
    return t


class LiveView:
    """The rich renderable shown while a run is going (refreshed by ``rich.live.Live``)."""

    def __init__(self, runner: Runner, title: str = "loadtest", rows: int = 12):
        self.runner = runner
        self.title = title
        self.rows = rows

    def __rich__(self) -> Group:
        r = self.runner
        s = r.settings
        now = r.clock()
        recs = list(r.records)
        done = [x for x in recs if x.done_s is not None or x.stopped_s is not None]
        ok = [x for x in done if x.ok]
        recent = [x for x in ok if x.done_s is not None and x.done_s >= now - 10]  # ok: done_s is set
        fresh = distribution(x.freshness_s for x in done if not x.warmup)
        lag = distribution(x.lag_ms for x in recs)
        head = (
            f"{self.title}: {r.phase}  t={now:5.1f}/{s.duration_s:g} s  sent {len(recs)}  in flight {r.inflight}  "
            f"ok {len(ok)}  errors {len(done) - len(ok)}\n"
            f"QPS (last 10 s) {len(recent) / min(10.0, max(now, 1e-3)):.2f}   "
            f"freshness p50 {_fmt(fresh['p50'], 2)} s  p95 {_fmt(fresh['p95'], 2)} s (SLO {s.effective_slo_s:g} s)   "
            f"scheduling lag p99 {_fmt(lag['p99'], 2)} ms"
        )
        by_cam: dict[str, list[RequestRecord]] = {}
        for x in recs:
            by_cam.setdefault(x.camera_id, []).append(x)
        t = Table(box=None, pad_edge=False)
        for col in ("camera", "sent", "ok", "err", "last fresh s", "p95 fresh s"):
            t.add_column(col, justify="left" if col == "camera" else "right")
        stats = []
        for cam, xs in by_cam.items():
            answered = [x for x in xs if x.freshness_s is not None]
            p95 = distribution(x.freshness_s for x in answered)["p95"]
            last = answered[-1].freshness_s if answered else None
            errs = sum(1 for x in xs if x.error_kind)
            stats.append((cam, len(xs), sum(x.ok for x in xs), errs, last, p95))
        stats.sort(key=lambda c: -(c[5] or 0))
        for cam, n, nok, errs, last, p95 in stats[: self.rows]:
            t.add_row(cam, str(n), str(nok), str(errs), _fmt(last, 2), _fmt(p95, 2))
        more = f"\n(+{len(stats) - self.rows} more cameras)" if len(stats) > self.rows else ""
        return Group(Panel(head, expand=False), t, more)
