"""Damaged and oddly-timed variants of a clip, made with PyAV (no ffmpeg CLI needed).

Each mutation takes the bytes of a small H.264 MP4 (``tests/data/dashcam_320x180_h264.mp4``:
8.84 s, 25 fps, B-frames, keyframes every 2 s) and returns a new file as bytes, the way
such files arise in the field:

* truncated uploads (the first 25/50/75/95 % of the bytes);
* bytes flipped inside the first GOP's keyframe and inside a picture of a middle GOP;
* a damaged slice header in the first IDR picture (``slice_type`` rewritten to a non-intra
  type, so FFmpeg logs "A non-intra slice in an IDR NAL unit"): first slice only, and all slices;
* remuxes: with an MP4 edit list (playback starts 1 s in), with timestamps offset by 3 hours
  (Matroska and MPEG-TS), with every timestamp equal, with anamorphic pixels (H.264 VUI
  ``sample_aspect_ratio`` 4:3), with an SPS cropping window, with a 90° display matrix;
* two recordings concatenated byte for byte (MPEG-TS and MP4).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import av
from av.bitstream import BitStreamFilterContext

#: Seconds the edit-list remux hides at the start.
EDIT_START_S = 1.0
#: Seconds added to every timestamp by the offset remux (3 hours).
OFFSET_S = 3 * 3600


def _packets(data: bytes) -> tuple[list[tuple[int, int, bool]], Fraction]:
    """``(pos, size, keyframe)`` of each video packet (decode order) and the time base."""
    with av.open(io.BytesIO(data), "r") as c:
        s = c.streams.video[0]
        out = [(p.pos, p.size, bool(p.is_keyframe)) for p in c.demux(s) if p.size and p.pos is not None]
        if s.time_base is None:
            raise ValueError("the video stream has no time base")
        return out, s.time_base


def _remux(data: bytes, fmt: str, *, shift_s: float = 0.0, equal_ts: bool = False, bsf: str | None = None,
           rotation_ccw: int | None = None, options: dict[str, Any] | None = None) -> bytes:  # fmt: skip
    src = av.open(io.BytesIO(data), "r")
    ist = src.streams.video[0]
    sink = io.BytesIO()
    dst = av.open(sink, "w", format=fmt, options=options or {})
    ost = dst.add_stream_from_template(ist)
    if rotation_ccw:
        ost.set_display_rotation(rotation_ccw)
    filt = BitStreamFilterContext(bsf, ist, ost) if bsf else None
    shift = round(shift_s / ist.time_base) if ist.time_base else 0
    for p in src.demux(ist):
        if p.size == 0:
            continue
        packets = filt.filter(p) if filt else [p]
        for q in packets:
            if equal_ts:
                q.pts = q.dts = 0
            elif shift:
                q.pts = None if q.pts is None else q.pts + shift
                q.dts = None if q.dts is None else q.dts + shift
            q.stream = ost
            dst.mux(q)
    if filt:
        for q in filt.filter(None):
            q.stream = ost
            dst.mux(q)
    dst.close()
    src.close()
    return sink.getvalue()


def truncated(data: bytes, fraction: float) -> bytes:
    """The first ``fraction`` of the bytes (an upload cut off)."""
    return data[: int(len(data) * fraction)]


def flipped(data: bytes, gop: str) -> bytes:
    """64 bytes XOR-ed inside a picture: the first GOP's keyframe (``gop="first"``) or a
    reference picture in the middle of the clip (``gop="middle"``)."""
    packets, _ = _packets(data)
    if gop == "first":
        pos, size, _k = packets[0]
    else:
        pos, size, _k = max(packets[len(packets) // 2 : len(packets) // 2 + 8], key=lambda p: p[1])
    out = bytearray(data)
    start = pos + max(40, size // 3)
    for i in range(start, min(start + 64, pos + size)):
        out[i] ^= 0x5A
    return bytes(out)


def _read_ue(bits: list[int], i: int) -> tuple[int, int]:
    zeros = 0
    while bits[i] == 0:
        zeros += 1
        i += 1
    i += 1
    value = 0
    for _ in range(zeros):
        value = (value << 1) | bits[i]
        i += 1
    return (1 << zeros) - 1 + value, i


def idr_slice_header_damaged(data: bytes, all_slices: bool = False) -> bytes:
    """The first IDR picture's slice header says "SP slice" (``slice_type`` 7 → 8, one bit):
    a non-intra slice in an IDR NAL unit, which FFmpeg's H.264 decoder rejects (ITU-T H.264
    §7.4.3). Length-prefixed (``avcC``, 4-byte) streams only.

    Raises:
        ValueError: no IDR slice with ``slice_type`` 2 or 7 in the first keyframe.
    """
    packets, _ = _packets(data)
    pos, size, _k = next(p for p in packets if p[2])
    out = bytearray(data)
    i, changed = pos, 0
    while i + 5 <= pos + size:
        n = int.from_bytes(out[i : i + 4], "big")
        if out[i + 4] & 0x1F == 5:
            bits = [(b >> (7 - k)) & 1 for b in out[i + 5 : i + 13] for k in range(8)]
            _first_mb, j = _read_ue(bits, 0)
            slice_type, k = _read_ue(bits, j)
            # Flip the last bit of slice_type: ue(7) = 0001000 → ue(8) = 0001001 (I → SP, not intra),
            # ue(2) = 011 → ue(1) = 010 (I → B).
            bit = k - 1 if slice_type in (2, 7) else None
            if bit is not None:
                out[i + 5 + bit // 8] ^= 1 << (7 - bit % 8)
                changed += 1
                if not all_slices:
                    break
        i += 4 + n
    if not changed:
        raise ValueError("no I slice found in the first IDR picture")
    return bytes(out)


def concatenated(data: bytes, fmt: str) -> bytes:
    """Two recordings joined byte for byte (``cat a b``), remuxed to ``fmt`` first."""
    one = data if fmt == "mp4" else _remux(data, fmt)
    return one + one


#: name → (what it is, function of the base clip's bytes)
MUTATIONS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    **{
        f"truncated_{int(f * 100)}pct": (
            f"first {int(f * 100)} % of the bytes",
            functools.partial(truncated, fraction=f))
        for f in (0.25, 0.5, 0.75, 0.95)
    },
    "flipped_first_gop": ("64 bytes flipped in the first keyframe", lambda d: flipped(d, "first")),
    "flipped_middle_gop": ("64 bytes flipped in a picture of a middle GOP", lambda d: flipped(d, "middle")),
    "idr_slice_header_first_slice": (
        "first IDR picture: the first slice header says SP (non-intra)", idr_slice_header_damaged),
    "idr_slice_header_all_slices": (
        "first IDR picture: every slice header says SP (non-intra)", lambda d: idr_slice_header_damaged(d, True)),
    "edit_list_starts_1s_in": (
        "remuxed to MP4 with an edit list that starts playback 1 s in",
        lambda d: _remux(d, "mp4", shift_s=-EDIT_START_S)),
    "offset_3h.mkv": (
        "remuxed to Matroska with every timestamp 3 h later",
        lambda d: _remux(d, "matroska", shift_s=OFFSET_S)),
    "offset_3h.ts": (
        "remuxed to MPEG-TS with every timestamp 3 h later",
        lambda d: _remux(d, "mpegts", shift_s=OFFSET_S)),
    "concatenated.ts": ("two MPEG-TS recordings joined byte for byte", lambda d: concatenated(d, "mpegts")),
    "concatenated.mp4": ("two MP4 recordings joined byte for byte", lambda d: concatenated(d, "mp4")),
    "all_timestamps_equal.mkv": (
        "remuxed to Matroska with every timestamp 0",
        lambda d: _remux(d, "matroska", equal_ts=True)),
    "anamorphic_4to3": (
        "H.264 sample aspect ratio set to 4:3 (anamorphic pixels)",
        lambda d: _remux(d, "mp4", bsf="h264_metadata=sample_aspect_ratio=4/3")),
    "sps_crop_window": (
        "H.264 cropping window of 16 px right and 24 px bottom (of the 320x192 coded picture)",
        lambda d: _remux(d, "mp4", bsf="h264_metadata=crop_right=16:crop_bottom=24")),
    "display_rotation_90": ("MP4 display matrix: rotate 90° clockwise", lambda d: _remux(d, "mp4", rotation_ccw=-90)),
}  # fmt: skip
