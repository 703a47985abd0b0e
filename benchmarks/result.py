"""What every bench writes: where it ran, the command, and the result file (indented JSON)."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """Where a bench ran: CPU count, platform, Python, and the 1/5/15-minute load averages now."""
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]}


def command(module: str, argv: list[str] | None) -> str:
    """The command line that ran a bench (``python -m <module> <args>``)."""
    return f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv)


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float (at any depth of dicts, lists and tuples) replaced by None:
    JSON has no such numbers (Python would write ``NaN``/``Infinity``, which other JSON readers refuse)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def write_result(path: str | Path, result: dict[str, Any]) -> Path:
    """Writes a bench result as indented, standard JSON (creating the folder; a NaN or infinite figure is
    written as null: :func:`finite`); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(finite(result), indent=2, allow_nan=False) + "\n")
    return p
