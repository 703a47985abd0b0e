"""Decode bench: clip-seconds processed per CPU-second, the decoder against ``ffmpeg -threads 1 -i CLIP -f null -``.

Run from the project root (no Ray; one process, one core)::

    python -m benchmarks.decode --out results/decode_bench.json

For each clip, in one run, interleaved ``--repeats`` times:

* **decoder**: :func:`serve_app.decode.clip.decode_clip` on the clip's bytes (as an upload
  arrives) with 4-FPS sampling of the whole clip (``max_frames`` = the request limit, so
  the rate is not lowered) and the default pixel budget, resize and RGB conversion
  included; CPU time of this process (``time.process_time``: all threads) after one
  warm-up call, as in a long-lived replica.
* **ffmpeg**: Debian's ``ffmpeg -nostdin -v error -threads 1 -i CLIP -f null -`` fully
  decoding the file (audio too, as the command does); CPU time of the child
  (``RUSAGE_CHILDREN`` user + system), its process start-up included. The start-up alone
  (an ffmpeg run on a 1-frame lavfi input) is reported separately.
* **bounds** (same FFmpeg as the decoder, via PyAV, no conversion): a full decode, and a
  decode of only the reference pictures (``skip_frame=NONREF``): the least decoding any
  exact sampler must do, since kept frames depend on every reference picture before them
  (``ip_pictures_changed_without_b``: how many I/P pictures differ from the exact decode
  when B pictures, reference ones included, are skipped with ``skip_frame=BIDIR``; nonzero
  means P pictures predict from B references, so those cannot be skipped either).
  ``ffmpeg_cpu_s / refs_only_cpu_s`` is the best ratio any exact sampler could reach.
  ``refs_only_no_loop_filter`` adds ``skip_loop_filter=all`` (no deblocking, FFmpeg's
  fastest H.264 decode, *not* exact) with its luma PSNR against the exact pictures.

Throughput is ``clip duration / CPU seconds`` (medians over the repeats). With ``--baseline REV``
the decoder of git revision ``REV`` (its ``serve_app/`` extracted to a temporary folder and
imported as ``serve_app_baseline``) and the working tree's decoder are called alternately in
this process on the same clips (``baseline`` section: ``current / baseline`` clip-seconds per
CPU-second), so that a change is judged under the same machine load even when it is shared. Goals (issue 3):
≥ 2× ffmpeg on clips with B-frames, ≥ 1× on clips without, sampled timestamps within
0.125 s of the 4-FPS grid.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import av
import numpy as np

from benchmarks.cpu_time import child_cpu_s, cpu_summary, own_cpu_s
from benchmarks.decode_baseline import baseline_comparison
from benchmarks.decode_bounds import (
    describe_clip,
    ip_pictures_changed_without_b,
    loop_filter_psnr_db,
    pyav_decode_cpu_s,
)
from serve_app.config import DecodeConfig, LimitsConfig
from serve_app.decode.clip import decode_clip
from serve_app.protocol import DecodedClip, FrameSampling

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
#: Where clips are looked up, in order.
CLIP_DIRS = [ROOT / "tests" / "data", ROOT.parent / "shared" / "data" / "videos" / "real",
             ROOT.parent / "shared" / "data" / "videos" / "edge"]  # fmt: skip
#: The issue's clips: (file, has B-frames).
CLIPS = [
    ("intel_bottle-detection.mp4", True),
    ("vtest_h264_bframes.mp4", True),
    ("intel_car-detection.mp4", False),
    ("udacity_solidWhiteRight.mp4", False),
]
RESIZE_CLIP = "intel_car-detection.mp4"
FFMPEG = ["ffmpeg", "-nostdin", "-v", "error", "-threads", "1"]
GRID_TOLERANCE_S = 0.125


def find_clip(name: str, dirs: list[Path]) -> Path:
    """The first ``dirs/name`` that exists.

    Raises:
        FileNotFoundError: in none of the directories.
    """
    for d in dirs:
        if (d / name).is_file():
            return d / name
    raise FileNotFoundError(f"{name} not found in {', '.join(map(str, dirs))}")


def bench_clip(path: Path, has_b_frames: bool, repeats: int) -> dict[str, Any]:
    """Measures one clip (see the module docstring)."""
    data = path.read_bytes()
    dec, lim = DecodeConfig(), LimitsConfig()
    request = FrameSampling(fps=4.0, max_frames=lim.max_frames)
    decode_clip(data, request, dec, lim)  # warm-up
    dec_cpu, ff_cpu = [], []
    clip: DecodedClip | None = None
    for _ in range(repeats):
        t, clip = own_cpu_s(lambda: decode_clip(data, request, dec, lim))
        dec_cpu.append(t)
        ff_cpu.append(child_cpu_s([*FFMPEG, "-i", str(path), "-f", "null", "-"]))
    full = [pyav_decode_cpu_s(data, False) for _ in range(repeats)]
    refs = [pyav_decode_cpu_s(data, True) for _ in range(repeats)]
    no_lf = [pyav_decode_cpu_s(data, True, skip_loop_filter=True) for _ in range(repeats)]
    if clip is None:
        raise ValueError(f"repeats must be at least 1 (got {repeats})")
    ts = clip.timestamps_s
    k = np.round(ts * 4.0)
    deviation = float(np.max(np.abs(ts - k / 4.0)))
    dec_s, ff_s = statistics.median(dec_cpu), statistics.median(ff_cpu)
    refs_s = statistics.median(t for t, _ in refs)
    no_lf_s = statistics.median(t for t, _ in no_lf)
    ratio = ff_s / dec_s
    goal = 2.0 if has_b_frames else 1.0
    return {
        "clip": path.name,
        "has_b_frames": has_b_frames,
        "source": describe_clip(path),
        "duration_s": round(clip.duration_s, 3),
        "request": {"fps": request.fps, "max_frames": request.max_frames},
        "sampled": {
            "frames": len(ts),
            "frame_size": list(clip.frame_size),
            "max_grid_deviation_s": round(deviation, 4),
            "strictly_increasing": bool(np.all(np.diff(ts) > 0)),
            "pictures_decoded": clip.decoded_frames,
        },
        "decoder_cpu_s": cpu_summary(dec_cpu),
        "ffmpeg_cpu_s": cpu_summary(ff_cpu),
        "pyav_full_decode_cpu_s": round(statistics.median(t for t, _ in full), 4),
        "refs_only_decode_cpu_s": round(refs_s, 4),
        "refs_only_pictures": refs[0][1],
        "ip_pictures_changed_without_b": ip_pictures_changed_without_b(data) if has_b_frames else None,
        "clip_s_per_cpu_s": {"decoder": round(clip.duration_s / dec_s, 1), "ffmpeg": round(clip.duration_s / ff_s, 1)},
        "ratio_vs_ffmpeg": round(ratio, 2),
        "best_exact_ratio_vs_ffmpeg": round(ff_s / refs_s, 2),
        "refs_only_no_loop_filter": {
            "decode_cpu_s": round(no_lf_s, 4),
            "ratio_vs_ffmpeg": round(ff_s / no_lf_s, 2),
            "luma_psnr_db_vs_exact": loop_filter_psnr_db(data),
        },
        "goal_ratio": goal,
        "goal_met": bool(ratio >= goal and deviation <= GRID_TOLERANCE_S),
    }


def window_workload(path: Path, start_s: float, end_s: float, repeats: int) -> dict[str, Any]:
    """CPU per request of the service's reference workload: a 10-s window at 4 fps (40 frames) from an upload."""
    data = path.read_bytes()
    dec, lim = DecodeConfig(), LimitsConfig()
    request = FrameSampling(fps=4.0, max_frames=128, start_s=start_s, end_s=end_s)
    decode_clip(data, request, dec, lim)
    cpu = [own_cpu_s(lambda: decode_clip(data, request, dec, lim))[0] for _ in range(repeats)]
    clip = decode_clip(data, request, dec, lim)
    med = statistics.median(cpu)
    return {
        "clip": path.name,
        "window_s": [start_s, end_s],
        "frames": clip.num_frames,
        "frame_size": list(clip.frame_size),
        "cpu_s_per_request": round(med, 4),
        "requests_per_cpu_s": round(1.0 / med, 1),
    }


