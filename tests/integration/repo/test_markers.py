"""The unit / integration / gpu markers come from tests/conftest.py's hook (by folder), not from
per-file ``pytestmark`` lines: ``-m`` must select by folder, with strict markers on."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: One small file per marked folder (collected only: nothing in them runs).
FILES = {"unit": "tests/unit/model/test_text.py", "integration": "tests/integration/deployments/test_graph.py",
         "gpu": "tests/gpu/test_preflight_gpu.py"}  # fmt: skip


def collected(expr: str) -> set[str]:
    """Folders (``unit``, …) of the tests that ``pytest -m expr`` selects among :data:`FILES`."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", expr,
         *FILES.values()],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode in (0, 5), out.stdout + out.stderr  # 5: nothing selected
    return {line.split("/")[1] for line in out.stdout.splitlines() if line.startswith("tests/") and "::" in line}


@pytest.mark.parametrize("marker", sorted(FILES))
def test_dash_m_selects_exactly_the_folder_of_its_marker(marker):
    assert collected(marker) == {marker}

