"""Model replicas that share a GPU start one at a time.

Two vLLM engines may share one GPU (``model_replica.num_gpus: 0.5`` and ``engine_args.gpu_memory_utilization``
at most that share, e.g. ``configs/h200-pair.yaml``): a crash then leaves the other replica answering while
Serve restarts the dead one. Their *starts* must not overlap. vLLM sizes its KV cache from the GPU's free
memory measured before and after a profiling run, and refuses to start when another process released memory
meanwhile (vLLM 0.24 ``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``: "Error in memory
profiling ... This happens when other processes sharing the same container release GPU memory while vLLM
is profiling during initialization"); a neighbour that allocates meanwhile is counted as this engine's own
memory instead. So a replica takes an exclusive ``flock`` per visible GPU for its whole start (preflight,
engine build, warm-up). The kernel drops the lock when the holder's process ends, however it ends, so a
SIGKILLed replica never blocks the next one.

The lock files are ``cosmos-serve-gpu-start-<device>.lock`` in the temporary directory, one per entry of
``CUDA_VISIBLE_DEVICES`` (as Ray sets it for the replica: an index or a GPU UUID), taken in sorted order
(replicas on several GPUs cannot deadlock). Without ``CUDA_VISIBLE_DEVICES`` (a CPU replica) nothing is
locked.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from serve_app.log_limit import get_logger

logger = get_logger(__name__)

#: Seconds between attempts to take a held lock (the wait is a poll, so the start stays cancellable).
POLL_S = 0.2


def lock_paths(devices: str | None, lock_dir: str | Path | None = None) -> list[Path]:
    """The lock files for ``devices`` (a ``CUDA_VISIBLE_DEVICES`` value), sorted; [] when none is visible.

    Device names are reduced to ``[A-Za-z0-9_-]`` (GPU UUIDs keep their letters, digits and dashes).
    """
    base = Path(lock_dir or tempfile.gettempdir())
    names = sorted({re.sub(r"[^A-Za-z0-9_-]", "_", d.strip()) for d in (devices or "").split(",") if d.strip()})
    return [base / f"cosmos-serve-gpu-start-{n}.lock" for n in names]


@contextlib.asynccontextmanager
async def gpu_start_lock(
    devices: str | None = None, lock_dir: str | Path | None = None, poll_s: float = POLL_S
) -> AsyncIterator[float]:
    """Holds this process's GPUs' start locks for the body; yields the seconds waited for them.

    The locks are ``filelock``'s (an ``flock`` on Unix, already a dependency for the checkpoint builder).

    Args:
        devices: ``CUDA_VISIBLE_DEVICES`` (None: read from the environment).
        lock_dir: where the lock files are (None: the temporary directory).
        poll_s: seconds between attempts while another process holds a lock.

    Raises:
        OSError: a lock file cannot be created.
    """
    from filelock import AsyncFileLock

    if devices is None:
        devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    t0 = time.monotonic()
    held: list[AsyncFileLock] = []
    try:
        for path in lock_paths(devices, lock_dir):
            lock = AsyncFileLock(path)
            await lock.acquire(poll_interval=poll_s)
            held.append(lock)
        waited = time.monotonic() - t0
        if waited >= 1.0:
            logger.info("waited %.1f s for another model replica on GPU %s to finish starting", waited, devices)
        yield waited
    finally:
        for lock in reversed(held):
            await lock.release()