def resize_filters(path: Path, frames: int = 40) -> dict[str, Any]:
    """Cost (ms/frame) and fidelity of resizing ``frames`` decoded frames to the budget size, per swscale filter.

    Fidelity: PSNR (dB) against torch's antialiased bicubic resize of the full-size RGB
    frame (what qwen-vl-utils does to video frames). ``one_call_ms`` is the cost of a
    single scale-and-convert call straight to packed RGB24, for comparison with the
    two-step path the decoder uses.
    """
    import torch
    import torch.nn.functional as F
    from av.video.reformatter import VideoReformatter

    from serve_app.decode.frames import FrameStore

    with av.open(str(path)) as c:
        s = c.streams.video[0]
        decoded = list(itertools.islice(c.decode(s), frames * 5))[::5]
    probe = FrameStore(len(decoded), DecodeConfig().budget)
    probe.add(decoded[0], 0.0)
    w, h = probe._conv_size
    refs = []
    for f in decoded:
        x = torch.from_numpy(f.to_ndarray(format="rgb24")).permute(2, 0, 1)[None].float()
        y = F.interpolate(x, size=(h, w), mode="bicubic", antialias=True).clamp(0, 255).round()
        refs.append(y[0].permute(1, 2, 0).numpy())
    out: dict[str, Any] = {
        "clip": path.name, "from": [decoded[0].width, decoded[0].height], "to": [w, h], "filters": {}
    }
    for name in ("AREA", "BILINEAR", "BICUBIC", "FAST_BILINEAR"):
        scale, rgb, direct = VideoReformatter(), VideoReformatter(), VideoReformatter()

        def two_step(name: str = name, scale: Any = scale, rgb: Any = rgb) -> list[np.ndarray]:
            return [
                rgb.reformat(scale.reformat(f, width=w, height=h, interpolation=name, threads=1),
                             format="rgb24", threads=1).to_ndarray()
                for f in decoded
            ]  # fmt: skip

        def one_call(name: str = name, direct: Any = direct) -> list[np.ndarray]:
            return [direct.reformat(f, width=w, height=h, format="rgb24", interpolation=name, threads=1).to_ndarray()
                    for f in decoded]  # fmt: skip

        two_step(), one_call()  # warm-up
        t_two = min(own_cpu_s(two_step)[0] for _ in range(3))
        t_one = min(own_cpu_s(one_call)[0] for _ in range(3))
        mse = float(np.mean([np.mean((a.astype(np.float64) - r) ** 2) for a, r in zip(two_step(), refs, strict=True)]))
        out["filters"][name] = {
            "two_step_ms": round(t_two / len(decoded) * 1000, 3),
            "one_call_ms": round(t_one / len(decoded) * 1000, 3),
            "psnr_db_vs_bicubic_antialias": round(10 * np.log10(255**2 / max(mse, 1e-9)), 2),
        }
    return out


