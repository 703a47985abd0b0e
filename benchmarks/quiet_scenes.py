"""Bench: quiet-scene skipping on real fixed-camera clips with hand labels, and on generated scenes.

Each clip is read as the stream worker reads a camera: PyAV decode, frames kept on the 4-fps
grid by :class:`serve_app.cameras.windows.WindowCutter`, held as the model-size YUV 4:2:0 frames
of :class:`serve_app.cameras.held.HeldFrames` (``configs/cpu.yaml``'s pixel budget), cut into
10-s windows; :class:`serve_app.cameras.scene_change.QuietScenePolicy` then decides per window, as a
stream with ``skip_unchanged`` would (every window it sends counts as answered). Per clip and
threshold: windows, windows skipped, labelled-motion windows skipped (target 0), and the
measure's CPU time per window against the frames' decode+scale time.

    python -m benchmarks.quiet_scenes --out results/cpu/quiet_scenes/quiet_scenes.json
    python -m benchmarks.quiet_scenes --write-clip quiet.mp4   # the generated quiet scene as an H.264 camera clip

Labels: ``results/cpu/quiet_scenes/labels.json`` (made by hand before thresholds were tried).
Generated scenes (labels by construction): noise + a 40 % light ramp (no motion), and the same
with a person walking in at 33 s (motion in window 3 only).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import av
import numpy as np

from benchmarks.result import command, machine, write_result
from serve_app.cameras.held import HeldFrames
from serve_app.cameras.scene_change import THRESHOLD, QuietScenePolicy, held_luma, synthetic_scene
from serve_app.cameras.windows import Window, WindowCutter
from serve_app.config import AppConfig

VIDEOS = Path(__file__).resolve().parents[2] / "shared" / "data" / "videos" / "real"
LABELS = Path(__file__).resolve().parents[1] / "results" / "cpu" / "quiet_scenes" / "labels.json"
WINDOW_S, FPS = 10.0, 4.0


def clip_windows(path: Path, config: AppConfig) -> tuple[list[Window[np.ndarray]], float]:
    """The complete 10-s windows of a clip as the stream worker holds them; and decode+scale seconds."""
    held = HeldFrames(round(WINDOW_S * FPS), config)
    cutter: WindowCutter[np.ndarray] = WindowCutter(WINDOW_S, WINDOW_S, FPS, held)
    windows: list[Window[np.ndarray]] = []
    t0 = time.perf_counter()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            if frame.time is not None:  # presentation time, seconds
                windows += cutter.push(frame.time, frame, wall=0.0)
    return windows, time.perf_counter() - t0


def run_policy(
    lumas: list[list[np.ndarray]], threshold: float, max_skip_s: float
) -> tuple[list[dict[str, Any]], float]:
    """Runs the policy over windows of grey frames; per-window decisions and the measure's seconds."""
    policy = QuietScenePolicy(threshold, max_skip_s)
    out, spent_s = [], 0.0
    for k, frames in enumerate(lumas):
        t0 = time.perf_counter()
        grids = policy.grids(frames)
        d = policy.decide(k, (k + 1) * WINDOW_S, grids)
        spent_s += time.perf_counter() - t0
        if not d.skip:
            policy.answered(k, (k + 1) * WINDOW_S, grids[-1])
        out.append({"window": k, "skip": d.skip, "reason": d.reason, "score": round(d.change.score, 4),
                    "vs_reference": round(d.change.vs_reference, 4), "motion": round(d.change.motion, 4)})
    return out, spent_s


def report(name: str, lumas: list[list[np.ndarray]], motion: set[int], thresholds: list[float],
           max_skip_s: float, decode_s: float | None) -> dict[str, Any]:
    rows = {}
    for threshold in thresholds:
        decisions, spent_s = run_policy(lumas, threshold, max_skip_s)
        skipped = [d["window"] for d in decisions if d["skip"]]
        rows[str(threshold)] = {
            "windows": len(decisions), "skipped": len(skipped), "skipped_windows": skipped,
            "motion_windows_skipped": sorted(set(skipped) & motion),
            "measure_ms_per_window": round(1000 * spent_s / max(1, len(decisions)), 3),
            "decisions": decisions,
        }
    out: dict[str, Any] = {"clip": name, "labelled_motion": sorted(motion), "by_threshold": rows}
    if decode_s is not None:
        out["decode_and_scale_ms_per_window"] = round(1000 * decode_s / max(1, len(lumas)), 1)
    return out


