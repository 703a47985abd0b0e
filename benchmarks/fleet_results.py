"""Readers for the files ``benchmarks/fleet_gpu.sh`` brings back from a lease (issue 26).

Each lease's ``results/gpu/fleet-leaseN/summarize.py`` sums its own files up with these, so that a camera level,
a closed-loop step and a server's ``max_num_seqs`` are read one way in every lease:

- :func:`camera_level`: one level of ``python -m loadtest --streams`` (``fleet_graph_qQ_N.json``, renamed
  ``cameras/SERVER_qQ_N.json`` in a lease's folder);
- :func:`camera_limits`: per server, the most cameras a level kept up with and the fewest a level failed at;
- :func:`loop_step`: one ``sustainN`` or ``questionsN`` step of ``benchmarks.lifecycle`` (``lifecycle.json``),
  checked against the ``== STEP: {...}`` line that ``fleet_gpu.sh burst`` logs for it (``burst.log``);
- :func:`max_num_seqs`: the engine's ``max_num_seqs`` as a server's derived config (``fleet_graph_config.yaml``)
  set it;
- :func:`gpu_tests`: the counts and case names of a ``tests/gpu`` run's JUnit file (``gpu_machine.sh tests``);
- :func:`engine_busy_spans`: the stretches in which vLLM's stats line (``log_stats_interval_s``) in a server's log
  counted requests, each with its most running and waiting requests and its mean prompt and generation tokens/s.

and the command pieces the leases' scripts write into their summaries (:data:`GRAPH`, :data:`STATIC_FP8`,
:data:`SERVERS`, :data:`LOOP`), so that each is spelled once.
"""

from __future__ import annotations

import gzip
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

# The graph servers' overrides every lease from the fourteenth on started with (``fleet_gpu.sh graph-start CONFIG
# GRAPH``): three stream workers, 256 sequences with their decode sweep and replica queue, the decode tier held at 6.
GRAPH = ("streams.workers=3 model.engine_args.max_num_seqs=256 model.warmup_decode_sweep=256 "
         "model_replica.max_ongoing_requests=256 decoder.autoscaling_config.min_replicas=6")
# fp8 with static activation scales on the dummy checkpoint (read as a calibrated fp8 one; random scales), as a
# shell-quoted ``graph-start`` override.
STATIC_FP8 = ("'model.engine_args.hf_overrides={\"quantization_config\":{\"quant_method\":\"fp8\","
              "\"activation_scheme\":\"static\"}}'")
# The two servers the nineteenth lease on compared: bf16, and static fp8 (each followed by GRAPH when started).
SERVERS = {"b16": "configs/h200.yaml", "s8": f"configs/h200-fp8.yaml {STATIC_FP8}"}
# The closed loop's command before its name and steps (``… burst NAME sustain1,sustain3``).
LOOP = "SUSTAIN_STAGGER_S=30 SUSTAIN_S=110 SUSTAIN_WARMUP_S=45 bash benchmarks/fleet_gpu.sh burst"

# What a loop step's summary keeps: rates in windows/s and answers/s, latencies in s, the server's split in ms.
STEP_KEYS = ("questions_per_window", "sent", "statuses", "counted", "windows_per_s", "windows_per_s_by_latency",
             "answers_per_s", "latency_mean_s", "latency_p95_s", "ended_per_10s", "ran_out_of_windows",
             "server_split_mean_ms")
# vLLM 0.24's stats line (vllm/v1/metrics/loggers.py), as a replica logs it every log_stats_interval_s.
_STATS = re.compile(r"INFO (?P<at>\d\d-\d\d \d\d:\d\d:\d\d) .*Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
                    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs, "
                    r"Waiting: (?P<waiting>\d+) reqs")
# The fields in which a step's burst.log line and its lifecycle.json must agree.
_CHECKED = ("sent", "counted", "windows_per_s", "latency_mean_s")


def camera_level(path: Path) -> dict[str, Any]:
    """One camera level's verdict, freshness (s) and the server's split (ms), from ``loadtest --streams``'s results.

    ``path`` holds the results of a sweep of exactly one level (``fleet_gpu.sh`` runs one level per load-tester
    run). Returns ``cameras``, ``keeps_up`` with its ``reasons``, ``freshness_growth_s_per_s``, freshness p50/p95
    (s), answers/s, windows cut and dropped, TTFT p50 and the model replica's time p50/p95 (ms).
    Raises ``ValueError`` when the file holds more or fewer than one level, ``KeyError`` when a field is missing.
    """
    levels = json.loads(path.read_text())["levels"]
    if len(levels) != 1:
        raise ValueError(f"{path.name}: {len(levels)} levels, expected one")
    (level,) = levels
    total, ms = level["total"], level["total"]["server_ms"]
    return {"cameras": level["cameras"], "keeps_up": level["summary"]["keeps_up"],
            "reasons": level["summary"]["reasons"],
            "freshness_growth_s_per_s": level["summary"]["freshness_growth_s_per_s"],
            "freshness_s_p50": total["freshness_s_p50"], "freshness_s_p95": total["freshness_s_p95"],
            "answers_per_s": total["answers_per_s"], "windows_cut": total["windows_cut"],
            "dropped_total": total["dropped_total"], "ttft_ms_p50": ms["ttft_ms"]["p50"],
            "model_ms_p50": ms["model_ms"]["p50"], "model_ms_p95": ms["model_ms"]["p95"]}


