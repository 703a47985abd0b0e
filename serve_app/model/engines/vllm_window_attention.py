"""A window's questions read its video's KV cache once per decode step: per-window cascade attention.

A window's questions share their prompt up to the question text (the video, ~8,100 tokens), and through
the prefix cache they share the KV-cache blocks that hold it. In a decode step FlashAttention reads every
sequence's whole context, so a window of 3 questions has its video read 3 times. With 3 questions attention
is 66 % of a decode step on the H200 (``results/gpu/fleet-lease11/README.md``: 26.6 ms with ~192 sequences),
and the step reads its KV at about the GPU's memory bandwidth (``results/gpu/fleet-lease12/README.md``).

vLLM 0.24's cascade attention (``vllm/v1/attention/backends/flash_attn.py: cascade_attention``, after
Hydragen, Juravsky et al. 2024, arXiv:2402.05099) reads a prefix once for many queries, but only a prefix that
every request in the batch holds (the scheduler's ``num_common_prefix_blocks``), never one window's video
among many windows. This module does the same per window:

1. :func:`plan_windows` (engine-core process, CPU, once per step): the decode rows (one query token) that
   share their leading KV blocks, grouped; each group's shared prefix is its common leading blocks, capped so
   that it holds computed tokens only.
2. :func:`window_tensors` (once per step): the plan on the GPU, each row's block table shifted past its
   group's prefix (its suffix) and its KV length less the prefix.
3. :func:`window_attention` (every layer): one attention over every row's suffix (the rows outside a group:
   their whole context, as vLLM computes them), one over each group's prefix with the group's query tokens
   together and no mask, and the two merged by their log-sum-exp (vLLM's ``merge_attn_states``).

:func:`install_window_attention` patches vLLM 0.24's GPU model runner and FlashAttention backend in the
engine-core process (:mod:`serve_app.model.engines.engine_watch`). A step with a plan runs without a full
CUDA graph (vLLM does the same for its own cascade attention). An engine the window path does not cover
(an attention backend other than FlashAttention 3, an fp8 KV cache, more than one KV-cache group, vLLM's V2
model runner) gets no plan, so its steps keep their full CUDA graphs; a layer it does not cover (sliding
windows, ALiBi, sinks, context parallelism) keeps vLLM's path in a planned step. Needs the engine
argument ``disable_cascade_attn: false`` (vLLM 0.24 skips the runner's cascade step otherwise).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from serve_app.log_limit import get_logger

logger = get_logger(__name__)

#: Engine steps between two log lines saying how many steps ran the window path (~30 s of a busy engine).
LOG_EVERY_STEPS = 2000

#: Shortest shared prefix worth a second kernel, in tokens: vLLM 0.24's threshold for its cascade attention
#: (``use_cascade_attention``: "We use an arbitrary threshold of 256 tokens").
MIN_PREFIX_TOKENS = 256


@dataclasses.dataclass(frozen=True)
class WindowPlan:
    """One step's groups of decode rows that share a prefix (CPU; see :func:`plan_windows`).

    Attributes:
        token_idx: ``(n_grouped,)`` int64, the grouped rows' query-token indices in the batch, group by group.
        cu_group_q: ``(groups + 1,)`` int32, where each group's tokens start in ``token_idx``.
        prefix_lens: ``(groups,)`` int32, each group's shared prefix in tokens (whole KV blocks).
        group_rows: ``(groups,)`` int64, a row of each group (its block table holds the prefix's blocks).
        row_prefix_blocks: ``(num_reqs,)`` int32, each row's prefix in blocks (0 outside a group).
        block_size: tokens per KV block of the block table the plan was made from.
        max_suffix_len: the longest KV length past a row's prefix (a row outside a group: its whole context),
            in tokens; the suffix attention's ``max_seqlen_k``, from which FlashAttention 3 bounds its KV splits.
    """

    token_idx: np.ndarray
    cu_group_q: np.ndarray
    prefix_lens: np.ndarray
    group_rows: np.ndarray
    row_prefix_blocks: np.ndarray
    block_size: int
    max_suffix_len: int


def plan_windows(block_table: np.ndarray, num_scheduled: np.ndarray, num_computed: np.ndarray, block_size: int,
                 min_prefix_tokens: int = MIN_PREFIX_TOKENS) -> WindowPlan | None:
    """Groups a step's decode rows by their shared leading KV blocks.

    Args:
        block_table: ``(num_reqs, max_blocks)`` int, each row's KV-block ids (vLLM's CPU block table).
        num_scheduled: ``(num_reqs,)`` int, query tokens per row this step (a decode row has 1).
        num_computed: ``(num_reqs,)`` int, tokens already in each row's KV cache.
        block_size: tokens per KV block.
        min_prefix_tokens: a group's prefix must reach this many tokens.

    Returns:
        The plan, or ``None`` when no two decode rows share ``min_prefix_tokens``. A group's prefix is the
        leading blocks every member has, whole blocks of computed tokens only (the query token always lies
        past it, so its suffix is never empty).
    """
    starts = np.cumsum(num_scheduled) - num_scheduled
    rows = np.flatnonzero((num_scheduled == 1) & (num_computed >= min_prefix_tokens))
    if len(rows) < 2:
        return None
    _, group_of, counts = np.unique(block_table[rows, 0], return_inverse=True, return_counts=True)
    prefix_blocks = np.zeros(len(num_scheduled), np.int32)
    tokens: list[np.ndarray] = []
    lens: list[int] = []
    firsts: list[int] = []
    for g in np.flatnonzero(counts >= 2):
        members = rows[group_of == g]
        cap = int(num_computed[members].min()) // block_size
        blocks = block_table[members, :cap]
        same = (blocks == blocks[0]).all(axis=0)
        n = cap if same.all() else int(np.argmin(same))
        if n * block_size < min_prefix_tokens:
            continue
        prefix_blocks[members] = n
        tokens.append(starts[members])
        lens.append(n * block_size)
        firsts.append(int(members[0]))
    if not tokens:
        return None
    sizes = [len(t) for t in tokens]
    return WindowPlan(
        token_idx=np.concatenate(tokens).astype(np.int64),
        cu_group_q=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32),
        prefix_lens=np.asarray(lens, np.int32),
        group_rows=np.asarray(firsts, np.int64),
        row_prefix_blocks=prefix_blocks,
        block_size=block_size,
        max_suffix_len=int((num_computed + num_scheduled - prefix_blocks * block_size).max()),
    )


@dataclasses.dataclass(frozen=True)
class WindowTensors:
    """A :class:`WindowPlan` on the attention's device, with each row's suffix (see :func:`window_tensors`).

    Attributes:
        token_idx, cu_group_q, prefix_lens: as the plan's.
        group_block_table: ``(groups, max_prefix_blocks)`` int32, each group's prefix blocks.
        suffix_block_table: ``(num_reqs, max_blocks)`` int32, each row's blocks past its prefix.
        suffix_seq_lens: ``(num_reqs,)`` int32, each row's KV length past its prefix.
        max_group_q: the most query tokens in one group.
        max_prefix_len: the longest prefix, in tokens.
        max_suffix_len: as the plan's.
    """

    token_idx: Any
    cu_group_q: Any
    prefix_lens: Any
    group_block_table: Any
    suffix_block_table: Any
    suffix_seq_lens: Any
    max_group_q: int
    max_prefix_len: int
    max_suffix_len: int


def window_tensors(plan: WindowPlan, block_table: Any, seq_lens: Any) -> WindowTensors:
    """Moves ``plan`` to the device of ``block_table`` (``(>= num_reqs, max_blocks)`` int32 torch tensor, the
    step's rows first) and derives each row's suffix from it and ``seq_lens`` (``(>= num_reqs,)`` int32,
    tokens); ``num_reqs`` is the plan's."""
    import torch

    device = block_table.device
    num_reqs, max_blocks = len(plan.row_prefix_blocks), block_table.shape[1]
    block_table = block_table[:num_reqs]
    block_size = plan.block_size
    shift = torch.from_numpy(plan.row_prefix_blocks).to(device)
    cols = (torch.arange(max_blocks, device=device, dtype=torch.int32)[None, :] + shift[:, None]).clamp_(
        max=max_blocks - 1)
    max_prefix_blocks = int(plan.prefix_lens.max()) // block_size
    rows = torch.from_numpy(plan.group_rows).to(device)
    return WindowTensors(
        token_idx=torch.from_numpy(plan.token_idx).to(device),
        cu_group_q=torch.from_numpy(plan.cu_group_q).to(device),
        prefix_lens=torch.from_numpy(plan.prefix_lens).to(device),
        group_block_table=block_table.index_select(0, rows)[:, :max_prefix_blocks].contiguous(),
        suffix_block_table=torch.gather(block_table, 1, cols.long()).to(torch.int32).contiguous(),
        suffix_seq_lens=(seq_lens[:num_reqs] - shift * block_size).to(torch.int32),
        max_group_q=int(np.diff(plan.cu_group_q).max()),
        max_prefix_len=int(plan.prefix_lens.max()),
        max_suffix_len=plan.max_suffix_len,
    )


def window_attention(query: Any, key_cache: Any, value_cache: Any, out: Any, query_start_loc: Any,
                     max_query_len: int, w: WindowTensors, scale: float, softcap: float,
                     varlen: Callable[..., Any], merge: Callable[..., None], **kernel_kwargs: Any) -> None:
    """Attention of a step's query tokens, each window group's prefix read once; writes ``out``.

    Args:
        query: ``(n, heads, head_size)``; out: the same shape, written.
        key_cache, value_cache: ``(num_blocks, block_size, kv_heads, head_size)``.
        query_start_loc: ``(num_reqs + 1,)`` int32, each row's first query token.
        max_query_len: the step's longest query (tokens).
        w: the step's :class:`WindowTensors`.
        scale, softcap: the softmax scale and logit soft cap (0: none).
        varlen: FlashAttention's ``flash_attn_varlen_func`` (paged KV, ``return_softmax_lse``).
        merge: vLLM's ``merge_attn_states(output, prefix_out, prefix_lse, suffix_out, suffix_lse)``.
        kernel_kwargs: passed to both ``varlen`` calls (``fa_version``).
    """
    _, suffix_lse = varlen(q=query, k=key_cache, v=value_cache, out=out, cu_seqlens_q=query_start_loc,
                           max_seqlen_q=max_query_len, seqused_k=w.suffix_seq_lens, max_seqlen_k=w.max_suffix_len,
                           softmax_scale=scale, causal=True, block_table=w.suffix_block_table, softcap=softcap,
                           return_softmax_lse=True, **kernel_kwargs)
    prefix_out, prefix_lse = varlen(q=query.index_select(0, w.token_idx), k=key_cache, v=value_cache,
                                    cu_seqlens_q=w.cu_group_q, max_seqlen_q=w.max_group_q, seqused_k=w.prefix_lens,
                                    max_seqlen_k=w.max_prefix_len, softmax_scale=scale, causal=False,
                                    block_table=w.group_block_table, softcap=softcap, return_softmax_lse=True,
                                    **kernel_kwargs)
    merged = prefix_out.new_empty(prefix_out.shape)
    merge(merged, prefix_out, prefix_lse, out.index_select(0, w.token_idx),
          suffix_lse.index_select(1, w.token_idx).contiguous())
    out.index_copy_(0, w.token_idx, merged)


@dataclasses.dataclass
class _Step:
    """The plan of the step the engine core is running (set by the runner, read by the metadata builder, in the
    one thread that runs ``execute_model``), and counts for the log line and tests."""

    plan: WindowPlan | None = None
    active: bool = True  # False: every step takes vLLM's path (tests compare the two on one engine)
    steps: int = 0  # steps seen, with a plan, and the groups in them
    planned: int = 0
    groups: int = 0
    window_layers: int = 0  # attention calls that took the window path


_STEP = _Step()


def plan_step(batch: Any, num_scheduled: np.ndarray, num_computed: np.ndarray) -> WindowPlan | None:
    """The plan of the step about to run on ``batch`` (vLLM's ``InputBatch``: its rows, their block table of
    kv-cache group 0), kept for the step's metadata builders; counted, with a log line every
    :data:`LOG_EVERY_STEPS` steps."""
    table = batch.block_table.block_tables[0]
    n = batch.num_reqs
    _STEP.plan = plan = plan_windows(table.block_table.np[:n], num_scheduled, num_computed, table.block_size)
    _STEP.steps += 1
    if plan is not None:
        _STEP.planned += 1
        _STEP.groups += len(plan.prefix_lens)
    if _STEP.steps % LOG_EVERY_STEPS == 0:
        logger.info("window attention: %d of %d engine steps, %.1f windows per step", _STEP.planned, _STEP.steps,
                    _STEP.groups / max(_STEP.planned, 1))
    return plan


@functools.cache
def _vllm_names() -> tuple[Callable[[Any], bool], Any]:
    """vLLM's ``is_quantized_kv_cache`` and ``AttentionType``, imported once (not in every layer's call)."""
    from vllm.utils.torch_utils import is_quantized_kv_cache
    from vllm.v1.attention.backend import AttentionType

    return is_quantized_kv_cache, AttentionType


def _covers(impl: Any, md: Any) -> bool:
    """Whether the window path computes what vLLM's FlashAttention path would for this layer and step."""
    is_quantized_kv_cache, AttentionType = _vllm_names()
    return (impl.attn_type == AttentionType.DECODER and impl.vllm_flash_attn_version == 3
            and not is_quantized_kv_cache(impl.kv_cache_dtype) and impl.dcp_world_size == 1
            and impl.sinks is None and impl.alibi_slopes is None
            and impl.sliding_window in (None, (-1, -1)) and md.causal is True
            and md.mm_prefix_range_tensor is None and not md.use_cascade)


def _runner_fits(runner: Any) -> bool:
    """Whether ``runner`` (vLLM's ``GPUModelRunner``) has one KV-cache group, all of whose layers run
    FlashAttention 3 over an unquantized KV cache: else no step gets a plan, and so every step keeps its full
    CUDA graph (a plan costs it). Decided at the first step, logged, kept on the runner."""
    fits = getattr(runner, "_cosmos_window_fits", None)
    if fits is None:
        from vllm.v1.attention.backends.flash_attn import get_flash_attn_version

        is_quantized_kv_cache, _ = _vllm_names()
        groups = runner.kv_cache_config.kv_cache_groups
        backends = {g.backend.get_name() for g in runner.attn_groups[0]} if len(groups) == 1 else set()
        fits = (backends == {"FLASH_ATTN"} and get_flash_attn_version() == 3
                and not is_quantized_kv_cache(runner.cache_config.cache_dtype))
        runner._cosmos_window_fits = fits
        logger.info("window attention: %s (%d KV-cache groups, attention backends %s, KV cache %s)",
                    "on" if fits else "off, vLLM's attention runs every step", len(groups), sorted(backends),
                    runner.cache_config.cache_dtype)
    return bool(fits)


def inactive_reason(vllm_config: Any) -> str | None:
    """Why the patches of :func:`install_window_attention` cannot run on the engine that ``vllm_config``
    (vLLM's ``VllmConfig``) describes, or None. They patch vLLM 0.24's V1 ``GPUModelRunner``; vLLM runs its
    V2 model runner instead for some architectures or when ``VLLM_USE_V2_MODEL_RUNNER`` asks for it."""
    if getattr(vllm_config, "use_v2_model_runner", False):
        return ("vLLM runs its V2 model runner for this model, which the window path does not patch: "
                "vLLM's attention runs every step")
    return None


def install_window_attention() -> bool:
    """Patches vLLM 0.24 in this process (the engine core) to run :func:`window_attention` where it applies.

    Idempotent. Returns False, changing nothing, without vLLM.
    """
    try:
        from vllm.utils.torch_utils import canonicalize_singleton_dim_strides
        from vllm.v1.attention.backends import flash_attn
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError:
        return False
    if getattr(GPUModelRunner, "_cosmos_window_attention", False):
        return True
    runner_lens = GPUModelRunner._compute_cascade_attn_prefix_lens
    runner_execute = GPUModelRunner.execute_model
    builder_build = flash_attn.FlashAttentionMetadataBuilder.build
    impl_forward = flash_attn.FlashAttentionImpl.forward

    def _compute_cascade_attn_prefix_lens(self: Any, num_scheduled: Any, num_computed: Any, common: Any) -> Any:
        lens = runner_lens(self, num_scheduled, num_computed, common)
        _STEP.plan = None
        if lens is not None or not _STEP.active or not _runner_fits(self):
            return lens  # vLLM's own cascade (a prefix the whole batch shares), or an engine this does not cover
        if plan_step(self.input_batch, num_scheduled, num_computed) is None:
            return None
        return [[0] * len(groups) for groups in self.attn_groups]  # not None: no full CUDA graph this step

    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return runner_execute(self, *args, **kwargs)
        finally:
            _STEP.plan = None  # a dummy run between steps never sees this step's plan

    def build(self: Any, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
        md = builder_build(self, common_prefix_len, common_attn_metadata, fast_build)
        plan = _STEP.plan
        if plan is not None and common_attn_metadata.num_reqs == len(plan.row_prefix_blocks):
            md.cosmos_window = window_tensors(plan, common_attn_metadata.block_table_tensor,
                                              common_attn_metadata.seq_lens)
        return md

    def forward(self: Any, layer: Any, query: Any, key: Any, value: Any, kv_cache: Any, attn_metadata: Any,
                output: Any, output_scale: Any = None, output_block_scale: Any = None) -> Any:
        w = getattr(attn_metadata, "cosmos_window", None)
        if w is None or output_scale is not None or output_block_scale is not None or not _covers(self, attn_metadata):
            return impl_forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                output_block_scale)
        _STEP.window_layers += 1
        key_cache, value_cache = (canonicalize_singleton_dim_strides(c) for c in kv_cache.unbind(1))
        n = attn_metadata.num_actual_tokens
        window_attention(query[:n], key_cache, value_cache, output[:n], attn_metadata.query_start_loc,
                         attn_metadata.max_query_len, w, self.scale,
                         self.logits_soft_cap, flash_attn.flash_attn_varlen_func, flash_attn.merge_attn_states,
                         fa_version=self.vllm_flash_attn_version)
        return output

    GPUModelRunner._compute_cascade_attn_prefix_lens = _compute_cascade_attn_prefix_lens
    GPUModelRunner.execute_model = execute_model
    flash_attn.FlashAttentionMetadataBuilder.build = build
    flash_attn.FlashAttentionImpl.forward = forward
    GPUModelRunner._cosmos_window_attention = True
    return True
