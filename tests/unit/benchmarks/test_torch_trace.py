"""GPU busy time and kernel kinds from a torch profiler trace."""

from __future__ import annotations

import gzip
import json

import pytest

from benchmarks.torch_trace import kernel_kind, kernel_summary


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
