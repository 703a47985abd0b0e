"""PNG plots of a run or a sweep (matplotlib, Agg backend: no display needed).

Run: ``latency_cdf.png`` (latency and TTFT CDFs), ``timeline.png`` (QPS and
p50/p95 latency over time), ``freshness.png`` (every camera's freshness over
time against the SLO), ``scheduling_lag.png`` (the client's own delay) and
``report.png`` (the four in one figure).
Sweep: ``sweep.png`` (p95 freshness and error rate against camera count).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from loadtest.records import RequestRecord
from loadtest.statistics import percentiles, timeline

if TYPE_CHECKING:
    from matplotlib.axes import Axes

logger = logging.getLogger(__name__)


def _ecdf(ax: Axes, values: Sequence[float], label: str) -> None:
    """Matplotlib's empirical CDF (``Axes.ecdf``, matplotlib ≥ 3.8) of a non-empty sample, n in the label."""
    if len(values):
        ax.ecdf(values, label=f"{label} (n={len(values)})")


def latency_cdf(ax: Axes, records: Sequence[RequestRecord]) -> None:
    """CDF of end-to-end latency and client TTFT (successful, measured requests)."""
    ok = [r for r in records if r.ok and not r.warmup]
    lat = [r.latency_ms / 1000 for r in ok if r.latency_ms is not None]
    ttft = [r.ttft_ms / 1000 for r in ok if r.ttft_ms is not None]
    _ecdf(ax, lat, "latency")
    _ecdf(ax, ttft, "TTFT")
    both = [v for v in lat + ttft if v > 0]
    if both and max(both) / min(both) > 30:
        ax.set_xscale("log")
    for q in (0.5, 0.95, 0.99):
        ax.axhline(q, color="0.85", lw=0.8, zorder=0)
    ax.set_xlabel("seconds")
    ax.set_ylabel("fraction of requests")
    ax.set_title("latency CDF")
    ax.set_ylim(0, 1.01)
    ax.legend(loc="lower right", fontsize=8)


def scheduling_lag(ax: Axes, records: Sequence[RequestRecord]) -> None:
    """CDF of the client's scheduling lag (sent − scheduled), milliseconds, log scale."""
    lag = [max(r.lag_ms, 1e-3) for r in records if not r.warmup]
    _ecdf(ax, lag, "scheduling lag")
    if lag:
        p99 = cast(float, percentiles(lag, (99,))["p99"])  # not None: lag is not empty
        ax.axvline(p99, color="tab:red", lw=1, ls=":", label=f"p99 {p99:.1f} ms")
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (log)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("client scheduling lag CDF")
    ax.set_ylim(0, 1.01)
    ax.legend(loc="lower right", fontsize=8)


def qps_latency(ax: Axes, records: Sequence[RequestRecord], bin_s: float | None = None) -> None:
    """Completed requests per second (bars) and p50/p95 latency (lines) per time bin."""
    ends = [r.done_s for r in records if r.done_s is not None]
    span = max(ends) if ends else 1.0
    bin_s = bin_s or max(1.0, round(span / 40))
    tl = timeline(records, bin_s)
    t = np.asarray(tl["t_s"]) + bin_s / 2
    ax.bar(t, tl["qps"], width=bin_s * 0.9, color="tab:blue", alpha=0.35, label="QPS (ok)")
    if any(tl["errors"]):
        ax.bar(t, np.asarray(tl["errors"]) / bin_s, width=bin_s * 0.9, color="tab:red", alpha=0.6,
               bottom=tl["qps"], label="errors/s")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("requests / s")
    ax2 = ax.twinx()
    # Distinct markers: with one request per bin p50 = p95 and the two would hide each other.
    key: Literal["latency_p50_ms", "latency_p95_ms"]
    for key, style, marker in (("latency_p50_ms", "-", "."), ("latency_p95_ms", "--", "x")):
        y = np.asarray([np.nan if v is None else v / 1000 for v in tl[key]])
        ax2.plot(t, y, style, color="tab:orange", marker=marker, label=key.split("_")[1] + " latency")
    ax2.set_ylabel("latency (s)")
    ax.set_title(f"QPS and latency over time ({bin_s:g}-s bins)")
    for a in (ax, ax2):  # headroom above the data for the legend
        a.set_ylim(0, a.get_ylim()[1] * 1.3)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)


