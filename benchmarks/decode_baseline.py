"""The decode bench's ``--baseline REV``: the decoder of a git revision against the working tree's.

See :mod:`benchmarks.decode` (the ``baseline`` section of its result).
"""

from __future__ import annotations

import functools
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.cpu_time import cpu_summary, own_cpu_s
from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.clip import decode_clip
from serve_app.protocol import FrameSampling

#: The project's checkout (the git repository the revision is read from).
ROOT = Path(__file__).resolve().parents[1]


def _load_baseline(rev: str, tmp: str) -> ModuleType:
    """The decoder module of git revision ``rev`` (``serve_app/decode/clip.py``; ``decoder.py`` at the package's
    top before the feature packages), imported from a copy renamed ``serve_app_baseline``."""
    import importlib
    import re

    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "serve_app"], check=True,
                             capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    pkg = Path(tmp) / "serve_app_baseline"
    (Path(tmp) / "serve_app").rename(pkg)
    for f in pkg.rglob("*.py"):
        f.write_text(re.sub(r"\bserve_app\b", "serve_app_baseline", f.read_text()))
    sys.path.insert(0, tmp)
    # the decoder is decode/clip.py since the feature packages, decoder.py at the package's top before
    old_layout = (pkg / "decoder.py").exists()
    return importlib.import_module("serve_app_baseline.decoder" if old_layout else "serve_app_baseline.decode.clip")


def baseline_comparison(rev: str, clips: list[Path], repeats: int) -> dict[str, Any]:
    """The decoder of git revision ``rev`` against the working tree's, call by call in this process.

    Each clip is decoded by both (one warm-up each), then ``repeats`` times alternately
    (baseline, current, baseline, …), so both see the same machine load even on a shared
    machine. Returns per clip the medians and ``current / baseline`` in clip-seconds per CPU-second.
    """
    import tempfile

    out: dict[str, Any] = {"revision": rev, "repeats": repeats, "clips": []}
    with tempfile.TemporaryDirectory() as tmp:
        base = _load_baseline(rev, tmp)
        # the frame-sampling request class was `SampleRequest` before the rename to `FrameSampling`
        base_sampling = getattr(base, "FrameSampling", None) or base.SampleRequest
        for path in clips:
            data = path.read_bytes()
            lim = LimitsConfig()
            runs = {
                "baseline": functools.partial(
                    base.decode_clip, data, base_sampling(4.0, lim.max_frames), DecodeConfig(), lim
                ),
                "current": functools.partial(
                    decode_clip, data, FrameSampling(4.0, lim.max_frames), DecodeConfig(), lim
                ),
            }
            samples: dict[str, list[float]] = {"baseline": [], "current": []}
            duration = runs["current"]().duration_s
            runs["baseline"]()
            for _ in range(repeats):
                for label, fn in runs.items():
                    samples[label].append(own_cpu_s(fn)[0])
            b, cur = (statistics.median(samples[k]) for k in ("baseline", "current"))
            out["clips"].append({
                "clip": path.name,
                "baseline_cpu_s": cpu_summary(samples["baseline"]),
                "current_cpu_s": cpu_summary(samples["current"]),
                "clip_s_per_cpu_s": {"baseline": round(duration / b, 1), "current": round(duration / cur, 1)},
                "current_over_baseline": round(b / cur, 3),
            })  # fmt: skip
    return out
