"""The reference GPU workload shared by every GPU figure of the project.

A 10-s window of a real clip, sampled at 4 fps to 40 frames of 420×756
(8,100 video tokens), the plain system prompt "You are a helpful assistant."
and the question below: 8,133 prompt tokens; 256 output tokens with
``ignore_eos``. Every request uses a different window (start offsets
``k · step_s``), so no multimodal or prefix cache can serve one request from
another's work.

Both sides of the GPU benchmark (:mod:`benchmarks.gpu`, :mod:`benchmarks.vllm_serve`) decode the
very same bytes: each request's 10-s window is cut once, before the run, into its own H.264 MP4
file (:func:`cut_window_files`: re-encoded, a keyframe at the first frame, exactly the window's
frames, so no side sees more or less of the clip). Every side sends its requests with
:func:`send_batch` (the load tester's client) and reads its figures with :func:`batch_figures` and
:func:`run_figures`. The run's window files: :func:`window_files`; one decoded by the project's decoder:
:func:`decode_frames`; the engine arguments every side shares: :data:`BASE_ENGINE_ARGS`.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadtest import statistics as stats
from loadtest.records import RequestRecord
from loadtest.traffic import batch_json
from serve_app.model_facts import DEFAULT_SYSTEM_PROMPT

if TYPE_CHECKING:
    import numpy as np

QUESTION = "Is anyone in this scene in danger? Answer with reasoning."
SYSTEM_PROMPT = DEFAULT_SYSTEM_PROMPT
WINDOW_S = 10.0
OUTPUT_TOKENS = 256
#: The questions asked of a window when several are (the first N of them): the lifecycle bench's
#: ``questionsN``/``sustainN`` steps, ``benchmarks/fleet_gpu.sh`` and the engine profile's ``--questions``.
QUESTIONS = (
    "Is anyone in this scene in danger?",
    "Describe any unusual activity in this clip.",
    "How many vehicles move through the scene, and where do they go?",
)

#: Engine arguments every side shares: the dummy checkpoint in bf16. Anything
#: else is vLLM's default on the plain sides and the Serve config's on ours.
BASE_ENGINE_ARGS = {"load_format": "dummy", "dtype": "bfloat16"}


@dataclasses.dataclass(frozen=True)
class Window:
    """One request's clip window: ``[start_s, start_s + WINDOW_S)`` of ``clip``."""

    clip: Path
    start_s: float

    @property
    def end_s(self) -> float:
        """Window end in clip seconds."""
        return self.start_s + WINDOW_S


def windows(clip: Path, n: int, clip_duration_s: float) -> list[Window]:
    """``n`` distinct 10-s windows spread evenly over a clip of ``clip_duration_s`` seconds.

    Raises:
        ValueError: the clip is shorter than one window.
    """
    span = clip_duration_s - WINDOW_S - 0.2
    if span < 0:
        raise ValueError(f"clip lasts {clip_duration_s:.1f} s; a window needs {WINDOW_S:.0f} s")
    step = span / max(n - 1, 1)
    return [Window(clip, round(k * step, 3)) for k in range(n)]


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """What one bench side sends, in order: ``warmup`` (one clip, untimed), ``warm_burst`` (untimed,
    all at once), ``single`` (one at a time, timed), ``batch`` (all at once, timed)."""

    warmup: list[Any]
    warm_burst: list[Any]
    single: list[Any]
    batch: list[Any]


def split_run(files: list[Any], single: int, inflight: int, warm_burst: int = 0) -> RunFiles:
    """Splits a side's distinct window files: ``[0]`` warm-up, then ``single``, then ``inflight``;
    the warm burst takes the last ``warm_burst`` files, so it never reuses a timed window.

    Raises:
        ValueError: fewer files than ``1 + single + inflight + warm_burst``.
    """
    need = 1 + single + inflight + warm_burst
    if len(files) < need:
        raise ValueError(f"{len(files)} window files; this side needs {need}")
    return RunFiles(
        warmup=files[:1],
        warm_burst=files[len(files) - warm_burst :] if warm_burst else [],
        single=files[1 : 1 + single],
        batch=files[1 + single : 1 + single + inflight],
    )


def summary(latencies_s: list[float]) -> dict[str, Any]:
    """Mean, p50 and p95 of a list of seconds, 4 decimals (:func:`loadtest.statistics.percentiles`)."""
    return {"mean": round(statistics.fmean(latencies_s), 4) if latencies_s else None,
            **stats.percentiles(latencies_s, (50, 95), digits=4)}


