"""Per-window cascade attention: the plan, and the attention it gives against plain paged attention.

The kernels are references written here in torch (paged KV, GQA, causal alignment at the end as FlashAttention's
varlen kernel does it, natural-log LSE, the LSE merge of vLLM's ``merge_attn_states``): what is tested is the
decomposition (groups, prefixes, shifted block tables, the merge), which is this project's code. FlashAttention
itself runs only on the GPU machine (``tests/gpu``).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

from serve_app.model.engines import vllm_window_attention as wa
from serve_app.model.engines.vllm_window_attention import plan_windows, window_attention, window_tensors

BS = 4  # tokens per block in these tests


def ref_varlen(q, k, v, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale, causal, block_table,
               softcap=0.0, return_softmax_lse=False, out=None, **_):
    """Paged varlen attention as FlashAttention's ``flash_attn_varlen_func`` computes it (fp64 reference)."""
    n, heads, dim = q.shape
    kv_heads = k.shape[2]
    o = torch.zeros_like(q)
    lse = torch.full((heads, n), -math.inf, dtype=q.dtype)
    for s in range(len(cu_seqlens_q) - 1):
        a, b, length = int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1]), int(seqused_k[s])
        assert b - a <= max_seqlen_q and length <= max_seqlen_k
        if b == a:
            continue
        blocks = block_table[s, : math.ceil(length / k.shape[1])].long()
        ks = k[blocks].reshape(-1, kv_heads, dim)[:length].repeat_interleave(heads // kv_heads, dim=1)
        vs = v[blocks].reshape(-1, kv_heads, dim)[:length].repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[a:b], ks) * softmax_scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        if causal:  # query i of the last (b - a) positions sees keys up to its own position
            pos = length - (b - a) + torch.arange(b - a)
            scores = scores.masked_fill(torch.arange(length)[None, None, :] > pos[None, :, None], -math.inf)
        lse[:, a:b] = torch.logsumexp(scores, dim=-1)
        o[a:b] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vs)
    if out is not None:
        out.copy_(o)
        o = out
    return (o, lse) if return_softmax_lse else o


def ref_merge(output, prefix_out, prefix_lse, suffix_out, suffix_lse):
    """vLLM's ``merge_attn_states``: outputs weighted by their softmax mass (lse ``(heads, tokens)``)."""
    m = torch.maximum(prefix_lse, suffix_lse)
    wp, ws = torch.exp(prefix_lse - m).T[..., None], torch.exp(suffix_lse - m).T[..., None]
    output.copy_((prefix_out * wp + suffix_out * ws) / (wp + ws))


def _batch():
    """Rows: window A's three questions (rows 0, 2, 4; row 4 shares only 4 of A's 5 blocks), a prefill chunk
    (row 1, 3 query tokens), a lone question (row 3), window C's two questions (rows 5, 6)."""
    table = np.zeros((7, 8), np.int32)
    rows = [
        ([1, 2, 3, 4, 5, 10, 11], 26, 1),
        ([20, 21, 22], 8, 3),
        ([1, 2, 3, 4, 5, 12, 13], 24, 1),
        ([30, 31, 32], 10, 1),
        ([1, 2, 3, 4, 14, 15], 21, 1),
        ([40, 41, 42, 43, 44], 17, 1),
        ([40, 41, 42, 43, 45], 18, 1),
    ]
    for i, (blocks, _, _) in enumerate(rows):
        table[i, : len(blocks)] = blocks
    computed = np.array([r[1] for r in rows])
    scheduled = np.array([r[2] for r in rows])
    return table, scheduled, computed


def test_decode_rows_that_share_leading_blocks_are_grouped_with_their_common_prefix():
    table, scheduled, computed = _batch()
    plan = plan_windows(table, scheduled, computed, BS, min_prefix_tokens=8)
    assert plan is not None
    # A: rows 0, 2, 4, whose common leading blocks are 1-4 (row 4 has 14 where the others have 5): 16 tokens;
    # C: rows 5, 6, blocks 40-43 (16 tokens). Query tokens: row 0 at 0, row 1 at 1-3, row 2 at 4, ...
    assert list(plan.cu_group_q) == [0, 3, 5]
    assert list(plan.token_idx) == [0, 4, 6, 7, 8]
    assert list(plan.prefix_lens) == [16, 16]
    assert list(plan.group_rows) == [0, 5]
    assert list(plan.row_prefix_blocks) == [4, 0, 4, 0, 4, 4, 4]  # the prefill chunk and the lone row: none
    # KV past each row's prefix: 27-16, 11 (the chunk, whole), 25-16, 11 (the lone row, whole), 22-16, 18-16,
    # 19-16: the suffix attention's bound is 11 tokens, not the step's longest context (27)
    assert plan.max_suffix_len == 11