def camera_freshness(ax: Axes, records: Sequence[RequestRecord], slo_s: float) -> None:
    """Each camera's freshness against its window end time; × marks errors/unfinished."""
    by_cam: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if not r.warmup:
            by_cam[r.camera_id].append(r)
    many = len(by_cam) > 10
    for cam, rs in by_cam.items():
        pts = sorted((r.window_end_s, r.freshness_s) for r in rs if r.freshness_s is not None and r.ok)
        if pts:
            x, y = zip(*pts, strict=True)
            ax.plot(x, y, marker=".", lw=0.8 if many else 1.2, alpha=0.5 if many else 0.9,
                    label=None if many else cam)
        bad = [(r.window_end_s, r.freshness_s) for r in rs if not r.ok and r.freshness_s is not None]
        if bad:
            ax.plot(*zip(*bad, strict=True), "x", color="tab:red", ms=6)
    ax.axhline(slo_s, color="k", ls="--", lw=1, label=f"SLO {slo_s:g} s")
    ax.set_xlabel("window end (s since start)")
    ax.set_ylabel("freshness: answer − window end (s)")
    ax.set_title(f"per-camera freshness ({len(by_cam)} cameras)")
    ax.legend(loc="upper left", fontsize=7, ncol=2)


def write_run_plots(out_dir: Path, records: Sequence[RequestRecord], slo_s: float, title: str = "") -> list[Path]:
    """Writes the run's PNGs into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    draw: Callable[[Axes], None]
    for name, draw in (
        ("latency_cdf.png", lambda ax: latency_cdf(ax, records)),
        ("timeline.png", lambda ax: qps_latency(ax, records)),
        ("freshness.png", lambda ax: camera_freshness(ax, records, slo_s)),
        ("scheduling_lag.png", lambda ax: scheduling_lag(ax, records)),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
        draw(ax)
        fig.savefig(out_dir / name, dpi=90)
        plt.close(fig)
        paths.append(out_dir / name)
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.4), layout="constrained")
    latency_cdf(axes[0, 0], records)
    qps_latency(axes[0, 1], records)
    camera_freshness(axes[1, 0], records, slo_s)
    scheduling_lag(axes[1, 1], records)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.savefig(out_dir / "report.png", dpi=75)
    plt.close(fig)
    paths.append(out_dir / "report.png")
    return paths


def write_sweep_plot(path: Path, doc: dict[str, Any]) -> Path:
    """The sweep curve: p50/p95 freshness and error rate against cameras, SLO and the best count marked."""
    levels = sorted(doc["levels"], key=lambda lv: lv["cameras"])
    n = [lv["cameras"] for lv in levels]
    p95 = [lv["summary"]["freshness_s"]["p95"] for lv in levels]
    p50 = [lv["summary"]["freshness_s"]["p50"] for lv in levels]
    err = [lv["summary"]["error_rate"] * 100 for lv in levels]
    ok = [lv["summary"]["keeps_up"] for lv in levels]
    fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    ax.plot(n, [np.nan if v is None else v for v in p95], "o-", label="p95 freshness")
    ax.plot(n, [np.nan if v is None else v for v in p50], ".:", label="p50 freshness")
    for x, y, passed in zip(n, p95, ok, strict=True):
        if y is not None:
            ax.annotate("✓" if passed else "✗", (x, y), textcoords="offset points", xytext=(0, 6), ha="center",
                        color="green" if passed else "red")
    ax.axhline(doc["criteria"]["slo_s"], color="k", ls="--", lw=1, label=f"SLO {doc['criteria']['slo_s']:g} s")
    if doc.get("best_cameras"):
        ax.axvline(doc["best_cameras"], color="green", lw=1, alpha=0.6, label=f"best: {doc['best_cameras']} cameras")
    ax.set_xscale("log", base=2)
    ax.set_xticks(n, [str(x) for x in n])
    ax.set_xlabel("cameras")
    ax.set_ylabel("freshness (s)")
    ax2 = ax.twinx()
    ax2.bar(n, err, width=[x * 0.15 for x in n], color="tab:red", alpha=0.3, label="error rate %")
    ax2.set_ylabel("error rate (%)")
    ax2.set_ylim(0, max(5.0, max(err) * 1.2))
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    ax.set_title(doc.get("title") or "cameras one server keeps up with")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
