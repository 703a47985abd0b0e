"""What one request hands vLLM: the prompt dict (text, the clip, processor kwargs), the sampling
parameters, and the processed pixels prepared for the engine core.

Each request carries its clip as one ``(T, H, W, 3) uint8`` array already at the processor's exact
size, plus the true sampling fps as video metadata, so Qwen2.5-VL's temporal positions are
right (0.5 s per frame pair at 4 fps); or as patches / table-patchified fields that skip the HF
processor (:func:`serve_app.model.engines.vllm_patches.accept_processed_video`).

Why metadata and not ``mm_processor_kwargs={"fps": 4}``: with transformers
5.x the Qwen2.5-VL processor derives ``second_per_grid_ts`` from
``video_metadata.sampled_fps`` and falls back to 24 fps when no metadata is
given; a bare ``fps`` kwarg only drives frame *sampling*, which is off here
(``do_sample_frames=False``). vLLM 0.24's Qwen2-VL data parser drops
per-item metadata, so it is passed as a processor kwarg instead (vLLM
forwards processor kwargs to the HF processor call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from serve_app.decode.vision_patches import patchify_fields, video_input
from serve_app.model.engines.base import GenerationRequest
from serve_app.model.family import family_for
from serve_app.protocol import SamplingOptions

if TYPE_CHECKING:
    from vllm import SamplingParams  # vLLM is installed only on the GPU machine: Any here


def sampling_params(s: SamplingOptions) -> SamplingParams:
    """vLLM ``SamplingParams`` (delta outputs) for the project's sampling options."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=s.max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        repetition_penalty=s.repetition_penalty,
        top_k=s.top_k,
        presence_penalty=s.presence_penalty,
        seed=s.seed,
        ignore_eos=s.ignore_eos,
        skip_special_tokens=True,
        output_kind=RequestOutputKind.DELTA,
    )


def engine_prompt(
    request: GenerationRequest,
    extra_processor_kwargs: dict[str, Any] | None = None,
    table_device: str | None = None,
    family: str = "qwen2_5_vl",
    table_fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The vLLM prompt dict of one request: text, the clip, and processor kwargs.

    A clip that arrives as patches (:attr:`GenerationRequest.patches`) goes in as processed
    fields (see :func:`~serve_app.model.engines.vllm_patches.accept_processed_video`): no HF processor
    runs for it. With ``table_device`` (``model.patchify: table``), frames are patchified here on that torch device
    (:func:`serve_app.decode.vision_patches.patchify_fields`) and go in as processed fields too. Otherwise
    frames go in as the family's video item with the processor kwargs that give the true temporal
    positions (:meth:`serve_app.model.family.ModelFamily.vllm_video`: Qwen2.5-VL's metadata in the
    kwargs; Qwen3-VL's in the item, with the frame timestamps its prompt shows). ``table_fields``: the table
    patchify's fields of this clip already made (for another question of it,
    :class:`serve_app.model.engines.clip_fields.ClipFieldsCache`); the prompt gets its own copy of the dict, the
    tensors are shared (nothing writes to them, as with the decode tier's patches).

    The clip's identity (:attr:`GenerationRequest.media_uuid`: the request's own, or the one its window's
    questions share) is the ``cache_salt`` of its prefix-cache blocks, and is passed as its multimodal UUID.
    The salt is what keeps windows and clients apart. vLLM 0.24 drops ``multi_modal_uuids`` of a text prompt
    (``vllm/inputs/preprocess.py``, ``_process_text`` calls ``_process_multimodal`` without them; only token
    prompts pass them), so it hashes the pixels and served identical video content from its prefix cache
    across requests: on one H200 the warm-up's 32 zero clips, 31 of them 8,144 of 8,149 prompt tokens from
    the cache (``results/gpu/lifecycle-pair/lifecycle_pair_engine_timings.jsonl``). Blocks with different
    salts are never shared (``vllm/v1/core/kv_cache_utils.py``: the salt is a key of a prompt's first block,
    so of every block after it); the questions of one window share the salt, and so the video's blocks.

    Raises:
        ValueError: frames the table patchify cannot take (see :func:`serve_app.decode.vision_patches.patchify`).
    """
    # the clip's identity: its multimodal UUID and the salt of its prefix-cache blocks (see above)
    ident = {"multi_modal_uuids": {"video": [request.media_uuid]}, "cache_salt": request.media_uuid}
    if request.patches is not None:
        return {"prompt": request.prompt, "multi_modal_data": {"video": video_input(request.patches)}, **ident}
    assert request.frames is not None  # a request carries frames or patches
    if table_device is not None:
        if table_fields is None:
            table_fields = patchify_fields(request.frames, request.fps, table_device)
        return {"prompt": request.prompt, "multi_modal_data": {"video": dict(table_fields)}, **ident}
    item, kwargs = family_for(family).vllm_video(request.frames, request.fps, extra_processor_kwargs)
    return {"prompt": request.prompt, "multi_modal_data": {"video": item}, **ident, "mm_processor_kwargs": kwargs}


def handoff_pixels(engine_request: Any, mode: str) -> int:
    """Prepares the processed pixel tensors of an ``EngineCoreRequest`` for the engine core.

    Args:
        engine_request: vLLM's ``EngineCoreRequest`` (its ``mm_features[i].data`` items hold
            ``pixel_values_videos``: ``(patches, 3·2·14·14)`` float32, on the GPU with the GPU processor).
        mode: ``as_is`` (nothing), ``bf16`` (cast to bfloat16 where the tensor is) or ``bf16_cpu``
            (cast, then copy to host memory). vLLM's Qwen2.5-VL vision tower casts its input to
            the model dtype first (``x.to(device=..., dtype=self.dtype)``), so bf16 here changes no
            number; it halves the bytes that cross to the engine core process.

    Returns:
        Bytes of pixel data handed over after the change.
    """
    import torch

    total = 0
    for feature in getattr(engine_request, "mm_features", None) or []:
        item = feature.data
        if item is None:
            continue
        for key, elem in item.items():
            t = elem.data
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                continue
            if key.startswith("pixel_values") and mode != "as_is":
                t = t.to(torch.bfloat16)
                if mode == "bf16_cpu":
                    t = t.cpu()
                elem.data = t
            total += t.nbytes
    return total
