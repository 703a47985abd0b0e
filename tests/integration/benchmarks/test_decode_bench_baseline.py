"""The decode bench's baseline loader: an older revision's decoder, imported beside the working tree's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _has_git_history() -> bool:
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not _has_git_history(), reason="needs the project's git history (a clone, not an export)")
def test_the_baseline_decoder_is_a_separate_copy_of_that_revision(tmp_path):
    import serve_app.decode.clip as current
    from benchmarks.decode_baseline import _load_baseline

    before = list(sys.path)
    try:
        base = _load_baseline("HEAD", str(tmp_path))
        assert base.__name__ in ("serve_app_baseline.decode.clip", "serve_app_baseline.decoder")
        assert base is not current and base.decode_clip is not current.decode_clip
        assert Path(base.__file__).is_relative_to(tmp_path)
        # its own imports point at the copy, never at the working tree's package
        src = Path(base.__file__).read_text()
        assert "serve_app_baseline" in src and "from serve_app." not in src
        assert hasattr(base, "FrameSampling") or hasattr(base, "SampleRequest")
    finally:
        sys.path[:] = before
        for name in [m for m in sys.modules if m == "serve_app_baseline" or m.startswith("serve_app_baseline.")]:
            del sys.modules[name]
