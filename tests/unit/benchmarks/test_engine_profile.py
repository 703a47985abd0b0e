"""The engine-profile bench's pure parts: GPU busy time from a torch trace, the burst timeline."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from benchmarks.engine_profile import _timeline, kernel_kind, kernel_summary, main


def _trace(tmp_path, events, gz=True):
    path = tmp_path / ("t.pt.trace.json.gz" if gz else "t.pt.trace.json")
    data = json.dumps({"traceEvents": events})
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(data)
    else:
        path.write_text(data)
    return path


@pytest.mark.parametrize("gz", [True, False])
def test_busy_time_is_the_union_of_kernel_intervals(tmp_path, gz):
    events = [
        {"cat": "kernel", "name": "gemm", "ts": 0, "dur": 100},
        {"cat": "kernel", "name": "gemm", "ts": 50, "dur": 100},  # overlaps the first: 0..150
        {"cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 300, "dur": 50},  # 300..350
        {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1000},  # host time is not GPU time
        {"cat": "kernel", "name": "attn", "ts": 900, "dur": 100},  # 900..1000
    ]
    s = kernel_summary(_trace(tmp_path, events, gz))
    assert s["window_ms"] == pytest.approx(1.0)  # 0..1000 µs
    assert s["busy_ms"] == pytest.approx(0.3)  # 150 + 50 + 100 µs
    assert s["busy_fraction"] == pytest.approx(0.3)
    assert s["kernels"][0] == {"name": "gemm", "ms": 0.2, "calls": 2}
    assert {k["name"] for k in s["kernels"]} == {"gemm", "Memcpy HtoD", "attn"}
    assert s["kinds_ms"] == {"gemm": pytest.approx(0.2), "attention": pytest.approx(0.1), "copy": pytest.approx(0.05)}


@pytest.mark.parametrize(("name", "category", "kind"), [
    ("void flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>>>", "kernel",
     "attention"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "kernel", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "kernel", "gemm"),
    ("void cutlass::device_kernel<vllm::cutlass_3x_gemm_fp8>", "kernel", "gemm"),
    ("_topk_topp_kernel", "kernel", "sampler"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "kernel", "triton"),
    ("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", "copy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "kernel", "other"),
])
def test_kernels_are_sorted_into_kinds_by_name(name, category, kind):
    assert kernel_kind(name, category) == kind


def test_a_trace_without_kernels_says_so(tmp_path):
    assert kernel_summary(_trace(tmp_path, [{"cat": "cpu_op", "name": "x", "ts": 0, "dur": 5}])) == {"kernels": []}


def test_timeline_counts_from_the_first_arrival():
    rows = [
        {"queued": 10.0, "scheduled": 10.1, "first_token": 11.0, "last_token": 14.0},
        {"queued": 10.5, "scheduled": 12.0, "first_token": 15.0, "last_token": 16.0},
    ]
    t = _timeline(rows, prompt_tokens=1000)
    assert t["last_arrival_s"] == 0.5
    assert t["last_scheduled_s"] == 2.0
    assert t["last_first_token_s"] == 5.0
    assert t["last_token_s"] == 6.0
    assert t["prefill_tokens_per_s"] == 400.0  # 2 clips x 1000 tokens by 5 s
    assert t["decode_tail_s"] == 1.0
    assert t["prefill_s"]["mean"] == pytest.approx((0.9 + 3.0) / 2)  # scheduled -> first token


@pytest.mark.parametrize(("argv", "says"), [
    (["--profile-iters", "0"], "--profile-iters >= 1"),  # the default bursts include `profiled`
    (["--bursts", "cold", "profiled", "--profile-iters", "0"], "--profile-iters >= 1"),
    (["--inflight", "0", "--bursts", "cold"], "--inflight must be >= 1"),
    (["--bursts", "sustained", "--sustain-s", "40", "--sustain-warmup-s", "45"], "--sustain-warmup-s < --sustain-s"),
    (["--bursts", "sustained", "--sustain-warmup-s", "-1"], "0 <= --sustain-warmup-s"),
])
def test_arguments_that_would_waste_a_gpu_run_are_refused_before_the_engine_starts(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert says in capsys.readouterr().err


def test_a_clips_questions_share_its_id_and_salt_and_no_other_clip_does():
    import numpy as np

    from benchmarks.engine_profile import _prompts

    frames = np.zeros((4, 56, 56, 3), np.uint8)
    groups = _prompts([frames, frames], "frames", {}, ("Is anyone in danger?", "How many cars?"))
    assert [len(g) for g in groups] == [2, 2]
    for g in groups:
        salts = {p["cache_salt"] for p in g}
        assert len(salts) == 1
        assert {p["multi_modal_uuids"]["video"][0] for p in g} == salts  # the salt is the clip's multimodal id
        assert "Is anyone in danger?" in g[0]["prompt"] and "How many cars?" in g[1]["prompt"]
    assert groups[0][0]["cache_salt"] != groups[1][0]["cache_salt"]  # the same frames, another clip
    assert _prompts([frames], "frames", {})[0][0]["cache_salt"] != groups[0][0]["cache_salt"]  # nor another burst


class _Out:
    def __init__(self, tokens, prompt_len, metrics=None):
        self.outputs = [type("C", (), {"token_ids": tokens})()]
        self.prompt_token_ids = list(range(prompt_len))
        self.metrics = metrics


class _FakeEngine:
    """AsyncLLM.generate stand-in: logs submissions and first tokens; ``silent`` requests end without one."""

    def __init__(self, silent=()):
        self.log: list[tuple[str, str]] = []
        self.silent = set(silent)

    async def generate(self, prompt, sampling, rid):
        import asyncio

        self.log.append(("submit", rid))
        await asyncio.sleep(0.01)
        m = type("M", (), {"queued_ts": 1.0, "scheduled_ts": 1.1, "first_token_ts": 1.5, "last_token_ts": 2.0})()
        if rid in self.silent:
            yield _Out([], len(prompt["prompt"]), m)
            return
        self.log.append(("first", rid))
        yield _Out([1], len(prompt["prompt"]))
        await asyncio.sleep(0.01)
        yield _Out([2, 3], len(prompt["prompt"]), m)


def _groups(n_clips, n_questions):
    return [[{"prompt": f"q{q}" * (q + 1)} for q in range(n_questions)] for _ in range(n_clips)]


def test_later_questions_are_submitted_at_the_first_ones_first_token():
    import asyncio

    from benchmarks.engine_profile import _burst

    eng = _FakeEngine()
    out = asyncio.run(_burst(eng, _groups(2, 3), None, "b"))
    for clip in ("b-0", "b-1"):
        first_token = eng.log.index(("first", clip))
        later = [eng.log.index(("submit", f"{clip}-q{q}")) for q in (2, 3)]
        assert all(i > first_token for i in later)
    assert out["clips"] == 2 and out["questions_per_clip"] == 3
    assert out["answers_per_s"] == pytest.approx(3 * out["clips_per_s"], rel=1e-3)
    assert out["prompt_tokens"] == [len("q0")]  # the first questions' prompts only
    assert out["engine_timeline"]["last_token_s"] == 1.0  # from the first questions' engine timestamps
    # the later questions' own prefill (scheduled 1.1 s -> first token 1.5 s), from their engine timestamps
    assert out["later_prefill_s"]["p50"] == pytest.approx(0.4)
    assert "later_prefill_s" not in asyncio.run(_burst(_FakeEngine(), _groups(2, 1), None, "c"))


def test_a_first_question_that_ends_without_a_token_still_releases_the_others():
    import asyncio

    from benchmarks.engine_profile import _burst

    eng = _FakeEngine(silent={"b-0"})
    out = asyncio.run(_burst(eng, _groups(1, 2), None, "b"))
    assert ("first", "b-0-q2") in eng.log
    assert math.isnan(out["ttft_s"]["mean"])  # the first question's TTFT: none


def test_more_questions_than_the_set_holds_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--questions", "4", "--bursts", "cold"])
    assert e.value.code == 2
    assert "--questions" in capsys.readouterr().err


def test_the_sustained_loop_keeps_the_clips_in_flight_each_time_as_a_new_clip():
    import argparse
    import asyncio
    import itertools

    from benchmarks.engine_profile import _sustained

    made = itertools.count()

    def make_groups(clips):  # as _prompts: one group per clip, a fresh id for every call
        return [[{"prompt": f"q{q}" * (q + 1), "id": (c, next(made))} for q in range(3)] for c in clips]

    class _Recording(_FakeEngine):
        def __init__(self):
            super().__init__()
            self.prompts = []

        async def generate(self, prompt, sampling, rid):
            self.prompts.append(prompt)
            async for out in super().generate(prompt, sampling, rid):
                yield out

    eng = _Recording()
    args = argparse.Namespace(inflight=2, sustain_s=1.0, sustain_warmup_s=0.2, sustain_stagger_s=0.0)
    out = asyncio.run(_sustained(eng, ["clip-a", "clip-b", "clip-c"], make_groups, 3, None, args))
    windows = out["windows_used"]
    assert windows > 2 * 3  # the 3 clips were used again, more than once each (~0.03 s a window, 1 s of sending)
    assert out["questions_per_window"] == 3 and out["concurrency"] == 2
    assert out["counted"] > 0 and out["windows_per_s"] > 0
    heads = [p for p in eng.prompts if p["prompt"] == "q0"]
    assert len(heads) == windows
    assert len({p["id"] for p in heads}) == windows  # every window a new clip identity
    assert {p["id"][0] for p in heads} == {"clip-a", "clip-b", "clip-c"}  # the clips taken in turn
    for i in range(windows):  # each window's later questions went at its first one's first token
        first_token = eng.log.index(("first", f"sustained-{i}"))
        assert all(eng.log.index(("submit", f"sustained-{i}-q{q}")) > first_token for q in (2, 3))
    assert out["later_prefill_s"]["p50"] == pytest.approx(0.4)
    assert out["clips_per_s"] == out["windows_per_s_by_latency"]
