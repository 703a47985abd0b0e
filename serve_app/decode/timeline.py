"""The player's timeline of a video stream, and the gaps a decode leaves in a sampling grid.

Pure functions over what the demux pass saw (no decoding), shared by the
decoder and the differential harness (:mod:`benchmarks.decode_truth`).

**The timeline rule.** Times are seconds from the first picture a player
presents: the earliest presentation timestamp among the video packets the
container does not discard (an MP4 edit list marks the pictures before its
start as discarded; FFmpeg's decoder never outputs them). A clip whose
timestamps start at 3600 s (a segmenter that does not reset time) starts at
0 s here, so a non-zero start never counts towards a duration or a limit.
Pictures that cannot be decoded (a recording that starts mid-GOP) keep their
place on the timeline and show up as a gap. Two more cases a player
handles:

* timestamps that never advance (some recorders write one time for every
  frame): pictures are timed by their order at the declared frame rate, with
  a warning;
* timestamps that jump back by more than :data:`DISCONTINUITY_S` (two
  recordings concatenated byte for byte): the later part continues after the
  earlier one, as FFmpeg's command line does for MPEG-TS discontinuities.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from serve_app.decode.sampling import FrameGrid
from serve_app.protocol import Gap

#: Containers with no trustworthy presentation timestamps: frame i shows at i / rate (FFmpeg
#: format names; the decoder times these by frame index, and the load tester re-encodes windows
#: of them instead of cutting packets).
INDEX_TIMED_FORMATS = frozenset({"avi", "h264", "hevc", "m4v", "mjpeg"})

#: A timestamp this far (s) behind the previous one in decode order starts a new recording.
DISCONTINUITY_S = 1.0


def gap_message(gap: Gap) -> str:
    """The warning text of a gap (time range and reason)."""
    return f"no frames for {gap.start_s:.2f}–{gap.end_s:.2f} s ({gap.targets} sampling targets): {gap.reason}"


@dataclasses.dataclass
class Timeline:
    """Per-packet presentation times of the video stream, decode order.

    Attributes:
        times_s: ``(N,) float64`` seconds on the player's timeline; NaN for
            pictures the container discards (before an edit list's start).
        origin: stream timestamp (time-base units) of 0 s; None when index-timed.
        index_timed: times come from frame order at a nominal rate.
        discontinuous: a backwards jump was unwrapped (see module docstring).
        warnings: what the timeline had to assume.
    """

    times_s: np.ndarray
    origin: int | None
    index_timed: bool
    discontinuous: bool = False
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def presented(self) -> np.ndarray:
        """``(M,) float64`` sorted times of the pictures a player shows (discarded ones left out)."""
        t = self.times_s[~np.isnan(self.times_s)]
        return np.sort(t)


def build_timeline(
    pts: list[int | None],
    dts: list[int | None],
    discard: list[bool],
    time_base: float,
    rate: float | None,
    index_timed: bool,
) -> Timeline:
    """The player's timeline from demuxed packet timestamps (decode order).

    Args:
        pts, dts: per packet, stream time-base units (None where missing).
        discard: per packet, the container discards the picture (edit list).
        time_base: seconds per timestamp unit (0 when unknown).
        rate: nominal frame rate (frames/s) for index timing; 25 when unknown.
        index_timed: the container's timestamps are not trusted (AVI, raw streams).
    """
    n = len(pts)
    step = 1.0 / (rate or 25.0)
    keep = ~np.asarray(discard, dtype=bool) if n else np.zeros(0, dtype=bool)
    if index_timed or not time_base or n == 0 or any(x is None for x, k in zip(pts, keep, strict=True) if k):
        return Timeline(np.arange(n) * step, None, True)
    p = np.asarray([0 if x is None else x for x in pts] if None in pts else pts, dtype=np.int64)
    shown = p[keep]
    distinct = len(np.unique(shown))
    if n >= 2 and distinct < max(2, len(shown) // 2):
        rate_note = f"{rate:g} fps" if rate else "25 fps (the stream declares none)"
        return Timeline(
            np.arange(n) * step,
            None,
            True,
            warnings=[
                f"the clip's timestamps do not advance ({len(shown)} pictures carry {distinct} distinct times): "
                f"frames are timed by their order at the declared {rate_note}"
            ],
        )
    if None in dts:
        dts = [x if x is not None else (pts[i] if pts[i] is not None else 0) for i, x in enumerate(dts)]
    d = np.asarray(dts, dtype=np.int64)
    # Unwrap backwards jumps of the decode timestamps: each jump starts a new recording.
    base = (p - p[0]) * time_base
    offset = np.zeros(n, dtype=np.float64)
    jump = DISCONTINUITY_S / time_base
    discontinuous = bool(n > 1 and (np.diff(d) < -jump).any())
    if discontinuous:
        cur, run_max, last_d = 0.0, float(base[0]), d[0]
        for i in range(1, n):
            if d[i] < last_d - jump:
                cur = run_max + step - float(base[i])  # the new part starts one frame after the old one ends
            offset[i] = cur
            run_max = max(run_max, float(base[i]) + cur)
            last_d = d[i]
    raw = np.where(keep, base + offset, np.nan)
    origin_t = float(np.nanmin(raw)) if keep.any() else 0.0
    times = raw - origin_t
    origin = int(p[0]) + round(origin_t / time_base)
    warnings = []
    if discontinuous:
        warnings.append("the clip's timestamps jump back (recordings joined end to end): later parts are placed "
                        "after earlier ones")  # fmt: skip
    return Timeline(times, origin, False, discontinuous, warnings)


def find_gaps(
    grid: FrameGrid,
    kept_s: np.ndarray,
    picture_s: np.ndarray,
    first_decoded_s: float | None,
    keyframe_s: np.ndarray,
    errors: list[tuple[float, str]],
) -> list[Gap]:
    """Grid targets whose nearest returned frame is more than one step away, grouped, with a reason.

    Args:
        grid: the sampling grid of the request.
        kept_s: times (s) of the frames returned.
        picture_s: times (s) of every picture the demux pass saw (presented ones).
        first_decoded_s: time of the first picture the decoder produced, if any.
        keyframe_s: times of the keyframes the demux pass saw.
        errors: ``(time_s, message)`` of decode errors.
    """
    targets = grid.start_s + np.arange(grid.count) * grid.step_s
    kept = np.sort(np.asarray(kept_s, dtype=np.float64))
    if len(kept):
        pos = np.searchsorted(kept, targets)
        left = np.abs(targets - kept[np.clip(pos - 1, 0, len(kept) - 1)])
        right = np.abs(kept[np.clip(pos, 0, len(kept) - 1)] - targets)
        dist = np.minimum(left, right)
    else:
        dist = np.full(len(targets), np.inf)
    far = dist > grid.step_s + 1e-6
    gaps: list[Gap] = []
    k = 0
    pics = np.sort(np.asarray(picture_s, dtype=np.float64))
    tol = grid.tolerance_s
    while k < grid.count:
        if not far[k]:
            k += 1
            continue
        j = k
        while j + 1 < grid.count and far[j + 1]:
            j += 1
        a, b = float(targets[k]), float(targets[j])
        gaps.append(Gap(a, b, j - k + 1, _reason(a - tol, b + tol, pics, first_decoded_s, keyframe_s, errors)))
        k = j + 1
    return gaps


def _reason(a: float, b: float, pics: np.ndarray, first_decoded_s: float | None, keys: np.ndarray,
            errors: list[tuple[float, str]]) -> str:  # fmt: skip
    inside = int(np.searchsorted(pics, b, side="right") - np.searchsorted(pics, a, side="left"))
    if inside == 0:
        return "the file holds no pictures there (its timestamps skip this span)"
    keys = np.sort(np.asarray(keys, dtype=np.float64))
    first_key = float(keys[0]) if len(keys) else None
    damaged = [(t, m) for t, m in errors if t <= b and (first_key is None or t >= first_key - 1e-6)]
    if damaged:
        t, m = damaged[-1]
        return f"the {inside} pictures there could not be decoded (damaged data at {t:.2f} s: {m})"
    if first_key is None:
        return f"the {inside} pictures there cannot be decoded: the stream has no keyframe"
    if first_key > a and (first_decoded_s is None or first_decoded_s >= first_key - 1e-6):
        return (
            f"the {inside} pictures there cannot be decoded: the stream's first keyframe is at "
            f"{first_key:.2f} s (the recording starts mid-GOP or was cut before a keyframe)"
        )
    return f"the {inside} pictures there could not be decoded"
