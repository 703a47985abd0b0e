"""Camera-count sweep: run N = 1, 2, 4, … cameras and find the largest N that keeps up.

Each level is a full run (its own ``results.json``, CSV and plots under
``cameras-NNN/``). A level keeps up when p95 freshness ≤ the SLO, the error
rate is under the limit and lag growth is under its limit
(:func:`loadtest.statistics.verdict`). Levels run in increasing order and stop at
the first failure (more cameras would only fail slower); with ``search`` the
gap between the best pass and the first failure is then bisected. The answer
(:func:`sweep_decision`) is the "cameras per server" figure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from loadtest.report import RESULTS_JSON, now_iso
from loadtest.settings import RunSettings

logger = logging.getLogger(__name__)

#: A function that runs one level: settings and its output folder in, the run's results document out.
LevelRunner = Callable[[RunSettings, Path], Awaitable[dict[str, Any]]]


def parse_levels(text: str) -> list[int]:
    """``"1,2,4,8"`` → ``[1, 2, 4, 8]`` (sorted, unique, each ≥ 1).

    Raises:
        ValueError: not a comma-separated list of positive integers.
    """
    try:
        levels = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--sweep expects comma-separated camera counts like 1,2,4,8 (got {text!r})") from None
    if not levels or levels[0] < 1:
        raise ValueError(f"--sweep camera counts must be ≥ 1 (got {text!r})")
    return levels


def sweep_decision(levels: Sequence[tuple[int, bool]]) -> int | None:
    """The "cameras per GPU" figure from a sweep.

    Args:
        levels: ``(cameras, keeps_up)`` for every level run, in any order.

    Returns:
        The largest camera count that kept up with every smaller tested count
        also keeping up (a pass above a failure is treated as noise), or None
        if even the smallest level failed.
    """
    best = None
    for cams, passed in sorted(levels):
        if not passed:
            break
        best = cams
    return best


def next_search_level(levels: Sequence[tuple[int, bool]]) -> int | None:
    """Bisection step after a sweep list: the midpoint between the best pass and the first failure.

    Returns:
        A camera count not yet tried strictly between them, or None when they are adjacent
        (or there is no failure, or no pass).
    """
    best = sweep_decision(levels)
    fails = sorted(c for c, p in levels if not p and (best is None or c > best))
    if best is None or not fails:
        return None
    lo, hi = best, fails[0]
    if hi - lo <= 1:
        return None
    return (lo + hi) // 2


async def run_sweep(
    make_settings: Callable[[int], RunSettings],
    levels: list[int],
    out_dir: Path,
    run_level: LevelRunner,
    *,
    search: bool = False,
    stop_at_failure: bool = True,
    pause_s: float = 5.0,
    title: str = "",
) -> dict[str, Any]:
    """Runs the levels and returns the sweep document (also the data of ``sweep.png``).

    Args:
        make_settings: camera count → the run's settings.
        levels: camera counts to try, ascending.
        out_dir: each level writes into ``out_dir/cameras-NNN``.
        run_level: runs one level and returns its results document.
        search: bisect between the best pass and the first failure afterwards.
        stop_at_failure: skip the remaining list levels after the first failure.
        pause_s: idle time between levels so the server drains leftovers.
    """
    done: list[dict[str, Any]] = []
    outcomes: list[tuple[int, bool]] = []

    async def one(n: int) -> bool:
        if done:
            await asyncio.sleep(pause_s)
        sub = out_dir / f"cameras-{n:03d}"
        doc = await run_level(make_settings(n), sub)
        s = doc["summary"]
        done.append({"cameras": n, "results": f"{sub.name}/{RESULTS_JSON}", "summary": s})
        outcomes.append((n, bool(s["keeps_up"])))
        logger.info("sweep level %d cameras: %s", n, "keeps up" if s["keeps_up"] else "; ".join(s["reasons"]))
        return bool(s["keeps_up"])

    for n in levels:
        if not await one(n) and stop_at_failure:
            break
    while search and (level := next_search_level(outcomes)) is not None and level not in {c for c, _ in outcomes}:
        await one(level)
    first = make_settings(levels[0])
    crit = {"slo_s": first.effective_slo_s, "max_error_rate": first.max_error_rate,
            "max_lag_growth": first.max_lag_growth}
    return {
        "kind": "sweep",
        "created_at": now_iso(),
        "title": title,
        "target": first.target,
        "criteria": crit,
        "settings": first.model_dump(mode="json", exclude={"cameras"}),
        "camera_template": first.cameras[0].model_dump(mode="json"),
        "levels": sorted(done, key=lambda lv: lv["cameras"]),
        "best_cameras": sweep_decision(outcomes),
    }
