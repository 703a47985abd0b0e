"""The kernel bench's decode batch: a window's rows share its prefix blocks and nothing else."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.window_attention_kernel import decode_batch, main
from serve_app.model.engines.vllm_window_attention import plan_windows


def test_a_windows_rows_share_its_prefix_blocks_and_own_the_rest():
    table, computed, used = decode_batch(windows=4, questions=3, prefix_blocks=20, block_size=16)
    assert table.shape[0] == 12 and len(computed) == 12
    assert ((computed >= 20 * 16 + 20) & (computed <= 20 * 16 + 275)).all()
    for w in range(4):
        rows = table[3 * w: 3 * w + 3]
        assert (rows[:, :20] == rows[0, :20]).all()  # the shared prefix
    own = [set(table[i, 20: computed[i] // 16 + 1].tolist()) for i in range(12)]
    assert all(not (a & b) for i, a in enumerate(own) for b in own[i + 1:])  # nobody else's blocks
    assert 0 not in set(np.concatenate([table[i, : computed[i] // 16 + 1] for i in range(12)]).tolist())
    assert used == 1 + 4 * 20 + sum(len(o) for o in own)
    plan = plan_windows(table, np.ones(12, np.int64), computed, 16)
    assert plan is not None and list(plan.prefix_lens) == [320] * 4  # 20 blocks of 16


def test_one_question_per_window_has_nothing_to_share():
    table, computed, _ = decode_batch(windows=8, questions=1, prefix_blocks=20)
    assert plan_windows(table, np.ones(8, np.int64), computed, 16) is None


@pytest.mark.parametrize("points", ["64", "64x0", "ax3", "64x3,"])
def test_points_that_are_not_windows_by_questions_are_refused(points, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--points", points])
    assert e.value.code == 2
    assert "WINDOWSxQUESTIONS" in capsys.readouterr().err
