"""benchmarks/out_names.sh: a phase's fixed result name under $OUT never overwrites an earlier phase's file.

2026-12-07 (twentieth lease): one device call stopped a server, started the next and stopped that one; both stops
wrote ``fleet_graph_serve.log.gz`` and the first server's whole log was lost.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _out_path(out: Path, name: str) -> str:
    """``out_path NAME`` as the GPU scripts call it, with ``OUT`` at ``out``; returns the path it prints."""
    result = subprocess.run(["bash", "-c", f'source {ROOT / "benchmarks" / "out_names.sh"}; out_path "$1"', "_", name],
                            env={"OUT": str(out), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                            timeout=30, check=True)
    return result.stdout.strip()


def test_a_free_name_is_kept(tmp_path: Path) -> None:
    assert _out_path(tmp_path, "fleet_graph_serve.log.gz") == f"{tmp_path}/fleet_graph_serve.log.gz"


def test_a_taken_name_gets_the_next_number_before_its_extensions(tmp_path: Path) -> None:
    (tmp_path / "fleet_graph_serve.log.gz").write_bytes(b"first server")
    assert _out_path(tmp_path, "fleet_graph_serve.log.gz") == f"{tmp_path}/fleet_graph_serve.2.log.gz"
    (tmp_path / "fleet_graph_serve.2.log.gz").write_bytes(b"second server")
    assert _out_path(tmp_path, "fleet_graph_serve.log.gz") == f"{tmp_path}/fleet_graph_serve.3.log.gz"


def test_a_name_without_extension_is_numbered_at_its_end(tmp_path: Path) -> None:
    (tmp_path / "derived").write_text("x")
    assert _out_path(tmp_path, "derived") == f"{tmp_path}/derived.2"


def test_every_start_and_stop_file_of_the_gpu_scripts_goes_through_out_path() -> None:
    """The fixed names a server's start and stop write (config, log) are taken from ``out_path`` in both scripts."""
    for script, names in (("fleet_gpu.sh", ("fleet_graph_config.yaml", "fleet_plain_server.log.gz",
                                            "fleet_graph_serve.log.gz")),
                          ("quiet_scenes_gpu.sh", ("derived.yaml", "serve.log.gz"))):
        text = (ROOT / "benchmarks" / script).read_text()
        for name in names:
            assert f'"$(out_path {name})"' in text, (script, name)
            assert f'"$OUT/{name}"' not in text, (script, name)
