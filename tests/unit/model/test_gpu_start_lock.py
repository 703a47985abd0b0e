"""serve_app.model.gpu_start_lock: replicas on one GPU start one at a time; a dead holder blocks nobody."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from serve_app.model.gpu_start_lock import gpu_start_lock, lock_paths

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fcntl")


def test_one_lock_per_visible_gpu_sorted_and_none_without_a_gpu(tmp_path):
    names = [p.name for p in lock_paths("1, 0,GPU-5e1a/x", tmp_path)]
    assert names == ["cosmos-serve-gpu-start-0.lock", "cosmos-serve-gpu-start-1.lock",
                     "cosmos-serve-gpu-start-GPU-5e1a_x.lock"]
    assert lock_paths("", tmp_path) == [] and lock_paths(None, tmp_path) == []


def test_two_starts_on_one_gpu_do_not_overlap_and_on_two_gpus_they_do(tmp_path):
    spans: dict[str, tuple[float, float]] = {}

    async def start(name: str, devices: str) -> None:
        async with gpu_start_lock(devices, tmp_path, poll_s=0.01):
            t0 = asyncio.get_running_loop().time()
            await asyncio.sleep(0.2)  # the engine's build and warm-up
            spans[name] = (t0, asyncio.get_running_loop().time())

    async def both(a: str, b: str) -> None:
        await asyncio.gather(start("a", a), start("b", b))

    asyncio.run(both("0", "0"))
    (_, a1), (b0, _) = sorted(spans.values())
    assert b0 >= a1  # the second started after the first had finished
    spans.clear()
    asyncio.run(both("0", "1"))
    (_, a1), (b0, _) = sorted(spans.values())
    assert b0 < a1  # different GPUs: at the same time


def test_the_lock_is_free_again_after_its_holder_is_killed(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import asyncio, sys, time
            from serve_app.model.gpu_start_lock import gpu_start_lock
            async def main():
                async with gpu_start_lock("0", {str(tmp_path)!r}):
                    print("held", flush=True)
                    time.sleep(60)
            asyncio.run(main())
        """)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"

        async def try_take() -> float:
            async with asyncio.timeout(0.5):
                async with gpu_start_lock("0", tmp_path, poll_s=0.01) as waited:
                    return waited

        with pytest.raises(TimeoutError):  # held by a live process
            asyncio.run(try_take())
        holder.kill()  # SIGKILL: no clean-up runs in the holder
        holder.wait(10)
        assert asyncio.run(try_take()) < 0.5  # the kernel released it with the process
    finally:
        holder.kill()
        holder.wait(10)


def test_a_start_that_fails_releases_the_lock(tmp_path):
    async def failing() -> None:
        async with gpu_start_lock("0", tmp_path):
            raise RuntimeError("engine did not start")

    with pytest.raises(RuntimeError):
        asyncio.run(failing())

    async def again() -> float:
        async with asyncio.timeout(1), gpu_start_lock("0", tmp_path, poll_s=0.01) as waited:
            return waited

    assert asyncio.run(again()) < 1