def write_clip(path: Path, seconds: float = 120.0, fps: float = 10.0, size: tuple[int, int] = (768, 432),
               noise_sigma: float = 10.0, light_ramp: float = 0.4) -> Path:
    """Writes the generated quiet scene (:func:`synthetic_scene`: static texture, sensor noise, a light ramp,
    nobody) as an H.264 MP4 a stream can loop as a camera, at the real fixed-camera clip's size and rate
    (``intel_one-by-one-person-detection.mp4``: 768×432, 10 fps) so a window costs the model the same tokens.

    Args:
        path: output file (``.mp4``).
        seconds, fps: length (s) and frame rate (frames/s).
        size: ``(width, height)`` pixels (even).
        noise_sigma, light_ramp: as :func:`synthetic_scene`.

    Returns:
        ``path``.
    """
    frames = synthetic_scene(seconds, fps, size=size, noise_sigma=noise_sigma, light_ramp=light_ramp)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=int(fps))
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        stream.options = {"crf": "30", "preset": "veryfast"}
        for _, grey in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(grey, format="gray").reformat(format="yuv420p")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="results/cpu/quiet_scenes/quiet_scenes.json")
    p.add_argument("--videos", type=Path, default=VIDEOS)
    p.add_argument("--max-skip-s", type=float, default=60.0, help="fixed before measuring")
    p.add_argument("--thresholds", type=float, nargs="+", default=[0.005, THRESHOLD, 0.02, 0.03])
    p.add_argument("--write-clip", type=Path, help="only write the generated quiet scene (120 s) to this MP4")
    args = p.parse_args(argv)
    if args.write_clip:
        print(f"wrote {write_clip(args.write_clip)}")
        return 0
    labels = json.loads(LABELS.read_text())
    config = AppConfig()
    clips = []
    for name, label in labels["clips"].items():
        windows, decode_s = clip_windows(args.videos / name, config)
        lumas = [[held_luma(f) for f in w.frames] for w in windows]
        labelled = set(label["motion"]) | set(label["quiet"])
        assert labelled == set(range(len(windows))), f"{name}: labels cover {sorted(labelled)}, {len(windows)} windows"
        clips.append(report(name, lumas, set(label["motion"]), args.thresholds, args.max_skip_s, decode_s))
    for name, kwargs, motion in (
        ("generated: static, noise 10, light ramp +40 %", {"light_ramp": 0.4, "noise_sigma": 10.0}, set()),
        ("generated: static, noise 10, light ramp +40 %, person at 33 s",
         {"light_ramp": 0.4, "noise_sigma": 10.0, "person_at_s": 33.0}, {3}),
    ):
        frames = synthetic_scene(120, FPS, **kwargs)  # type: ignore[arg-type]
        lumas = [[y for t, y in frames if k * WINDOW_S <= t < (k + 1) * WINDOW_S] for k in range(12)]
        clips.append(report(name, lumas, motion, args.thresholds, args.max_skip_s, None))
    summary = {
        str(t): {"windows": sum(c["by_threshold"][str(t)]["windows"] for c in clips),
                 "skipped": sum(c["by_threshold"][str(t)]["skipped"] for c in clips),
                 "motion_windows_skipped": sum(len(c["by_threshold"][str(t)]["motion_windows_skipped"]) for c in clips)}
        for t in args.thresholds
    }
    result = {"bench": "quiet_scenes", "command": command("benchmarks.quiet_scenes", argv), "machine": machine(),
              "window_s": WINDOW_S, "fps": FPS, "max_skip_s": args.max_skip_s, "default_threshold": THRESHOLD,
              "labels": str(LABELS.relative_to(LABELS.parents[3])), "summary": summary, "clips": clips}
    path = write_result(args.out, result)
    for t, s in summary.items():
        print(f"threshold {t}: {s['skipped']}/{s['windows']} windows skipped, "
              f"{s['motion_windows_skipped']} labelled-motion windows skipped")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
