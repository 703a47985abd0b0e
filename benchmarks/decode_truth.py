"""Differential decode harness: the service's decode against a plain full PyAV decode, input by input.

Run from the project root (no Ray; one process)::

    python -m benchmarks.decode_truth --out results/decode_truth.json

Inputs: every clip in ``tests/data/`` (the handed bug cases included), the mutated variants
of ``tests/data/dashcam_320x180_h264.mp4`` that :mod:`benchmarks.mutations` makes, and,
with ``--shared`` (on by default for the script), the real clips of
``../shared/data/videos/`` when that folder exists.

For each input, two requests: the whole clip, and a window over 30–60 % of it, both at
4 FPS. The **reference** is a plain decode (:func:`plain_decode`): every packet sent to
FFmpeg's decoder, errors skipped, every output frame kept, timed on the player's timeline
by its own code (first non-discarded packet = 0 s; backwards jumps unwrapped frame by
frame; frame order at the declared rate where timestamps do not advance or the container
has none). It runs on one decoding thread, as the service does: the pictures FFmpeg's
error concealment makes for damaged data depend on the threading; pictures shown after
damage and before the next clean keyframe are marked *concealed* and their content is not
compared (their timing is). The **verdict** is ``ok`` when all of these hold:

* no 500: the service returns frames or a 4xx :class:`serve_app.errors.ServeAppError`;
  a 4xx only where the plain decode yields fewer than 2 frames in the window;
* every grid target the plain decode can fill (a plain frame within half a step) is
  filled by the service, or its nearest returned frame is at most one step away, or a
  ``gaps`` entry (also in ``warnings``) covers it;
* each returned timestamp is within half a step of a frame the plain decode shows, and
  its picture is that frame (16×16 grey thumbnails, mean absolute difference ≤
  :data:`CONTENT_MAD_MAX` grey levels);
* the displayed geometry matches: source size (sample aspect ratio and display rotation
  applied, cropping window as FFmpeg applies it) within 1 pixel, and the output frames'
  aspect within 12 % of it (the 28-pixel rounding of the model's frame size);
* decoding took less than the decode time limit and at most :data:`PEAK_MB_MAX` MiB of
  Python-tracked memory (tracemalloc: the frame arrays).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import logging
import math
import os
import platform
import sys
import time
import tracemalloc
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import av
import numpy as np

from benchmarks.mutations import MUTATIONS
from benchmarks.result import finite
from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.clip import decode_clip
from serve_app.errors import ServeAppError
from serve_app.protocol import FrameSampling

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SHARED = ROOT.parent / "shared" / "data" / "videos"
MUTATION_BASE = DATA / "dashcam_320x180_h264.mp4"
VIDEO_SUFFIXES = {".mp4", ".mkv", ".webm", ".ts", ".avi", ".mov"}
#: Mean absolute difference (grey levels of 255) above which a returned frame is not the plain frame.
CONTENT_MAD_MAX = 6.0
#: A returned frame fails when a plain frame at least FAR_S away matches it better than
#: ``(MAD at its own time - CONTENT_FAR_SLACK) / CONTENT_FAR_RATIO`` (the wrong moment).
FAR_S = 1.0
CONTENT_FAR_RATIO = 1.5
CONTENT_FAR_SLACK = 1.0
#: Largest Python-tracked allocation during one decode (MiB).
PEAK_MB_MAX = 256.0
#: Containers with no trustworthy presentation timestamps (as the service treats them).
_INDEX_TIMED = {"avi", "h264", "hevc", "m4v", "mjpeg"}
FPS = 4.0
MAX_FRAMES = 512
THUMB = 16


@dataclasses.dataclass
class Reference:
    """A plain full decode: frame times (s, player's timeline), thumbnails, displayed size."""

    times_s: np.ndarray
    thumbs: np.ndarray  # (N, 16, 16) float32 grey, displayed orientation
    display_size: tuple[int, int] | None
    errors: int
    concealed: np.ndarray  # (N,) bool: shown after damaged data, before a clean keyframe (error concealment)


def plain_decode(data: bytes) -> Reference | None:
    """Decodes every packet of the first video stream with FFmpeg's defaults, past errors.

    Returns None when FFmpeg cannot open the input or it has no video stream.
    """
    level = av.logging.get_level()
    pylog = logging.getLogger("libav")
    was = pylog.level
    pylog.setLevel(logging.CRITICAL + 1)  # FFmpeg's messages are read (av.logging.Capture), not printed
    av.logging.set_level(av.logging.ERROR)
    try:
        return _plain_decode(data)
    finally:
        av.logging.set_level(level)
        pylog.setLevel(was)


def _plain_decode(data: bytes) -> Reference | None:  # noqa: C901 - the reference decode: one loop, a branch per FFmpeg edge case it mirrors
    try:
        c = av.open(io.BytesIO(data), "r")
    except (av.error.FFmpegError, ValueError, OSError):
        return None
    with c:
        vids = [s for s in c.streams.video if not (s.disposition & av.stream.Disposition.attached_pic)]
        if not vids:
            return None
        s = vids[0]
        # One decoding thread: the pictures FFmpeg's error concealment makes depend on the threading.
        s.codec_context.thread_count = 1
        s.codec_context.thread_type = "SLICE"
        tb = float(s.time_base) if s.time_base else 0.0
        rate = float(s.average_rate or s.guessed_rate or 25)
        origin: int | None = None
        frames: list[tuple[int | None, np.ndarray, bool]] = []
        errors = 0
        size = first = None
        damaged = False  # since the last decode error or corrupt picture, until a clean keyframe

        def take(out: Iterable[av.VideoFrame], hurt: bool = False) -> None:
            nonlocal size, first, damaged
            for f in out:
                if size is None:
                    sar = s.sample_aspect_ratio or s.codec_context.sample_aspect_ratio
                    w = f.width * float(sar) if sar and sar.numerator > 0 else f.width
                    rot = round(f.rotation or 0) % 180
                    size = (round(f.height), round(w)) if rot == 90 else (round(w), f.height)
                    first = (f.width, f.height)
                if f.is_corrupt:
                    damaged = True
                elif f.key_frame and not hurt:
                    damaged = False
                if (f.width, f.height) == first:
                    g = _grey(f.reformat(width=4 * THUMB, height=4 * THUMB, format="rgb24").to_ndarray())
                    g = g.reshape(THUMB, 4, THUMB, 4).mean(axis=(1, 3))
                else:  # a new frame size: fitted into the first one with its shape kept (black bars)
                    assert first is not None  # set with the first frame's size
                    a, big = (f.width / f.height) / (first[0] / first[1]), 4 * THUMB
                    fw, fh = (big, max(1, round(big / a))) if a > 1 else (max(1, round(big * a)), big)
                    small = _grey(f.reformat(width=fw, height=fh, format="rgb24").to_ndarray())
                    g = np.zeros((big, big), np.float32)
                    g[(big - fh) // 2 : (big - fh) // 2 + fh, (big - fw) // 2 : (big - fw) // 2 + fw] = small
                    g = g.reshape(THUMB, 4, THUMB, 4).mean(axis=(1, 3))
                k = round(-(f.rotation or 0) / 90.0) % 4  # FFmpeg's angle is counter-clockwise
                frames.append((f.pts, np.rot90(g, k=-k) if k else g, damaged))

        try:
            for p in c.demux(s):
                if p.size == 0:
                    continue
                ts = p.pts if p.pts is not None else p.dts
                if ts is not None and not p.is_discard:
                    origin = ts if origin is None else min(origin, ts)
                try:
                    with av.logging.Capture() as logs:
                        out = s.codec_context.decode(p)
                    hurt = any(level <= av.logging.ERROR for level, _name, _msg in logs)
                    damaged = damaged or hurt  # FFmpeg reported damage: this picture and its dependants are concealed
                    take(out, hurt)
                except av.error.FFmpegError:
                    errors += 1
                    damaged = True
            take(s.codec_context.decode(None))
        except av.error.FFmpegError:
            errors += 1
    pts = [f[0] for f in frames]
    if c.format.name in _INDEX_TIMED or not tb or origin is None or any(p is None for p in pts) or (
        len(pts) > 1 and len(set(pts)) < len(pts) // 2
    ):
        times = np.arange(len(frames)) / rate
    else:
        times = np.empty(len(frames))
        off, last = 0.0, -math.inf
        for i, ts_i in enumerate(pts):
            assert ts_i is not None and origin is not None  # else the branch above (index timing) ran
            t = (ts_i - origin) * tb + off
            if t < last - 1.0:  # a second recording: continue after the first
                off += last + 1.0 / rate - t
                t = last + 1.0 / rate
            times[i] = t
            last = max(last, t)
    thumbs = np.stack([f[1] for f in frames]) if frames else np.zeros((0, THUMB, THUMB), np.float32)
    return Reference(times, thumbs, size, errors, np.asarray([f[2] for f in frames], dtype=bool))


def _grey(rgb: np.ndarray) -> np.ndarray:
    """``(H, W, 3) uint8`` RGB → ``(H, W) float32`` BT.601 luma."""
    return rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)


def _thumb(img: np.ndarray) -> np.ndarray:
    """``(H, W, 3) uint8`` RGB → 16×16 grey (BT.601 luma, block means) as the reference's."""
    grey = _grey(img)
    h, w = grey.shape
    ys = (np.arange(THUMB + 1) * h) // THUMB
    xs = (np.arange(THUMB + 1) * w) // THUMB
    return np.array([[grey[ys[i] : ys[i + 1], xs[j] : xs[j + 1]].mean() for j in range(THUMB)] for i in range(THUMB)])


def check(name: str, data: bytes, ref: Reference | None, start_s: float | None, end_s: float | None) -> dict[str, Any]:  # noqa: C901 - a flat list of truth rules, one branch each, reported together
    """One request of one input: the service's decode against the reference. Returns the report row."""
    dec, lim = DecodeConfig(), LimitsConfig()
    window = None if start_s is None or end_s is None else [round(start_s, 3), round(end_s, 3)]
    row: dict[str, Any] = {"window": window, "problems": []}
    probs = row["problems"]
    tracemalloc.start()
    t0 = time.perf_counter()
    clip = err = None
    try:
        clip = decode_clip(data, FrameSampling(FPS, MAX_FRAMES, start_s, end_s), dec, lim)
    except ServeAppError as e:
        err = e
    except Exception as e:  # noqa: BLE001 - a 500 is what the harness is looking for
        probs.append(f"500: {type(e).__name__}: {e}")
    wall = time.perf_counter() - t0
    peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    row.update(wall_s=round(wall, 3), peak_mb=round(peak_mb, 1))
    if wall > dec.timeout_s:
        probs.append(f"took {wall:.1f} s (limit {dec.timeout_s} s)")
    if peak_mb > PEAK_MB_MAX:
        probs.append(f"peak memory {peak_mb:.0f} MiB over {PEAK_MB_MAX:.0f} MiB")
    a = start_s or 0.0
    ref_t = np.zeros(0) if ref is None else ref.times_s
    in_win = (ref_t >= a - 0.5 / FPS) & (ref_t < (math.inf if end_s is None else end_s))
    row["plain_frames"] = int(in_win.sum())
    if err is not None:
        row.update(status=err.status, error=err.message)
        if err.status >= 500:
            probs.append(f"{err.status}: {err.message}")
        elif row["plain_frames"] >= 2:
            probs.append(f"refused ({err.status}) although the plain decode shows {row['plain_frames']} frames")
        return row
    if clip is None:
        return row
    ts = np.asarray(clip.timestamps_s)
    step = 1.0 / clip.fps
    tol = step / 2 + 1e-3
    row.update(status=200, frames=len(ts), fps=round(clip.fps, 4), duration_s=round(clip.duration_s, 3),
               decode_path=getattr(clip, "decode_path", None), warnings=clip.warnings,
               source_size=[clip.source_width, clip.source_height],
               frame_size=list(clip.frame_size))  # fmt: skip
    if ref is None or len(ref_t) == 0:
        return row
    end = clip.duration_s if end_s is None else min(end_s, max(clip.duration_s, float(ref_t.max()) + step))
    end = max(end, float(ref_t.max()) + 1.0 / 25 if end_s is None else end)
    targets = a + np.arange(max(0, math.ceil((end - a) * clip.fps - 1e-9))) * step
    near_ref = _nearest_dist(ref_t, targets)
    near_svc = _nearest_dist(ts, targets)
    fillable = near_ref <= tol
    filled = near_svc <= tol
    covered = np.zeros(len(targets), bool)
    for g in getattr(clip, "gaps", []):
        covered |= (targets >= g.start_s - tol) & (targets <= g.end_s + tol)
    lost = fillable & ~filled & (near_svc > step + 1e-6) & ~covered
    row.update(targets=len(targets), plain_fillable=int(fillable.sum()), filled=int((fillable & filled).sum()),
               missed_within_one_step=int((fillable & ~filled & (near_svc <= step + 1e-6)).sum()),
               missed_with_warning=int((fillable & ~filled & covered).sum()))  # fmt: skip
    if lost.any():
        probs.append(f"{int(lost.sum())} targets the plain decode fills are missing without a warning "
                     f"(first at {targets[lost][0]:.2f} s)")  # fmt: skip
    # Each returned frame: on the plain timeline, and the same picture.
    idx = np.clip(np.searchsorted(ref_t, ts), 1, max(1, len(ref_t) - 1))
    nearest = np.where(np.abs(ref_t[idx - 1] - ts) <= np.abs(ref_t[np.minimum(idx, len(ref_t) - 1)] - ts), idx - 1,
                       np.minimum(idx, len(ref_t) - 1)) if len(ref_t) > 1 else np.zeros(len(ts), int)  # fmt: skip
    dev = np.abs(ref_t[nearest] - ts)
    row["max_timestamp_deviation_s"] = round(float(dev.max()), 4) if len(dev) else 0.0
    if len(dev) and dev.max() > tol:
        probs.append(f"timestamp {ts[int(dev.argmax())]:.3f} s is {dev.max():.3f} s from any plain frame")
    # A picture made by error concealment depends on the decoder's threading: its content is not compared.
    row["concealed_frames_not_compared"] = int(ref.concealed[nearest].sum()) if len(ts) else 0
    mads, worse = [], []
    for i, j in enumerate(nearest):
        if ref.concealed[j]:
            mads.append(0.0)
            continue
        assert clip.frames is not None  # decode_clip returns frames
        all_mad = np.abs(ref.thumbs - _thumb(clip.frames[i])).mean(axis=(1, 2))
        mads.append(float(all_mad[j]))
        far = np.abs(ref_t - ts[i]) >= FAR_S
        if far.any() and all_mad[j] > CONTENT_FAR_RATIO * float(all_mad[far].min()) + CONTENT_FAR_SLACK:
            worse.append(i)  # a picture from another moment matches it clearly better
    row["max_content_mad"] = round(max(mads), 2) if mads else 0.0
    bad = [i for i, m in enumerate(mads) if m > CONTENT_MAD_MAX]
    if bad:
        probs.append(f"{len(bad)} frames differ from the plain frame at their time (first at {ts[bad[0]]:.2f} s, "
                     f"MAD {mads[bad[0]]:.1f})")  # fmt: skip
    if worse:
        probs.append(f"{len(worse)} frames match a plain frame from another moment better than the one at their "
                     f"time (first at {ts[worse[0]]:.2f} s)")  # fmt: skip
    # Geometry as displayed.
    if ref.display_size:
        row["plain_display_size"] = list(ref.display_size)
        dw, dh = ref.display_size
        if abs(clip.source_width - dw) > 1 or abs(clip.source_height - dh) > 1:
            probs.append(f"source size {clip.source_width}x{clip.source_height}, plain decode shows {dw}x{dh}")
        out_aspect = clip.frame_size[0] / clip.frame_size[1]
        if abs(math.log(out_aspect / (dw / dh))) > 0.12:
            probs.append(f"output aspect {out_aspect:.3f}, displayed aspect {dw / dh:.3f}")
    return row


def _nearest_dist(times: np.ndarray, targets: np.ndarray) -> np.ndarray:
    if len(times) == 0:
        return np.full(len(targets), np.inf)
    s = np.sort(times)
    pos = np.searchsorted(s, targets)
    left = np.abs(targets - s[np.clip(pos - 1, 0, len(s) - 1)])
    right = np.abs(s[np.clip(pos, 0, len(s) - 1)] - targets)
    nearest: np.ndarray = np.minimum(left, right)
    return nearest


def evaluate(name: str, kind: str, data: bytes, description: str = "") -> dict[str, Any]:
    """Both requests (whole clip, 30–60 % window) of one input; ``verdict`` ok/fail."""
    ref = plain_decode(data)
    entry = {"input": name, "kind": kind, "bytes": len(data), "description": description,
             "plain_decode": None if ref is None else {"frames": len(ref.times_s), "errors": ref.errors,
             "first_s": round(float(ref.times_s[0]), 3) if len(ref.times_s) else None,
             "last_s": round(float(ref.times_s[-1]), 3) if len(ref.times_s) else None}}  # fmt: skip
    whole = check(name, data, ref, None, None)
    runs = [whole]
    dur = whole.get("duration_s") or (float(ref.times_s.max()) if ref is not None and len(ref.times_s) else 0.0)
    if dur >= 1.0:
        runs.append(check(name, data, ref, round(0.3 * dur, 2), round(0.6 * dur, 2)))
    entry["requests"] = runs
    entry["verdict"] = "ok" if not any(r["problems"] for r in runs) else "fail"
    return entry


def inputs(shared: bool) -> list[tuple[str, str, bytes, str]]:
    """``(name, kind, bytes, description)`` of every input: tests/data clips, mutations, shared clips."""
    out = []
    for p in sorted(DATA.iterdir()):
        if p.suffix.lower() in VIDEO_SUFFIXES:
            out.append((p.name, "tests/data", p.read_bytes(), ""))
    base = MUTATION_BASE.read_bytes()
    for name, (desc, fn) in MUTATIONS.items():
        out.append((f"{MUTATION_BASE.stem}:{name}", "mutation", fn(base), desc))
    if shared and SHARED.is_dir():
        for p in sorted(SHARED.glob("*/*")):
            if p.suffix.lower() in VIDEO_SUFFIXES:
                out.append((f"shared/{p.parent.name}/{p.name}", "shared", p.read_bytes(), ""))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/decode_truth.json"))
    ap.add_argument("--no-shared", action="store_true", help="leave out ../shared/data/videos")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    av.logging.set_level(None)
    t0 = time.time()
    entries = []
    for name, kind, data, desc in inputs(not args.no_shared):
        e = evaluate(name, kind, data, desc)
        entries.append(e)
        print(f"{e['verdict']:4} {name}", file=sys.stderr)
    report: dict[str, Any] = {
        "bench": "decode_truth",
        "command": "python -m benchmarks.decode_truth --out results/decode_truth.json",
        "method": __doc__,
        "machine": {
            "python": platform.python_version(),
            "pyav": av.__version__,
            "ffmpeg": ".".join(map(str, av.ffmpeg_version_info))
            if isinstance(av.ffmpeg_version_info, tuple)
            else str(av.ffmpeg_version_info),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
        "wall_s": round(time.time() - t0, 1),
        "summary": {
            "inputs": len(entries),
            "ok": sum(e["verdict"] == "ok" for e in entries),
            "fail": [e["input"] for e in entries if e["verdict"] != "ok"],
        },
        "inputs": entries,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(finite(report), indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    print(json.dumps(report["summary"]), file=sys.stderr)
    return 0 if not report["summary"]["fail"] else 1


if __name__ == "__main__":
    sys.exit(main())
