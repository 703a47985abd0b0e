"""Per-window cascade attention on the GPU: FlashAttention 3 and vLLM's merge, against plain paged attention.

Needs vLLM and a CUDA GPU of FlashAttention 3 (Hopper; skipped otherwise, as on the CPU CI); no model is
loaded. The shapes are Cosmos-Reason1-7B's (28 query heads, 4 KV heads of 128, bf16, 16-token blocks).
Run on the GPU machine with ``bash benchmarks/gpu_machine.sh tests``.
"""

import importlib.util

import numpy as np
import pytest

NO_VLLM = importlib.util.find_spec("vllm") is None
pytestmark = pytest.mark.skipif(NO_VLLM, reason="vLLM is not installed")

HEADS, KV_HEADS, DIM, BS = 28, 4, 128, 16


def _batch(rng, windows=8, questions=3, prefix_blocks=64):
    """Rows: ``windows`` windows of ``questions`` decode rows sharing ``prefix_blocks`` blocks, then 2 lone decode
    rows and a 300-token prefill chunk. Returns the block table, query tokens and computed tokens per row."""
    rows, next_block = [], 1

    def take(n):
        nonlocal next_block
        next_block += n
        return list(range(next_block - n, next_block))

    for _ in range(windows):
        shared = take(prefix_blocks)
        for _ in range(questions):
            computed = prefix_blocks * BS + int(rng.integers(3, 300))  # the question and the tokens so far
            rows.append((shared + take(computed // BS + 1 - prefix_blocks), computed, 1))
    for computed in (700, 2000):
        rows.append((take(computed // BS + 1), computed, 1))
    rows.append((take((500 + 300) // BS + 1), 500, 300))
    table = np.zeros((len(rows), max(len(r[0]) for r in rows)), np.int32)
    for i, (blocks, _, _) in enumerate(rows):
        table[i, : len(blocks)] = blocks
    return table, np.array([r[2] for r in rows]), np.array([r[1] for r in rows]), next_block


def test_window_attention_matches_flash_attention_on_the_whole_context():
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("FlashAttention 3 needs a Hopper GPU")
    from vllm.v1.attention.backends.fa_utils import flash_attn_varlen_func
    from vllm.v1.attention.ops.merge_attn_states import merge_attn_states

    from serve_app.model.engines.vllm_window_attention import plan_windows, window_attention, window_tensors

    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    table, scheduled, computed, num_blocks = _batch(rng)
    dev = torch.device("cuda")
    k = torch.randn(num_blocks, BS, KV_HEADS, DIM, dtype=torch.bfloat16, device=dev)
    v = torch.randn(num_blocks, BS, KV_HEADS, DIM, dtype=torch.bfloat16, device=dev)
    q = torch.randn(int(scheduled.sum()), HEADS, DIM, dtype=torch.bfloat16, device=dev)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(scheduled)]), dtype=torch.int32, device=dev)
    seq_lens = torch.tensor(computed + scheduled, dtype=torch.int32, device=dev)
    bt = torch.tensor(table, device=dev)
    common = {"max_seqlen_q": int(scheduled.max()), "max_seqlen_k": int(seq_lens.max()),
              "softmax_scale": DIM ** -0.5, "fa_version": 3}
    plain = flash_attn_varlen_func(q=q, k=k, v=v, cu_seqlens_q=cu, seqused_k=seq_lens, causal=True,
                                   block_table=bt, **common)

    plan = plan_windows(table, scheduled, computed, BS)
    assert plan is not None and len(plan.prefix_lens) == 8 and set(plan.prefix_lens.tolist()) == {64 * BS}
    out = torch.empty_like(q)
    w = window_tensors(plan, bt, seq_lens)
    assert w.max_suffix_len == int(seq_lens.max())  # the lone rows and the chunk: their whole context
    window_attention(q, k, v, out, cu, common["max_seqlen_q"], w, DIM ** -0.5, 0.0, flash_attn_varlen_func,
                     merge_attn_states, fa_version=3)
    torch.cuda.synchronize()
    # bf16 outputs of two summation orders: within a few bf16 steps of each other (values ~N(0, 1/sqrt(context)))
    torch.testing.assert_close(out.float(), plain.float(), atol=2e-2, rtol=2e-2)
    assert (out.float() - plain.float()).abs().mean().item() < 2e-3


def test_an_engine_runs_a_windows_questions_through_the_window_path_with_the_answers_of_vllms_path(monkeypatch):
    """The patches in a real engine (in-process, so the test reads the counts): 4 windows of 3 questions decoded
    greedily through the window path, then again through vLLM's; the engine is the same, the prefix cached."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("FlashAttention 3 needs a Hopper GPU")
    from pathlib import Path

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    from vllm import LLM, SamplingParams

    from benchmarks.engine_profile import _prompts
    from benchmarks.workload import QUESTIONS
    from serve_app.decode.vision_patches import patchify
    from serve_app.model.checkpoint import ensure_checkpoint
    from serve_app.model.engines import vllm_window_attention as wa
    from serve_app.model.engines.vllm_patches import accept_processed_video

    dummy = Path(__file__).resolve().parents[2] / "checkpoints" / "cosmos-reason1-7b-dummy"
    ensure_checkpoint("full-dummy", dummy)
    accept_processed_video()
    assert wa.install_window_attention()
    llm = LLM(model=str(dummy), load_format="dummy", dtype="bfloat16", enable_mm_embeds=True, max_model_len=16384,
              gpu_memory_utilization=0.5, max_num_seqs=32, enable_prefix_caching=True, disable_cascade_attn=False)
    frames = np.random.default_rng(0).integers(0, 256, (40, 420, 756, 3), dtype=np.uint8)
    groups = _prompts([patchify(frames, 4.0)] * 4, "patches", {}, QUESTIONS[:3])  # 4 windows, a salt each
    llm.generate([g[0] for g in groups], SamplingParams(max_tokens=1))  # each window's video into the prefix cache
    greedy = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    prompts = [p for g in groups for p in g]

    try:
        wa._STEP.active, wa._STEP.planned, wa._STEP.groups, wa._STEP.window_layers = True, 0, 0, 0
        on = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, greedy)]
        planned, groups_seen, layers, steps = (wa._STEP.planned, wa._STEP.groups, wa._STEP.window_layers,
                                               wa._STEP.steps)
        wa._STEP.active = False
        off = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, greedy)]
    finally:
        wa._STEP.active = True
        del llm  # the GPU memory back for the tests after this one
        import gc

        gc.collect()
        torch.cuda.empty_cache()

    # the decode steps (15 per request) took the window path; none planned: the engine log's "window attention: off"
    assert planned >= 10, f"{planned} of {steps} engine steps planned, {layers} layers on the window path"
    assert groups_seen / planned == pytest.approx(4, abs=0.5)  # the 4 windows, each a group of its 3 questions
    assert layers == planned * 28  # every decoder layer of those steps (Qwen2.5-7B: 28)
    assert all(len(t) == 16 for t in on + off)
    # Random weights: bf16 near-ties between two summation orders can flip a token, after which a request's
    # tokens part; a wrong attention changes them all.
    same = sum(a == b for a, b in zip(on, off, strict=True))
    assert same >= 9, f"{same} of 12 requests decoded the same tokens on both paths"
