"""Handing freed memory back to the system (glibc's allocator; a no-op elsewhere).

The stream worker allocates and frees window frames (150 KB to 1 MB each) from many reader
threads for as long as it runs. glibc serves allocations over its mmap threshold with their own
mapping, returned to the system on ``free``, but raises that threshold to the size of any such
block freed (up to 32 MiB): from then on frames come from the threads' heaps, and what those heaps
free stays in the process (a worker that held 2.9 GiB for eight big streams still held 2.8 GiB
after they were deleted, issue 25). :func:`fix_mmap_threshold` pins the threshold, so every frame
buffer is a mapping of its own and goes back when freed; :func:`release_freed_memory` trims what
the heaps hold free (called after a stream is deleted).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

from serve_app.log_limit import get_logger

logger = get_logger(__name__)

#: ``mallopt`` parameter number of the mmap threshold (glibc ``malloc.h``: ``M_MMAP_THRESHOLD -3``).
M_MMAP_THRESHOLD = -3
#: Allocations at or over this many bytes get a mapping of their own (glibc's initial threshold).
MMAP_THRESHOLD_BYTES = 128 * 1024


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def fix_mmap_threshold(threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pins glibc's mmap threshold at ``threshold_bytes`` for this process (see the module docstring).

    Returns:
        Whether it was set (False: not glibc).
    """
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(threshold_bytes)))


def release_freed_memory() -> bool:
    """Returns the free memory of every heap of this process to the system (``malloc_trim(0)``).

    Returns:
        Whether memory was returned (False: nothing to return, or not glibc).
    """
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.malloc_trim(ctypes.c_size_t(0)))