def _cut_one(clip: str, start_s: float, out: str) -> str:
    """Re-encodes ``[start_s, start_s + WINDOW_S)`` of ``clip`` into ``out`` (H.264, CRF 18)."""
    import av

    with av.open(clip) as src:
        vs = src.streams.video[0]
        rate = vs.average_rate or Fraction(25)
        frames = []
        for f in src.decode(vs):
            if f.time is None or f.time < start_s - 1e-6:
                continue
            if f.time >= start_s + WINDOW_S - 1e-6:
                break  # the rest of the clip is not decoded (prep cuts hundreds of windows)
            frames.append(f)
    with av.open(out, "w", format="mp4") as dst:
        st = dst.add_stream("libx264", rate=rate)
        st.width, st.height, st.pix_fmt = frames[0].width, frames[0].height, "yuv420p"
        st.options = {"crf": "18", "preset": "veryfast", "g": str(len(frames) + 1)}
        for i, f in enumerate(frames):
            g = f.reformat(format="yuv420p")
            g.pts, g.time_base = i, Fraction(1, 1) / rate
            for p in st.encode(g):
                dst.mux(p)
        for p in st.encode():
            dst.mux(p)
    return out


def cut_window_files(wins: list[Window], out_dir: Path, workers: int = 8) -> list[Path]:
    """Cuts each window into its own MP4 (``win-000.mp4`` …), in parallel processes.

    Returns:
        The files, in the order of ``wins``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"win-{i:03d}.mp4" for i in range(len(wins))]
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_cut_one, [str(w.clip) for w in wins], [w.start_s for w in wins], [str(p) for p in paths]))
    return paths


async def send_batch(url: str, bodies: list[dict[str, Any]], route: str) -> list[RequestRecord]:
    """Sends every body at once with loadtest's client; raises on the first failed request."""
    recs = await batch_json(url, bodies, route=route, request_timeout_s=900)
    if bad := [r for r in recs if not r.ok]:
        raise RuntimeError(f"{len(bad)} of {len(recs)} requests failed; first: HTTP {bad[0].status} "
                           f"{bad[0].error_type}: {bad[0].error_message}")
    return recs


def batch_figures(recs: list[RequestRecord]) -> tuple[float, int, list[float], list[float]]:
    """(wall s, completion tokens, TTFT s, e2e s) of one batch, times from its first send."""
    t0 = min(r.sent_s for r in recs)
    ttft = [float("nan") if r.first_token_s is None else r.first_token_s - t0 for r in recs]
    e2e = [r.done_s - t0 for r in recs if r.done_s is not None]
    if len(e2e) < len(recs):  # send_batch raises on an unfinished request first
        raise ValueError(f"{len(recs) - len(e2e)} of {len(recs)} requests never finished")
    return max(e2e), sum(r.completion_tokens or 0 for r in recs), ttft, e2e


def run_figures(
    name: str, wall_s: float, n: int, out_tokens: int, ttft: list[float], e2e: list[float]
) -> dict[str, Any]:
    """The figures of one timed run of ``n`` clips: clips/s, output tokens/s, TTFT and end-to-end summaries."""
    return {
        "clips": n,
        "wall_s": round(wall_s, 3),
        "clips_per_s": round(n / wall_s, 4),
        "output_tokens_per_s": round(out_tokens / wall_s, 1),
        "ttft_s": summary(ttft),
        "e2e_s": summary(e2e),
    }


def window_files(args: argparse.Namespace) -> list[Path]:
    """The run's window files (cut once; reused when ``--windows-dir`` already holds them)."""
    import av

    n = args.window_count or 1 + args.single + args.inflight
    out = Path(args.windows_dir)
    files = [out / f"win-{i:03d}.mp4" for i in range(n)]
    if all(f.exists() for f in files):
        return files
    with av.open(args.clip) as c:
        duration = c.duration / 1e6
    return cut_window_files(windows(Path(args.clip).resolve(), n, duration), out)


def decode_frames(path: Path) -> np.ndarray:
    """The frames of one whole window file, decoded by the project's decoder (4 fps, Cosmos pixel budget):
    ``(T, H, W, 3) uint8`` RGB.

    Raises:
        ServeAppError: the decoder's refusal of the file.
    """
    from serve_app.config import DecodeConfig, LimitsConfig
    from serve_app.decode.clip import decode_clip
    from serve_app.protocol import FrameSampling

    clip = decode_clip(path, FrameSampling(fps=4.0, max_frames=128), DecodeConfig(), LimitsConfig())
    if clip.frames is None:  # only a clip handed to the model has dropped its frames
        raise ValueError(f"{path.name}: the decoder returned no frames")
    return clip.frames