def test_a_prefix_holds_computed_tokens_only():
    table, scheduled, computed = _batch()
    computed[5] = 13  # row 5 has computed 13 tokens: 3 whole blocks, although 4 are shared
    plan = plan_windows(table, scheduled, computed, BS, min_prefix_tokens=8)
    assert plan is not None
    assert list(plan.prefix_lens) == [16, 12]
    assert plan.row_prefix_blocks[5] == plan.row_prefix_blocks[6] == 3


@pytest.mark.parametrize("min_tokens", [20, 1000])
def test_no_plan_when_no_two_rows_share_enough(min_tokens):
    table, scheduled, computed = _batch()
    assert plan_windows(table, scheduled, computed, BS, min_prefix_tokens=min_tokens) is None


def test_no_plan_for_prefill_rows_alone():
    table, _, computed = _batch()
    assert plan_windows(table, np.full(7, 5), computed, BS, min_prefix_tokens=8) is None


@pytest.mark.parametrize("softcap", [0.0, 5.0])
def test_window_attention_equals_plain_attention(softcap):
    torch.manual_seed(0)
    table, scheduled, computed = _batch()
    heads, kv_heads, dim = 4, 2, 8
    k = torch.randn(64, BS, kv_heads, dim, dtype=torch.float64)
    v = torch.randn(64, BS, kv_heads, dim, dtype=torch.float64)
    n = int(scheduled.sum())
    q = torch.randn(n, heads, dim, dtype=torch.float64)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(scheduled)]), dtype=torch.int32)
    seq_lens = torch.tensor(computed + scheduled, dtype=torch.int32)
    bt = torch.tensor(table)
    kw = {"max_seqlen_q": 3, "max_seqlen_k": int(seq_lens.max()), "softmax_scale": dim ** -0.5, "softcap": softcap}
    plain = ref_varlen(q, k, v, cu_seqlens_q=cu, seqused_k=seq_lens, causal=True, block_table=bt, **kw)

    plan = plan_windows(table, scheduled, computed, BS, min_prefix_tokens=8)
    w = window_tensors(plan, torch.cat([bt, torch.zeros(3, 8, dtype=torch.int32)]), seq_lens)  # padded rows
    assert w.suffix_block_table[0, :3].tolist() == [5, 10, 11]  # row 0 past its 4 prefix blocks
    assert w.suffix_block_table[1, :3].tolist() == [20, 21, 22]  # the prefill chunk: its whole table
    assert w.group_block_table.tolist() == [[1, 2, 3, 4], [40, 41, 42, 43]]
    assert w.suffix_seq_lens.tolist() == [11, 11, 9, 11, 6, 2, 3]
    out = torch.zeros_like(q)
    window_attention(q, k, v, out, cu, 3, w, dim ** -0.5, softcap, ref_varlen, ref_merge)
    torch.testing.assert_close(out, plain, rtol=1e-10, atol=1e-10)


def test_the_prefix_is_read_once_per_group():
    calls = []

    def counting(**kw):
        calls.append((len(kw["cu_seqlens_q"]) - 1, kw["causal"], kw["seqused_k"].tolist(), kw["max_seqlen_k"]))
        return ref_varlen(**kw)

    table, scheduled, computed = _batch()
    n = int(scheduled.sum())
    q = torch.randn(n, 4, 8, dtype=torch.float64)
    k = v = torch.randn(64, BS, 2, 8, dtype=torch.float64)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(scheduled)]), dtype=torch.int32)
    seq_lens = torch.tensor(computed + scheduled, dtype=torch.int32)
    w = window_tensors(plan_windows(table, scheduled, computed, BS, min_prefix_tokens=8), torch.tensor(table),
                       seq_lens)
    window_attention(q, k, v, torch.zeros_like(q), cu, 3, w, 0.3, 0.0, counting, ref_merge)
    suffix, prefix = calls
    assert suffix == (7, True, [11, 11, 9, 11, 6, 2, 3], 11)  # every row, past its prefix
    assert prefix == (2, False, [16, 16], 16)  # one sequence per group, its prefix once, no mask


