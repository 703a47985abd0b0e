"""The lifecycle bench's log reading (pure): the model replica's start phases from a ``serve run`` log."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

#: The log lines that mark the model replica's start phases (regex → phase name), in order.
PHASE_MARKS = (
    (r"ingress ready", "ingress_ready"),
    (r"decode replica ready", "decoder_ready"),
    (r"stream worker ready", "stream_worker_ready"),
    (r"Adding 1 replica to Deployment\(name='VideoModel'", "replica_added"),
    (r"Resolved architecture", "vllm_config"),
    (r"Initializing a V1 LLM engine", "engine_core_started"),
    (r"init engine \(profile, create kv cache, warmup model\) took", "engine_ready"),
    (r"vLLM AsyncLLM ready in", "asyncllm_ready"),
    (r"warm-up: \d+ clips", "warmup_done"),
    (r"model replica ready in", "replica_ready"),
)
_RAY_TS = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3})")
_VLLM_TS = re.compile(r"\b(\d{2}-\d{2} \d{2}:\d{2}:\d{2})\b")


def line_time(line: str, year: int) -> float | None:
    """Epoch seconds of a Ray (``2026-12-01 19:47:01,254``) or vLLM (``12-01 19:47:25``) log line's
    timestamp (local time), or None when it has none."""
    if m := _RAY_TS.search(line):
        return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
    if m := _VLLM_TS.search(line):
        return datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S").timestamp()
    return None


def start_phases(log: str, since: float, year: int) -> dict[str, Any]:
    """The model replica's start phases from a ``serve run`` log (pure).

    Args:
        log: the log text.
        since: epoch seconds of the ``serve run`` start (earlier lines are ignored).
        year: the year of vLLM's year-less timestamps.

    Returns:
        ``marks_s``: seconds from ``since`` to the last occurrence of each :data:`PHASE_MARKS` line, and
        the figures vLLM and the replica print (``init_engine_s``, ``compile_s``, ``graph_capture_s``,
        ``warmup_s``, ``replica_ready_s``, ``compile_cache``) where present.
    """
    marks: dict[str, float] = {}
    out: dict[str, Any] = {"marks_s": marks}
    figures = (
        (r"init engine .* took ([\d.]+) s \(compilation: ([\d.]+) s", ("init_engine_s", "compile_s")),
        (r"Graph capturing finished in ([\d.]+) secs", ("graph_capture_s",)),
        (r"warm-up: \d+ clips of .*? in ([\d.]+) s", ("warmup_s",)),
        (r"first clip alone ([\d.]+) s; decode sweep of \d+: ([\d.]+) s", ("warmup_first_clip_s", "warmup_sweep_s")),
        (r"model replica ready in ([\d.]+) s", ("replica_ready_s",)),
        (r"preflight \+ vLLM import ([\d.]+) s", ("replica_import_s",)),
    )
    for line in log.splitlines():
        t = line_time(line, year)
        if t is None or t < since - 1:
            continue
        for pattern, name in PHASE_MARKS:
            if re.search(pattern, line):
                marks[name] = round(t - since, 1)
        for pattern, names in figures:
            if m := re.search(pattern, line):
                out.update({n: float(v) for n, v in zip(names, m.groups(), strict=True)})
        if m := re.search(r"compile cache (warm|cold)", line):
            out["compile_cache"] = m.group(1)
    return out