def camera_limits(levels: Mapping[str, Mapping[str, Any]],
                  servers: Iterable[str]) -> tuple[dict[str, int | None], dict[str, int | None]]:
    """Per server, the most cameras that kept up and the fewest that failed, over ``levels`` keyed ``SERVER_N``.

    ``levels`` holds :func:`camera_level` results. Returns ``(kept_up_most, failed_least)``, each ``{server: cameras}``,
    ``None`` where no level of that server kept up (or failed): the limit lies between the two.
    """
    mine = {s: [v for k, v in levels.items() if k.startswith(s + "_")] for s in servers}
    kept = {s: max((v["cameras"] for v in vs if v["keeps_up"]), default=None) for s, vs in mine.items()}
    failed = {s: min((v["cameras"] for v in vs if not v["keeps_up"]), default=None) for s, vs in mine.items()}
    return kept, failed


def loop_step(folder: Path, step: str) -> dict[str, Any]:
    """The one step named ``step`` in ``folder/lifecycle.json``, checked against its line in ``folder/burst.log``.

    Returns the step's :data:`STEP_KEYS`. Raises ``ValueError`` when the log has no ``== STEP: `` line or when the
    two disagree in sent, counted, windows/s or mean latency.
    """
    (saved,) = json.loads((folder / "lifecycle.json").read_text())["steps"]
    prefix = f"== {step}: "
    lines = [x for x in (folder / "burst.log").read_text().splitlines() if x.startswith(prefix)]
    if len(lines) != 1:
        raise ValueError(f"{folder.name}/burst.log: {len(lines)} '{prefix.strip()}' lines, expected one")
    logged = json.loads(lines[0].removeprefix(prefix))
    if any(saved[k] != logged[k] for k in _CHECKED):
        raise ValueError(f"{folder.name}: burst.log and lifecycle.json disagree on {step}")
    return {k: saved[k] for k in STEP_KEYS}


def max_num_seqs(config: Path) -> int:
    """``max_num_seqs`` as a server's derived config (``fleet_graph_config.yaml``) set it.

    Raises ``ValueError`` when its applications set different values, or none sets it.
    """
    apps = yaml.safe_load(config.read_text())["applications"]
    values = {app["args"]["model"]["engine_args"].get("max_num_seqs") for app in apps} - {None}
    if len(values) != 1:
        raise ValueError(f"{config.name}: max_num_seqs set to {sorted(values)}, expected one value")
    (value,) = values
    return int(value)


def gpu_tests(junit: Path, command: str) -> dict[str, Any]:
    """A ``tests/gpu`` run's counts, time (s) and case names from its JUnit file (``gpu-junit.xml``).

    ``command`` is the device command that ran it, kept in the summary. Raises ``ET.ParseError`` on a file that is
    not XML.
    """
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    return {"command": command, **{k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")},
            "time_s": float(suite.get("time", "0")), "cases": [case.get("name") for case in suite.iter("testcase")]}


def engine_busy_spans(serve_log: Path) -> list[dict[str, Any]]:
    """The stretches of a server's log in which vLLM's stats lines counted requests, in the order they ran.

    ``serve_log`` is a server's whole log (``fleet_graph_serve.log.gz``, gzip, or plain text). Consecutive stats
    lines (``log_stats_interval_s`` apart, 10 s in every lease) that count a running or waiting request make one
    span; a line counting none ends it. Each span gives ``from`` and ``to`` (its first and last line's
    ``MM-DD HH:MM:SS`` stamp, UTC), ``lines``, ``running_max``, ``waiting_max`` (requests), and the mean over its
    lines of vLLM's 10-s ``prompt_tokens_per_s`` and ``generation_tokens_per_s`` (vLLM's prompt rate leaves
    prefix-cache hits out). Returns ``[]`` for a log without such lines.
    """
    raw = serve_log.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8", "replace")
    spans: list[list[re.Match[str]]] = []
    idle = True
    for m in _STATS.finditer(text):
        busy = int(m["running"]) + int(m["waiting"]) > 0
        if busy and idle:
            spans.append([])
        if busy:
            spans[-1].append(m)
        idle = not busy
    return [{"from": s[0]["at"], "to": s[-1]["at"], "lines": len(s),
             "running_max": max(int(m["running"]) for m in s), "waiting_max": max(int(m["waiting"]) for m in s),
             "prompt_tokens_per_s_mean": round(sum(float(m["prompt"]) for m in s) / len(s), 1),
             "generation_tokens_per_s_mean": round(sum(float(m["gen"]) for m in s) / len(s), 1)} for s in spans]