@pytest.mark.parametrize(("on", "value"), [(True, "1"), (False, "0")])
def test_the_engine_core_is_told_by_the_environment(monkeypatch, on, value):
    import contextlib

    from serve_app.model.engines import engine_watch

    monkeypatch.setattr(engine_watch.os, "environ", dict(engine_watch.os.environ))
    with contextlib.suppress(ImportError):  # no vLLM on this machine: the environment is set before its import
        engine_watch.install(window_attention=on)
    assert engine_watch.os.environ[engine_watch.WINDOW_ATTENTION_ENV] == value
    assert engine_watch.os.environ[engine_watch.PARENT_ENV] == str(engine_watch.os.getpid())


def test_the_step_plan_is_read_from_the_batchs_block_table_and_counted(monkeypatch, caplog):
    import logging

    table, scheduled, computed = _batch()
    padded = np.zeros((12, 8), np.int32)  # vLLM's table has rows for max_num_seqs; the batch's come first
    padded[:7] = table
    block_table = type("T", (), {"block_table": type("B", (), {"np": padded})(), "block_size": BS})()
    batch = type("Batch", (), {"num_reqs": 7, "block_table": type("M", (), {"block_tables": [block_table]})()})()
    monkeypatch.setattr(wa, "_STEP", wa._Step())
    monkeypatch.setattr(wa, "LOG_EVERY_STEPS", 2)
    monkeypatch.setattr(wa.plan_windows, "__defaults__", (8,))
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        plan = wa.plan_step(batch, scheduled, computed)
        assert plan is not None and wa._STEP.plan is plan and list(plan.prefix_lens) == [16, 16]
        assert wa.plan_step(batch, np.full(7, 5), computed) is None  # all prefill: no plan for this step
    assert wa._STEP.plan is None
    assert "window attention: 1 of 2 engine steps, 2.0 windows per step" in caplog.text


def _fake_vllm(monkeypatch, fa_version=3):
    """vLLM's two modules that :func:`wa._runner_fits` reads, as doubles (no vLLM on the CPU machine)."""
    import sys
    import types

    torch_utils = types.ModuleType("vllm.utils.torch_utils")
    torch_utils.is_quantized_kv_cache = lambda dtype: dtype.startswith("fp8")
    backend = types.ModuleType("vllm.v1.attention.backend")
    backend.AttentionType = types.SimpleNamespace(DECODER="decoder")
    flash = types.ModuleType("vllm.v1.attention.backends.flash_attn")
    flash.get_flash_attn_version = lambda: fa_version
    for name, module in [("vllm.utils.torch_utils", torch_utils), ("vllm.v1.attention.backend", backend),
                         ("vllm.v1.attention.backends.flash_attn", flash)]:
        monkeypatch.setitem(sys.modules, name, module)
    wa._vllm_names.cache_clear()
    monkeypatch.setattr(wa, "_vllm_names", functools.cache(wa._vllm_names.__wrapped__))


def _runner(backends=("FLASH_ATTN",), cache_dtype="auto", kv_groups=1):
    import types

    group = [types.SimpleNamespace(backend=types.SimpleNamespace(get_name=lambda b=b: b)) for b in backends]
    return types.SimpleNamespace(kv_cache_config=types.SimpleNamespace(kv_cache_groups=[object()] * kv_groups),
                                 attn_groups=[group] * kv_groups, cache_config=types.SimpleNamespace(
                                     cache_dtype=cache_dtype))


@pytest.mark.parametrize(("engine", "fa_version", "fits"), [
    ({}, 3, True),
    ({"cache_dtype": "fp8"}, 3, False),  # an fp8 KV cache: vLLM's path (needs its descales)
    ({"cache_dtype": "fp8_e4m3"}, 3, False),
    ({"backends": ("FLASHINFER",)}, 3, False),
    ({"backends": ("FLASH_ATTN", "FLASHINFER")}, 3, False),
    ({"kv_groups": 2}, 3, False),  # e.g. sliding-window and full layers in two groups
    ({}, 2, False),  # FlashAttention 2 (Ampere): the window path is tested on 3 only
])
def test_steps_are_planned_only_on_an_engine_the_window_path_covers(monkeypatch, caplog, engine, fa_version, fits):
    import logging

    _fake_vllm(monkeypatch, fa_version)
    runner = _runner(**engine)
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        assert wa._runner_fits(runner) is fits
        assert wa._runner_fits(runner) is fits
    assert runner._cosmos_window_fits is fits  # decided once per runner
    assert caplog.text.count("window attention: ") == 1
    assert ("window attention: on" in caplog.text) is fits


def test_a_v2_model_runner_is_named_as_the_reason_the_window_path_is_off():
    import types

    assert "V2 model runner" in wa.inactive_reason(types.SimpleNamespace(use_v2_model_runner=True))
    assert wa.inactive_reason(types.SimpleNamespace(use_v2_model_runner=False)) is None
