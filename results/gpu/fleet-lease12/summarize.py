"""Sums up the twelfth lease into ``fleet_batch_order_h200.json``.

Run from the repository root: ``python results/gpu/fleet-lease12/summarize.py``. Reads the engine-alone closed
loops (``engine/engine_profile.NAME.json``, :mod:`benchmarks.engine_profile` ``--bursts sustained
--sustain-points``), the ``tests/gpu`` JUnit files (``tests/``, ``window/``) and the per-window attention's
kernel timing (``window/kernel_timing_call.out``, the output the device tool returned).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

#: engine-alone runs: name -> what it is (configs/h200.yaml's engine arguments, max_num_seqs 256, encoder cache
#: 131,072 tokens, dummy weights; 90 s of sending per point, the first sends spread over 20 s)
RUNS = {
    "base": "vLLM's batch order",
    "order": "a window's requests in adjacent batch rows (model.order_batch_by_prefix at b6a065a)",
    "sat": "vLLM's batch order, 96 and 128 windows in flight",
}
KEYS = ("windows_per_s", "windows_per_s_by_latency", "counted", "measured_s", "latency_mean_s", "latency_p50_s",
        "latency_p95_s", "drain_s", "ended_per_10s", "previous_drain_s")


def _points(name: str) -> dict[str, Any]:
    d = json.loads((HERE / "engine" / f"engine_profile.{name}.json").read_text())
    points = {}
    drain_before = None
    for tag, v in d["bursts"].items():
        row = {k: v[k] for k in KEYS if k in v}
        row["ttft_s_p50"] = v["ttft_s"]["p50"]
        if "later_prefill_s" in v:
            row["later_prefill_s_p50"] = v["later_prefill_s"]["p50"]
        if drain_before is not None:  # the run predates previous_drain_s: read it from the point before
            row["previous_drain_s"] = drain_before
            row["previous_drain_counted"] = drain_before > v["warmup_s"]
        drain_before = v["drain_s"]
        points[tag] = row
    return {"what": RUNS[name], "command": d["command"], "engine_start_s": d["engine_start_s"], "points": points}


def _ratio(run: dict[str, Any], key: str) -> float:
    p = run["points"]
    return round(p["sustained_q3x64"][key] / p["sustained_q1x64"][key], 3)


def _junit(folder: str) -> dict[str, Any]:
    suite = ET.parse(HERE / folder / "gpu-junit.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")} | {
        "time_s": round(float(suite.get("time", 0)), 1)}


def _kernel() -> dict[str, Any]:
    text = (HERE / "window" / "kernel_timing_call.out").read_text()
    m = re.search(r"plain ([\d.]+) ms/layer, window ([\d.]+) ms/layer, x([\d.]+); "
                  r"x28 layers: ([\d.]+) vs ([\d.]+)", text)
    assert m is not None, "kernel_timing_call.out has no timing line"
    plain, window, speedup, plain28, window28 = (float(x) for x in m.groups())
    return {"what": "one layer's decode attention, 64 windows x 3 questions (192 rows), 8,128 shared tokens",
            "code": "e76e209", "plain_ms_per_layer": plain, "window_ms_per_layer": window, "speedup": speedup,
            "plain_ms_28_layers": plain28, "window_ms_28_layers": window28,
            "source": "window/kernel_timing_call.sh (as sent) and .out (returned output; no file was written)"}


def main() -> None:
    runs = {n: _points(n) for n in RUNS}
    base, order = runs["base"]["points"], runs["order"]["points"]
    doc = {
        "bench": "fleet, twelfth lease (issue 26): the engine alone in a closed loop, 1 and 3 questions per window, "
                 "vLLM's batch order against a window's requests in adjacent rows; 96 and 128 windows in flight",
        "date": "2026-12-04",
        "code": "b6a065a",
        "weights": "dummy (random): only the timings count",
        "device_s": {"used": 1706, "budget": 1800, "first_machine": 1558},
        "target_ratio_3_vs_1": 0.769,
        "ratio_3_vs_1_by_latency": {"base": _ratio(runs["base"], "windows_per_s_by_latency"),
                                    "order": _ratio(runs["order"], "windows_per_s_by_latency")},
        "ratio_3_vs_1_counted": {"base": _ratio(runs["base"], "windows_per_s"),
                                 "order": _ratio(runs["order"], "windows_per_s")},
        "order_gain_by_latency": {
            q: round(order[f"sustained_q{q}x64"]["windows_per_s_by_latency"]
                     / base[f"sustained_q{q}x64"]["windows_per_s_by_latency"], 3) for q in (3, 1)},
        "order_gain_counted": {
            q: round(order[f"sustained_q{q}x64"]["windows_per_s"] / base[f"sustained_q{q}x64"]["windows_per_s"], 3)
            for q in (3, 1)},
        "runs": runs,
        "tests_gpu": _junit("tests"),
        "window_attention": {"tests_gpu": _junit("window"), "kernel": _kernel(),
                             "not_measured": "windows/s with it, engine alone or in the graph"},
    }
    (HERE / "fleet_batch_order_h200.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
