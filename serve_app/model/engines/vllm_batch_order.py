"""Keeps a window's questions next to each other in vLLM's batch, so attention reads their shared video once.

A window's questions share their prompt's first ~8,100 tokens (the video) and, through the prefix cache,
the KV-cache blocks that hold them (:mod:`serve_app.model.engines.prefill_gate`). In a decode step,
FlashAttention reads every sequence's whole context from GPU memory, and attention is two thirds of a
3-question decode step on the H200 (``results/gpu/fleet-lease11/README.md``: 66 % of 26.6 ms with ~192
sequences of ~8k context). vLLM 0.24 places a new request in the first free row of its persistent batch
(``InputBatch.add_request``, ``condense``), so a window's later questions, which arrive one step after the
first, land anywhere in the batch: far apart in the kernel's launch order, each reads the video's blocks
from memory again. Next to each other, their thread blocks run at the same time and the second and third
reads of a block can come from the GPU's L2 cache instead (50 MB on the H100 and H200).

:func:`group_order` puts the rows that share their first KV block next to each other (the first block is
the prompt's first 16 tokens, and each window's prompts carry their own ``cache_salt``, so the first
block's id names the window), moving as few rows as it can: each group goes where its first row already
is. :func:`order_batch_by_prefix` applies it in vLLM's engine-core process, after vLLM's own batch
changes of each step, with ``InputBatch.swap_states`` (the mechanism vLLM's FlashInfer and MLA backends
reorder the batch with, ``reorder_batch_to_split_decodes_and_prefills``). Nothing else changes: the
same requests run with the same KV blocks; only their rows move.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

#: Engine steps between two log lines of the swaps made (one line per ~30 s of a busy engine).
LOG_EVERY_STEPS = 2000


def group_order(first_blocks: np.ndarray) -> np.ndarray | None:
    """The row order that puts rows with the same first block next to each other.

    Args:
        first_blocks: ``(num_reqs,)`` integer, each row's first KV-block id.

    Returns:
        ``(num_reqs,)`` int: the rows in their new order (a permutation; new row ``j`` is old row
        ``order[j]``), or ``None`` when every group is already together. Groups are ordered by their first
        row, rows within a group keep their order.
    """
    n = len(first_blocks)
    if n < 3:
        return None
    _, first_row, group = np.unique(first_blocks, return_index=True, return_inverse=True)
    rank = first_row[group]  # each row's group, named by the group's first row
    order = np.lexsort((np.arange(n), rank))
    if np.array_equal(order, np.arange(n)):
        return None
    return order


def apply_order(batch: Any, order: np.ndarray) -> int:
    """Moves ``batch``'s rows into ``order`` (see :func:`group_order`) by swaps; returns the swaps made.

    ``batch`` is vLLM's ``InputBatch`` (``req_ids``, ``req_id_to_index``, ``swap_states``).
    """
    wanted = [batch.req_ids[int(i)] for i in order]
    swaps = 0
    for row, req_id in enumerate(wanted):
        now = batch.req_id_to_index[req_id]
        if now != row:
            batch.swap_states(row, now)
            swaps += 1
    return swaps


def reorder(batch: Any) -> int:
    """Groups ``batch``'s rows by their first KV block (kv-cache group 0); returns the swaps made."""
    n = batch.num_reqs
    first = batch.block_table.block_tables[0].block_table.np[:n, 0]
    order = group_order(first)
    return 0 if order is None else apply_order(batch, order)


def order_batch_by_prefix() -> bool:
    """Makes vLLM's GPU model runner in this process group a window's requests in its batch every step.

    Runs in the engine-core process (where vLLM 0.24's single-GPU executor runs the model runner). Leaves
    the batch alone when the attention backend reorders it itself (``reorder_batch_threshold`` set:
    FlashInfer, MLA), whose order must stay. Idempotent. Returns False, changing nothing, without vLLM.
    """
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError:
        return False
    if getattr(GPUModelRunner, "_cosmos_original_may_reorder_batch", None) is not None:
        return True
    original = GPUModelRunner._may_reorder_batch

    def _may_reorder_batch(self: Any, scheduler_output: Any) -> None:
        original(self, scheduler_output)
        if self.reorder_batch_threshold is None and self.kv_cache_config.kv_cache_groups:
            steps, swaps = getattr(self, "_cosmos_order_counts", (0, 0))
            steps, swaps = steps + 1, swaps + reorder(self.input_batch)
            if steps % LOG_EVERY_STEPS == 0:
                logger.info("batch order by prefix: %d rows moved in %d engine steps", swaps, steps)
            self._cosmos_order_counts = (steps, swaps)

    GPUModelRunner._cosmos_original_may_reorder_batch = original
    GPUModelRunner._may_reorder_batch = _may_reorder_batch
    return True
