"""Two changes to vLLM 0.24's behaviour.

:func:`accept_processed_video` (model replica): vLLM's Qwen2-VL data parser takes a clip already processed
into the vision tower's input (see its docstring).

:func:`share_tokenizer_pools` (model replica and engine-core process): ``copy.deepcopy`` of vLLM's thread-safe
tokenizer pool returns the pool.

vLLM's renderer wraps the tokenizer in a pool of deep copies (``maybe_make_thread_pool`` in
``vllm/tokenizers/hf.py``: a class made per call that mixes in ``ThreadSafeHFTokenizerMixin``), and its
``__reduce__`` deep-copies the tokenizer again. transformers' ``ProcessorMixin.from_pretrained`` deep-copies
its kwargs, the tokenizer included, so every HF processor vLLM builds copied the whole Qwen tokenizer
several times over: on the H200 the first clip of each of 4 preprocessing threads took 66 s
(py-spy stacks in ``results/gpu/lifecycle/``; 1.3-2.4 s once shared). The pool is thread-safe by design and
nothing mutates it, so sharing it is what the copy was for. The pool's own copies of the plain tokenizer
(``maybe_make_thread_pool`` deep-copies a non-pool tokenizer) are untouched.
"""

from __future__ import annotations

from typing import Any


def _share(self: Any, memo: dict[int, Any]) -> Any:
    """``__deepcopy__`` of a tokenizer pool: the pool itself."""
    return self


def share_tokenizer_pools() -> bool:
    """Makes every vLLM tokenizer pool of this process (made before or after) deep-copy to itself.

    Idempotent. Returns False, changing nothing, when vLLM (or that mixin) is not there.
    """
    try:
        from vllm.tokenizers.hf import ThreadSafeHFTokenizerMixin
    except ImportError:
        return False
    ThreadSafeHFTokenizerMixin.__deepcopy__ = _share
    return True


def accept_processed_video() -> None:
    """Lets vLLM's Qwen2-VL/Qwen2.5-VL data parser take a clip already processed into patches.

    vLLM 0.24's ``Qwen2VLMultiModalDataParser._parse_video_data`` accepts a dict of processed
    fields only for precomputed embeddings (``video_embeds`` + ``video_grid_thw``, passed through
    without the HF processor: ``DictEmbeddingItems``). This adds the same pass-through for the
    vision tower's input (``pixel_values_videos`` + ``video_grid_thw`` + ``second_per_grid_ts``,
    as :func:`serve_app.decode.vision_patches.video_input` makes them), with the fields
    vLLM's ``Qwen2_5_VLMultiModalProcessor._get_mm_fields_config`` declares for them; the model
    then runs its vision tower on the pixels as it does after the HF processor. Any other input
    goes to vLLM's own parser. Idempotent; affects this process only (input processing runs in
    the replica; the engine core receives processed items). Pass-through items need the engine
    argument ``enable_mm_embeds`` (vLLM checks it for every pass-through item).
    """
    from vllm.model_executor.models import qwen2_vl
    from vllm.multimodal.inputs import MultiModalFieldConfig
    from vllm.multimodal.parse import DictEmbeddingItems

    parser = qwen2_vl.Qwen2VLMultiModalDataParser
    if getattr(parser, "_cosmos_accepts_patches", False):
        return
    vllm_parse = parser._parse_video_data

    def _parse_video_data(self: Any, data: Any) -> Any:
        if isinstance(data, dict) and "pixel_values_videos" in data:
            qwen2vl_fields = qwen2_vl._create_qwen2vl_field_factory(self._spatial_merge_size)

            def fields(hf_inputs: Any) -> dict[str, Any]:
                second_per_grid = MultiModalFieldConfig.batched("video", keep_on_cpu=True)
                return {**qwen2vl_fields(hf_inputs), "second_per_grid_ts": second_per_grid}

            return DictEmbeddingItems(
                data,
                modality="video",
                required_fields={"pixel_values_videos", "video_grid_thw", "second_per_grid_ts"},
                fields_factory=fields,
            )
        return vllm_parse(self, data)

    parser._parse_video_data = _parse_video_data
    parser._cosmos_accepts_patches = True
