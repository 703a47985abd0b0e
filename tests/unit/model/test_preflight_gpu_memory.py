"""The GPU-holder preflight: a replica whose GPU another process holds fails at once, naming the holder."""

from __future__ import annotations

import pytest

from serve_app.model.preflight import GpuHolder, GpuMemory, HardwareError, check_gpu_free, gpu_memory_problems

GIB = 1024**3
ENGINE = GpuHolder(11623, "VLLM::EngineCore", 129 * GIB)


def gpu(free_gib: float, *holders: GpuHolder) -> GpuMemory:
    return GpuMemory(index=0, total_bytes=140 * GIB, free_bytes=int(free_gib * GIB), holders=holders)


def test_a_free_gpu_has_no_problem():
    assert gpu_memory_problems([gpu(139.5)], 0.9) == []
    assert gpu_memory_problems([gpu(126.0)], 0.9) == []  # exactly what the engine asks for (0.9 x 140 GiB)


def test_a_held_gpu_names_the_holder_and_what_to_do():
    [line] = gpu_memory_problems([gpu(10.0, ENGINE)], 0.9)
    assert "GPU 0 has 10.0 GiB free of 140.0 GiB" in line
    assert "126.0 GiB" in line  # what the engine asks for
    assert "pid 11623 (VLLM::EngineCore, 129.0 GiB)" in line
    assert "kill 11623" in line and "gpu_memory_utilization" in line


def test_memory_held_by_no_listed_process_is_said_so():
    [line] = gpu_memory_problems([gpu(10.0)], 0.9)
    assert "no process this driver lists" in line and "kill" not in line


def test_only_the_short_gpu_is_named():
    other = GpuMemory(index=1, total_bytes=140 * GIB, free_bytes=139 * GIB, holders=())
    found = gpu_memory_problems([other, GpuMemory(2, 140 * GIB, 1 * GIB, (ENGINE,))], 0.5)
    assert len(found) == 1 and found[0].startswith("GPU 2 ")


def test_the_check_waits_for_a_holder_that_lets_go():
    reads = iter([[gpu(10.0, ENGINE)], [gpu(10.0, ENGINE)], [gpu(139.0)]])
    slept = []
    check_gpu_free(0.9, grace_s=10, read=lambda: next(reads), sleep=slept.append)
    assert slept == [0.5, 0.5]


def test_the_check_fails_after_the_grace_with_the_holders_pid():
    slept = []
    with pytest.raises(HardwareError, match=r"pid 11623 .*waited 2 s"):
        check_gpu_free(0.9, grace_s=2, read=lambda: [gpu(10.0, ENGINE)], sleep=slept.append)
    assert sum(slept) == 2


def test_the_check_steps_aside_when_nvml_cannot_be_read():
    def broken() -> list[GpuMemory]:
        raise OSError("NVML: driver not loaded")

    check_gpu_free(0.9, read=broken, sleep=lambda s: None)  # vLLM's own memory check still runs after it
