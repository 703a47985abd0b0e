"""benchmarks.result: what every bench writes."""

from __future__ import annotations

import json
import math

from benchmarks.result import finite, write_result


def test_a_result_with_nan_or_infinite_figures_is_written_as_standard_json_with_nulls(tmp_path):
    doc = {"p95_ms": math.inf, "levels": [{"p50": math.nan, "n": 3, "ok": True}, (1.5, -math.inf)], "name": "x"}
    path = write_result(tmp_path / "sub" / "r.json", doc)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"p95_ms": None, "levels": [{"p50": None, "n": 3, "ok": True}, [1.5, None]],
                                "name": "x"}
    assert finite(2.0) == 2.0 and finite(True) is True and finite("inf") == "inf"
