"""The lifecycle bench's log reading (pure): the model replica's start phases from a ``serve run`` log."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from benchmarks.result import finite

#: The log lines that mark the model replica's start phases (regex → phase name), in order.
PHASE_MARKS = (
    (r"ingress ready", "ingress_ready"),
    (r"decode replica ready", "decoder_ready"),
    (r"stream worker ready", "stream_worker_ready"),
    # Serve's controller sees a killed model replica (the kill step)
    (r"Replica\(id='\w+', deployment='VideoModel'.*crashed, marking it unhealthy", "death_noticed"),
    (r"Adding 1 replica to Deployment\(name='VideoModel'", "replica_added"),
    (r"Resolved architecture", "vllm_config"),
    (r"Initializing a V1 LLM engine", "engine_core_started"),
    (r"Model loading took", "weights_loaded"),
    # vLLM's multimodal memory profiling (a dummy clip of the largest size through the encoder), then the
    # language model's profile and the CUDA graphs' memory profile
    (r"Encoder cache will be initialized", "mm_profiling_started"),
    (r"Profiling CUDA graph memory", "cudagraph_profiling_started"),
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


def replicas_ready_s(log: str, since: float, year: int) -> list[float]:
    """Seconds from ``since`` at which each model replica logged "model replica ready" (pure), in order; lines
    before ``since`` are ignored. With several model replicas (``configs/h200-pair.yaml``) the first answer
    comes from the first one; the service is whole when all are ready."""
    out = []
    for line in log.splitlines():
        if "model replica ready in" in line and (t := line_time(line, year)) is not None and t >= since:
            out.append(round(t - since, 1))
    return out


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


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.lifecycle_log LOG[.gz] --since "YYYY-MM-DD HH:MM:SS[.f]" [--out F]``: the phases of
    a committed ``serve run`` log after a moment (e.g. a kill step's kill), as JSON."""
    import argparse
    import gzip
    import json
    from pathlib import Path

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("log")
    p.add_argument("--since", required=True, help="local time of the origin, e.g. '2026-12-02 02:19:09'")
    p.add_argument("--out")
    a = p.parse_args(argv)
    raw = Path(a.log).read_bytes()
    text = (gzip.decompress(raw) if a.log.endswith(".gz") else raw).decode(errors="replace")
    since = datetime.fromisoformat(a.since)
    doc = {"log": a.log, "since": a.since, **start_phases(text, since.timestamp(), since.year)}
    out = json.dumps(finite(doc), indent=2, allow_nan=False)
    if a.out:
        Path(a.out).write_text(out + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def deploy_failure(log: str) -> str | None:
    """Why Serve refused to deploy the app, from a ``serve run`` log (pure): the first line after the
    controller's "Deploying app '...' failed with exception:" (the reason, at most 300 characters), or None
    (no such line, or its reason not written yet)."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"Deploying app '[^']*' failed with exception", line):
            if i + 1 == len(lines):
                return None  # the reason's line is not written yet
            reason = lines[i + 1]
            return re.sub(r"^\S*\(ServeController pid=\d+\)\S*\s*", "", reason).strip()[:300]
    return None
