"""What every bench writes: where it ran, the command, and the result file (indented JSON)."""

from __future__ import annotations

import json
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


def write_result(path: str | Path, result: dict[str, Any]) -> Path:
    """Writes a bench result as indented JSON (creating the folder); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(result, indent=2) + "\n")
    return p
