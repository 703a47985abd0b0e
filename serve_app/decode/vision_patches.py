"""The vision tower's input, made without the HF processor: normalised, patchified pixels of a clip (Ray-free).

Qwen2.5-VL's HF video processor turns ``(T, H, W, 3) uint8`` frames (already at a size the
processor keeps, H and W multiples of 28) into ``pixel_values_videos``: one row per 14×14×2
patch, ``3·2·14·14 = 1176`` values each, normalised with the CLIP mean and std, rows ordered
so that each 2×2 block of patches (one LLM token) is contiguous. vLLM's vision tower casts that
tensor to the model dtype (bf16) before its first layer. Doing this work in the CPU decode tier
(which scales out) instead of the model replica keeps it off the GPU the engine runs on; this
module makes exactly the bf16 values the tower would see (tests compare with the HF processor).
:func:`patchify_fields` does the same as torch ops on a GPU, for a model replica that receives
frames (``model.patchify: table``).

How: the normalised value of a pixel depends only on its channel and its 8-bit value, so one
``(3, 256)`` table of bf16 values replaces the float arithmetic; the patch reordering is one
transpose of the uint8 frames. bf16 has no numpy dtype: the values travel as their ``uint16``
bit patterns (:class:`serve_app.protocol.VisionPatches`), which Ray moves zero-copy, and are viewed as
``torch.bfloat16`` at the engine.

Sources: the layout and normalisation are those of transformers' ``Qwen2VLVideoProcessor``
(``_preprocess``: ``view(B, T/2, 2, C, H/28, 2, 14, W/28, 2, 14).permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)``;
fused rescale+normalise ``(x - 255·mean) / (255·std)`` in float32); the sizes and CLIP values are
in :mod:`serve_app.model_facts`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from typing import Any

import numpy as np

from serve_app.model_facts import (
    IMAGE_MEAN,
    IMAGE_STD,
    MAX_PIXELS,
    MIN_PIXELS,
    PATCH_SIZE,
    SPATIAL_MERGE_SIZE,
    TEMPORAL_PATCH_SIZE,
)
from serve_app.protocol import DecodedClip, VisionPatches

# Clips reach the replica in Ray's read-only shared memory; torch.from_numpy warns about that (once per
# process) although nothing here writes to them. Filtered for this module only, at import: a filter set
# per call (warnings.catch_warnings) is process-wide state and not safe in the preprocessing threads.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", module=__name__)

#: Values in one patch row: channels · frames per temporal patch · patch side² (3·2·14·14).
PATCH_VALUES = 3 * TEMPORAL_PATCH_SIZE * PATCH_SIZE * PATCH_SIZE


def video_input(patches: VisionPatches) -> dict[str, Any]:
    """A clip's patches as Qwen2.5-VL's processed video fields (torch tensors, no copy of the pixels).

    Returns:
        ``pixel_values_videos`` ``(N, 1176) bfloat16``, ``video_grid_thw`` ``(1, 3) int64``,
        ``second_per_grid_ts`` ``(1,) float32``: the keys vLLM's Qwen2.5-VL model reads.
    """
    import torch

    bits = torch.from_numpy(patches.bits)  # read-only input is fine: nothing writes to it
    return {
        "pixel_values_videos": bits.view(torch.bfloat16),
        "video_grid_thw": torch.tensor([patches.grid_thw], dtype=torch.int64),
        "second_per_grid_ts": torch.tensor([patches.second_per_grid_s], dtype=torch.float32),
    }


def as_patches(clip: DecodedClip) -> DecodedClip:
    """``clip`` with its frames turned into the vision tower's input (frames dropped; a copy).

    The time taken is added to ``decode_ms`` (it is the decode tier's work). A clip already
    in patches is returned as is.

    Raises:
        ValueError: frames the model's processor would resize (see :func:`patchify`).
    """
    if clip.frames is None:
        return clip
    t0 = time.perf_counter()
    patches = patchify(clip.frames, clip.fps)
    return dataclasses.replace(
        clip, frames=None, patches=patches, decode_ms=clip.decode_ms + (time.perf_counter() - t0) * 1000
    )


@functools.cache
def bf16_table(mean: tuple[float, ...] = IMAGE_MEAN, std: tuple[float, ...] = IMAGE_STD) -> np.ndarray:
    """``(3, 256) uint16``: bf16 bits of ``(v - 255·mean[c]) / (255·std[c])`` for each channel c and 8-bit v.

    Computed in float32 as transformers' fast processors do (mean and std scaled by 1/rescale_factor,
    then ``torchvision.transforms.functional.normalize``), rounded to bf16 as ``Tensor.to(bfloat16)`` rounds.
    """
    import torch

    values = torch.arange(256, dtype=torch.float32)
    m = torch.tensor(mean, dtype=torch.float32) * (1.0 / (1 / 255))
    s = torch.tensor(std, dtype=torch.float32) * (1.0 / (1 / 255))
    table = (values[None, :] - m[:, None]) / s[:, None]
    return table.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).copy()


def patchify(frames: np.ndarray, fps: float) -> VisionPatches:
    """Normalises and patchifies a clip the way Qwen2.5-VL's HF video processor does (bf16 result).

    Args:
        frames: ``(T, H, W, 3) uint8`` RGB; H and W multiples of 28 (the processor's size, so it
            would not resize). An odd T is padded with the last frame, as the processor pads.
        fps: sampling rate of ``frames``, frames/s (temporal positions: 2/fps s per frame pair).

    Returns:
        The :class:`VisionPatches` (``(T/2 · H/14 · W/14, 1176)`` bf16 bits).

    Raises:
        ValueError: a shape the processor would resize or refuse (not 4-D RGB uint8, H or W not a
            multiple of 28, an area outside ``MIN_PIXELS``..``MAX_PIXELS``, no frame), or ``fps`` ≤ 0.
    """
    frames = _checked(frames, fps)
    (gt, gh, gw), blocks_shape = _grid(frames.shape)
    rows = np.ascontiguousarray(frames.reshape(blocks_shape).transpose(_ROW_ORDER)).reshape(gt * gh * gw, 3, -1)
    table = bf16_table()
    bits = np.empty(rows.shape, dtype=np.uint16)
    for c in range(3):
        np.take(table[c], rows[:, c, :], out=bits[:, c, :])
    return VisionPatches(
        bits=bits.reshape(gt * gh * gw, PATCH_VALUES),
        grid_thw=(gt, gh, gw),
        second_per_grid_s=TEMPORAL_PATCH_SIZE / float(fps),
        patch_size=PATCH_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
    )


def _checked(frames: np.ndarray, fps: float) -> np.ndarray:
    """``frames`` validated for :func:`patchify` and padded to an even T (raises ``ValueError``, see there)."""
    unit = PATCH_SIZE * SPATIAL_MERGE_SIZE
    if frames.ndim != 4 or frames.shape[3] != 3 or frames.dtype != np.uint8 or frames.shape[0] == 0:
        raise ValueError(f"frames must be (T, H, W, 3) uint8 with T ≥ 1, got {frames.shape} {frames.dtype}")
    t, h, w, _ = frames.shape
    if h % unit or w % unit:
        raise ValueError(f"frame size {w}x{h} is not a multiple of {unit} pixels")
    if not MIN_PIXELS <= h * w <= MAX_PIXELS:
        bounds = f"{MIN_PIXELS}..{MAX_PIXELS} px"
        raise ValueError(f"frame area {h * w} px is outside the processor's {bounds} (it would resize)")
    if not fps > 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    if t % TEMPORAL_PATCH_SIZE:
        frames = np.concatenate([frames, np.repeat(frames[-1:], TEMPORAL_PATCH_SIZE - t % TEMPORAL_PATCH_SIZE, 0)])
        t = frames.shape[0]
    return frames


def patchify_fields(frames: np.ndarray, fps: float, device: str = "cpu") -> dict[str, Any]:
    """:func:`patchify` in torch on ``device``, returning the processed video fields directly.

    The same table and reordering as :func:`patchify` (so the same bf16 values as the HF processor),
    run as torch ops: on a GPU that is one upload of the uint8 frames (38 MB for a 10-s window at
    4 fps, 420x756), a gather of the table and one download of the bf16 rows (76 MB), so a model
    replica can patchify frames on its GPU without the HF processor, and without numpy's
    GIL-bound ``take``. The result is on the host, as vLLM's engine core receives it. On a CPU
    device it is :func:`patchify` (numpy's take is faster there: 206 vs 430 ms for a 10-s window on
    the 2-core dev machine, an ad-hoc timing).

    Args:
        frames: ``(T, H, W, 3) uint8`` RGB, as for :func:`patchify` (odd T padded with the last frame).
        fps: sampling rate of ``frames``, frames/s.
        device: torch device to compute on (``cpu``, ``cuda``, ``cuda:1``...).

    Returns:
        ``pixel_values_videos`` ``(T/2 · H/14 · W/14, 1176) bfloat16`` (host memory),
        ``video_grid_thw`` ``(1, 3) int64``, ``second_per_grid_ts`` ``(1,) float32``: the keys of
        :func:`video_input`.

    Raises:
        ValueError: as :func:`patchify`.
    """
    import torch

    if torch.device(device).type == "cpu":
        return video_input(patchify(frames, fps))  # numpy is faster than torch for this on a CPU
    return _patchify_torch(frames, fps, device)


def _patchify_torch(frames: np.ndarray, fps: float, device: str) -> dict[str, Any]:
    """:func:`patchify_fields` as torch ops on ``device`` (also runs on ``cpu``, for tests)."""
    import torch

    frames = _checked(frames, fps)
    (gt, gh, gw), blocks_shape = _grid(frames.shape)
    table, offsets = _torch_table(torch.device(device))
    if any(stride < 0 for stride in frames.strides):  # torch takes no negative strides
        frames = np.ascontiguousarray(frames)
    x = torch.from_numpy(frames).to(table.device)  # read-only frames are fine: nothing writes to them
    rows = x.reshape(blocks_shape).permute(_ROW_ORDER).reshape(gt * gh * gw, 3, -1)
    index = rows.to(torch.int32)
    index += offsets  # channel c's row of the flat table starts at 256·c (in place: one int32 copy)
    pixels = table[index].view(gt * gh * gw, PATCH_VALUES)
    return {
        "pixel_values_videos": pixels.cpu(),
        "video_grid_thw": torch.tensor([[gt, gh, gw]], dtype=torch.int64),
        "second_per_grid_ts": torch.tensor([TEMPORAL_PATCH_SIZE / float(fps)], dtype=torch.float32),
    }


@functools.cache
def _torch_table(device: Any) -> tuple[Any, Any]:
    """:func:`bf16_table` on ``device``, flattened: ``(768,) bfloat16`` (channel c at ``256·c``), and the
    ``(1, 3, 1) int32`` offsets ``0, 256, 512`` that index each channel's row (both made once per device)."""
    import torch

    table = torch.from_numpy(bf16_table().view(np.int16).reshape(-1).copy()).view(torch.bfloat16).to(device)
    offsets = torch.tensor([0, 256, 512], dtype=torch.int32).view(1, 3, 1).to(device)
    return table, offsets


#: Axes of :func:`_grid`'s block view → the HF row order:
#: ``(gt, tps, gh/m, m, p, gw/m, m, p, C)`` → ``(gt, gh/m, gw/m, m, m, C, tps, p, p)``.
_ROW_ORDER = (0, 2, 5, 3, 6, 8, 1, 4, 7)


def _grid(shape: tuple[int, ...]) -> tuple[tuple[int, int, int], tuple[int, ...]]:
    """The patch grid ``(t, h, w)`` of checked ``(T, H, W, 3)`` frames and their 9-axis block view's shape."""
    t, h, w, _ = shape
    gt, gh, gw = t // TEMPORAL_PATCH_SIZE, h // PATCH_SIZE, w // PATCH_SIZE
    m, p = SPATIAL_MERGE_SIZE, PATCH_SIZE
    return (gt, gh, gw), (gt, TEMPORAL_PATCH_SIZE, gh // m, m, p, gw // m, m, p, 3)
