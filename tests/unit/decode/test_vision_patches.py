"""The vision tower's input made on the CPU (serve_app/decode/vision_patches.py) against the HF processor itself.

The reference is transformers' Qwen2.5-VL processor from the tiny checkpoint (the same processor
config as Cosmos-Reason1-7B), called as the vLLM engine calls it; vLLM's vision tower casts
its input to bf16 first, so bf16 equality is exact equality of what the model sees.
"""

import dataclasses

import numpy as np
import pytest
import torch

from serve_app.decode.vision_patches import PATCH_VALUES, as_patches, bf16_table, patchify, video_input
from serve_app.model.family import family_for
from serve_app.protocol import DecodedClip

VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"


@pytest.fixture(scope="module")
def processor(tiny_checkpoint):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_checkpoint)


def _reference(processor, frames, fps):
    kwargs = family_for("qwen2_5_vl").vllm_video(frames, fps)[1]
    out = processor(text=[VIDEO], videos=[frames], return_tensors="pt", **kwargs)
    return out["pixel_values_videos"].to(torch.bfloat16), out["video_grid_thw"][0].tolist(), out["second_per_grid_ts"]


@pytest.mark.parametrize(
    ("t", "h", "w", "fps"),
    [(40, 420, 756, 4.0), (6, 56, 84, 2.0), (5, 112, 84, 4.0), (1, 84, 112, 1.0)],
    ids=["10s-window-4fps", "small", "odd-T-padded", "one-frame"],
)
def test_patches_equal_the_hf_processor_in_bf16(processor, t, h, w, fps):
    frames = np.random.default_rng(t).integers(0, 256, (t, h, w, 3), dtype=np.uint8)
    ref_pixels, ref_grid, ref_spg = _reference(processor, frames, fps)
    patches = patchify(frames, fps)
    fields = video_input(patches)
    assert list(patches.grid_thw) == ref_grid
    assert fields["pixel_values_videos"].dtype == torch.bfloat16
    assert fields["pixel_values_videos"].shape == ref_pixels.shape == (int(np.prod(ref_grid)), PATCH_VALUES)
    assert torch.equal(fields["pixel_values_videos"].view(torch.int16), ref_pixels.view(torch.int16))
    assert float(fields["second_per_grid_ts"][0]) == pytest.approx(float(ref_spg[0]))
    assert fields["video_grid_thw"].tolist() == [ref_grid]


def test_every_8_bit_value_of_every_channel_matches(processor):
    """All 256 values of each channel in one clip: the lookup table is the processor's arithmetic."""
    ramp = np.arange(256, dtype=np.uint8)
    frames = np.empty((2, 28 * 4, 28 * 4, 3), np.uint8)  # 12,544 pixels cover every value many times
    flat = frames.reshape(2, -1, 3)
    for c in range(3):
        flat[:, :, c] = np.roll(np.resize(ramp, flat.shape[1]), 17 * c)[None, :]
    ref_pixels, _, _ = _reference(processor, frames, 4.0)
    ours = video_input(patchify(frames, 4.0))["pixel_values_videos"]
    assert torch.equal(ours.view(torch.int16), ref_pixels.view(torch.int16))
    table = torch.from_numpy(bf16_table().view(np.int16)).view(torch.bfloat16).float()
    assert bool((table.diff(dim=1) >= 0).all())  # increasing in the 8-bit value
    assert bool((table[:, 0] < -1.4).all()) and bool((table[:, -1] > 1.8).all())


@pytest.mark.parametrize(
    ("shape", "dtype", "fps", "match"),
    [
        ((4, 420, 750, 3), np.uint8, 4.0, "multiple of 28"),
        ((4, 420, 756), np.uint8, 4.0, r"\(T, H, W, 3\) uint8"),
        ((4, 56, 56, 3), np.float32, 4.0, r"\(T, H, W, 3\) uint8"),
        ((0, 56, 56, 3), np.uint8, 4.0, "T ≥ 1"),
        ((2, 56, 56, 3), np.uint8, 0.0, "fps must be > 0"),
        ((2, 28, 28, 3), np.uint8, 4.0, "outside the processor's 3136"),  # the processor would upscale it
    ],
)
def test_shapes_the_processor_would_change_are_refused(shape, dtype, fps, match):
    with pytest.raises(ValueError, match=match):
        patchify(np.zeros(shape, dtype), fps)


def _clip(frames, fps=4.0):
    return DecodedClip(
        frames=frames, timestamps_s=np.arange(frames.shape[0]) / fps, fps=fps,
        source_width=1280, source_height=720, source_fps=25.0, duration_s=frames.shape[0] / fps,
    )  # fmt: skip


def test_a_clip_as_patches_keeps_its_geometry_and_drops_its_frames():
    frames = np.random.default_rng(1).integers(0, 256, (8, 56, 112, 3), dtype=np.uint8)
    clip = _clip(frames)
    moved = as_patches(clip)
    assert moved.frames is None and moved.patches is not None
    assert (moved.num_frames, moved.frame_size) == (clip.num_frames, clip.frame_size) == (8, (112, 56))
    assert moved.decode_ms >= clip.decode_ms
    assert as_patches(moved) is moved
    assert clip.frames is frames and clip.patches is None  # the original clip is unchanged (frozen)
    assert dataclasses.replace(moved, decode_ms=0.0).patches is moved.patches
    assert moved.patches.nbytes == 2 * moved.patches.bits.size == 2 * (4 * 4 * 8 * PATCH_VALUES)