def bad_input_reject_ms(data_dir: Path, repeats: int) -> dict[str, Any]:
    """Wall milliseconds (median) until bad input is rejected, per kind."""
    bottle = find_clip("intel_bottle-detection.mp4", [data_dir, *CLIP_DIRS]).read_bytes()
    cases = {
        "empty": b"",
        "random_bytes_50kB": np.random.default_rng(0).bytes(50_000),
        "half_of_index_at_end_mp4": bottle[: len(bottle) // 2],
    }
    out = {}
    for name, data in cases.items():
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            try:
                decode_clip(data, FrameSampling(4, 128), DecodeConfig(), LimitsConfig())
            except Exception as e:  # noqa: BLE001 - every case must fail; the status is recorded
                status = getattr(e, "status", 500)
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = {"status": status, "reject_ms": round(statistics.median(times), 2)}
    return out


def machine() -> dict[str, Any]:
    """The measuring machine."""
    model = ""
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as cpuinfo:
        model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    ffmpeg_version = subprocess.run(["ffmpeg", "-version"], capture_output=True, text=True).stdout.split("\n")[0]
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyav": av.__version__,
        "pyav_ffmpeg": av.ffmpeg_version_info,
        "ffmpeg_cli": ffmpeg_version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; writes the result JSON and prints a summary table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="results/decode_bench.json", help="result file (JSON)")
    p.add_argument("--repeats", type=int, default=7, help="measurements per clip (medians are reported)")
    p.add_argument("--clip-dir", action="append", type=Path, help="extra directories to look for clips in")
    p.add_argument("--baseline", help="git revision whose decoder is measured against the working tree's")
    p.add_argument("--baseline-repeats", type=int, default=15, help="alternating calls per clip and decoder")
    p.add_argument("--only-baseline", action="store_true", help="run only the baseline comparison (updates the file)")
    args = p.parse_args(argv)
    dirs = [*(args.clip_dir or []), *CLIP_DIRS]
    if args.only_baseline:
        doc = json.loads(Path(args.out).read_text())
        load = [round(x, 2) for x in os.getloadavg()]
        ab = baseline_comparison(args.baseline, [find_clip(n, dirs) for n, _ in CLIPS], args.baseline_repeats)
        ab["load_average_at_start"], ab["load_average_at_end"] = load, [round(x, 2) for x in os.getloadavg()]
        doc["baseline"] = ab
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        for c in ab["clips"]:
            print(f"{c['clip']:34} {c['clip_s_per_cpu_s']} current/baseline {c['current_over_baseline']:.3f}")
        return 0
    info = machine()
    startup = statistics.median(
        child_cpu_s([*FFMPEG, "-f", "lavfi", "-i", "nullsrc=s=16x16:d=0.04", "-f", "null", "-"]) for _ in range(5)
    )
    results = [bench_clip(find_clip(name, dirs), b, args.repeats) for name, b in CLIPS]
    info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {
        "bench": "decode",
        "command": "python -m benchmarks.decode " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": info,
        "method": __doc__.split("\n\n", 2)[2].strip(),
        "ffmpeg_startup_cpu_s": round(startup, 4),
        "clips": results,
        "window_workload": [
            window_workload(find_clip("intel_car-detection.mp4", dirs), 10.0, 20.0, args.repeats),
            window_workload(find_clip("vtest_h264_bframes.mp4", dirs), 10.0, 20.0, args.repeats),
        ],
        "resize_filters": [resize_filters(find_clip(n, dirs)) for n in ("vtest_h264_bframes.mp4", RESIZE_CLIP)],
        "bad_input": bad_input_reject_ms(ROOT / "tests" / "data", max(3, args.repeats // 2)),
        "goals_met": all(r["goal_met"] for r in results),
    }
    if args.baseline:
        load = [round(x, 2) for x in os.getloadavg()]
        ab = baseline_comparison(args.baseline, [find_clip(n, dirs) for n, _ in CLIPS], args.baseline_repeats)
        ab["load_average_at_start"], ab["load_average_at_end"] = load, [round(x, 2) for x in os.getloadavg()]
        doc["baseline"] = ab
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{'clip':34} {'B':>2} {'dec cpu':>8} {'ffm cpu':>8} {'ratio':>6} {'best':>6} {'goal':>5} {'dev s':>6}")
    for r in results:
        print(
            f"{r['clip']:34} {'y' if r['has_b_frames'] else 'n':>2} {r['decoder_cpu_s']['median']:8.3f} "
            f"{r['ffmpeg_cpu_s']['median']:8.3f} {r['ratio_vs_ffmpeg']:6.2f} {r['best_exact_ratio_vs_ffmpeg']:6.2f} "
            f"{r['goal_ratio']:5.1f} {r['sampled']['max_grid_deviation_s']:6.3f}"
        )
    for w in doc["window_workload"]:
        print(f"10-s window of {w['clip']}: {w['cpu_s_per_request']:.3f} CPU-s per request")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    raise SystemExit(main())
