"""A window's requests kept next to each other in vLLM's batch: the order, the swaps, the patch."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from serve_app.model.engines import engine_watch
from serve_app.model.engines.vllm_batch_order import apply_order, group_order, reorder


class _Batch:
    """vLLM's ``InputBatch`` as the reorder uses it: request ids by row, rows by id, block table, swaps."""

    def __init__(self, req_ids, first_blocks):
        self.req_ids = list(req_ids)
        self.req_id_to_index = {r: i for i, r in enumerate(self.req_ids)}
        table = np.zeros((len(req_ids) + 2, 4), np.int32)
        table[: len(req_ids), 0] = first_blocks
        table[: len(req_ids), 1] = np.arange(len(req_ids)) + 100  # each row's own second block
        self.block_table = type("M", (), {"block_tables": [type("B", (), {
            "block_table": type("C", (), {"np": table})()})()]})()
        self.swaps = 0

    @property
    def num_reqs(self):
        return len(self.req_id_to_index)

    def swap_states(self, i1, i2):  # as vLLM's: ids, index map and block-table rows move together
        a, b = self.req_ids[i1], self.req_ids[i2]
        self.req_ids[i1], self.req_ids[i2] = b, a
        self.req_id_to_index[a], self.req_id_to_index[b] = i2, i1
        t = self.block_table.block_tables[0].block_table.np
        t[[i1, i2]] = t[[i2, i1]]
        self.swaps += 1


def test_rows_sharing_a_first_block_end_next_to_each_other_each_group_where_it_began():
    # window A's first question at row 0, B's at row 1, their later questions added at the end
    order = group_order(np.array([7, 9, 4, 7, 9, 7, 4]))
    assert order is not None
    assert list(order) == [0, 3, 5, 1, 4, 2, 6]  # A (rows 0, 3, 5), B (1, 4), C (2, 6): order within kept


@pytest.mark.parametrize("blocks", [[7, 7, 9, 9, 4], [1, 2, 3, 4], [5, 5], [], [3, 3, 3]])
def test_a_batch_already_grouped_is_left_alone(blocks):
    assert group_order(np.array(blocks, np.int32)) is None


def test_the_swaps_move_each_request_with_its_own_blocks():
    batch = _Batch(["a1", "b1", "c1", "a2", "b2", "a3", "c2"], [7, 9, 4, 7, 9, 7, 4])
    own = {r: batch.block_table.block_tables[0].block_table.np[i, 1] for i, r in enumerate(batch.req_ids)}
    moved = reorder(batch)
    assert batch.req_ids == ["a1", "a2", "a3", "b1", "b2", "c1", "c2"]
    assert moved == batch.swaps and 0 < moved <= 6
    table = batch.block_table.block_tables[0].block_table.np
    for i, r in enumerate(batch.req_ids):  # the block-table row went with its request
        assert table[i, 1] == own[r]
        assert batch.req_id_to_index[r] == i
    assert list(table[:7, 0]) == [7, 7, 7, 9, 9, 4, 4]
    assert reorder(batch) == 0  # grouped now: nothing more moves


def test_apply_order_makes_any_permutation():
    rng = np.random.default_rng(0)
    ids = [f"r{i}" for i in range(40)]
    batch = _Batch(ids, rng.integers(0, 10, 40))
    order = rng.permutation(40)
    apply_order(batch, order)
    assert batch.req_ids == [ids[i] for i in order]


@pytest.mark.parametrize(("on", "value"), [(True, "1"), (False, "0")])
def test_the_engine_core_is_told_by_the_environment(monkeypatch, on, value):
    monkeypatch.setattr(engine_watch.os, "environ", dict(engine_watch.os.environ))
    with contextlib.suppress(ImportError):  # no vLLM on this machine: the environment is set before its import
        engine_watch.install(order_batch_by_prefix=on)
    assert engine_watch.os.environ[engine_watch.ORDER_ENV] == value
    assert engine_watch.os.environ[engine_watch.PARENT_ENV] == str(engine_watch.os.getpid())