def _decoder(vision_input):
    from serve_app.config import AppConfig
    from serve_app.deployments.decoder import VideoDecoder

    cfg = AppConfig.model_validate({"model": {"backend": "vllm", "vision_input": vision_input}})
    return VideoDecoder.func_or_class(cfg.model_dump(mode="json"))


def test_the_decode_tier_hands_patches_when_configured():
    from pathlib import Path

    from serve_app.protocol import ClipSource, FrameSampling

    data = (Path(__file__).resolve().parents[2] / "data" / "dashcam_320x180_h264.mp4").read_bytes()
    sampling = FrameSampling(fps=4.0, max_frames=16)
    as_frames = _decoder("frames")._decode(ClipSource(data=data, name="c.mp4"), sampling)
    as_patches = _decoder("patches")._decode(ClipSource(data=data, name="c.mp4"), sampling)
    assert as_frames.frames is not None and as_frames.patches is None
    assert as_patches.frames is None and as_patches.patches is not None
    assert (as_patches.num_frames, as_patches.frame_size) == (as_frames.num_frames, as_frames.frame_size)
    expected = patchify(as_frames.frames, as_frames.fps).bits
    assert np.array_equal(as_patches.patches.bits, expected)


@pytest.mark.parametrize(
    ("t", "h", "w", "fps"),
    [(40, 420, 756, 4.0), (5, 112, 84, 4.0), (1, 84, 112, 1.0)],
    ids=["10s-window-4fps", "odd-T-padded", "one-frame"],
)
def test_the_torch_table_patchify_makes_the_same_fields_as_the_numpy_one(t, h, w, fps):
    """model.patchify 'table' runs these torch ops on the replica's GPU; on the CPU they must agree bit for bit."""
    from serve_app.decode.vision_patches import _patchify_torch, patchify_fields

    frames = np.random.default_rng(t + 7).integers(0, 256, (t, h, w, 3), dtype=np.uint8)
    frames.setflags(write=False)  # as Ray's object store hands them over
    ref = video_input(patchify(frames, fps))
    for fields in (_patchify_torch(frames, fps, "cpu"), patchify_fields(frames, fps, "cpu")):
        assert sorted(fields) == sorted(ref)
        assert fields["pixel_values_videos"].dtype == torch.bfloat16
        assert fields["pixel_values_videos"].device.type == "cpu"
        ours, theirs = fields["pixel_values_videos"], ref["pixel_values_videos"]
        assert torch.equal(ours.view(torch.int16), theirs.view(torch.int16))
        assert fields["video_grid_thw"].tolist() == ref["video_grid_thw"].tolist()
        assert torch.equal(fields["second_per_grid_ts"], ref["second_per_grid_ts"])


@pytest.mark.parametrize("view", ["every-other-column", "mirrored"])
def test_the_torch_table_patchify_takes_a_non_contiguous_clip(view):
    from serve_app.decode.vision_patches import _patchify_torch

    wide = np.random.default_rng(3).integers(0, 256, (4, 56, 168, 3), dtype=np.uint8)
    frames = wide[:, :, ::2] if view == "every-other-column" else wide[:, :, ::-1][:, :, :84]  # (4, 56, 84, 3)
    ours = _patchify_torch(frames, 2.0, "cpu")["pixel_values_videos"]
    ref = video_input(patchify(np.ascontiguousarray(frames), 2.0))["pixel_values_videos"]
    assert torch.equal(ours.view(torch.int16), ref.view(torch.int16))


@pytest.mark.parametrize(("device", "torch_ops"), [("cuda", True), ("cuda:1", True), ("cpu", False)])
def test_patchify_fields_runs_torch_ops_on_an_accelerator_and_numpy_on_the_cpu(monkeypatch, device, torch_ops):
    import serve_app.decode.vision_patches as vp

    calls = []
    monkeypatch.setattr(vp, "_patchify_torch", lambda frames, fps, dev: calls.append(dev) or {"from": "torch"})
    frames = np.zeros((2, 56, 56, 3), np.uint8)
    out = vp.patchify_fields(frames, 4.0, device)
    assert calls == ([device] if torch_ops else [])
    assert (out == {"from": "torch"}) is torch_ops


@pytest.mark.parametrize(
    ("shape", "fps", "match"),
    [((4, 420, 750, 3), 4.0, "multiple of 28"), ((2, 56, 56, 3), -1.0, "fps must be > 0")],
)
def test_the_torch_table_patchify_refuses_what_the_numpy_one_refuses(shape, fps, match):
    from serve_app.decode.vision_patches import _patchify_torch

    with pytest.raises(ValueError, match=match):
        _patchify_torch(np.zeros(shape, np.uint8), fps, "cpu")
