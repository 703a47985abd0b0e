"""Memory of a local Serve over a bench: summed RSS of its processes, sampled in the background."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

from benchmarks import replicas


@dataclasses.dataclass(frozen=True)
class RssSample:
    """One sample of the Serve processes (controller, proxy, replicas).

    Attributes:
        t_s: seconds since the sampler was made.
        rss_bytes: summed resident memory, bytes.
        private_bytes: summed RSS minus shared pages (mostly Ray's object store), bytes.
        processes: Serve processes found.
        loadavg_1m: the machine's 1-minute load average.
        phase: the bench's label at that moment.
    """

    t_s: float
    rss_bytes: int
    private_bytes: int
    processes: int
    loadavg_1m: float
    phase: str

    def row(self) -> dict[str, Any]:
        """The sample as written in result files (MiB, one decimal)."""
        return {"t_s": self.t_s, "rss_mb": mib(self.rss_bytes), "private_mb": mib(self.private_bytes),
                "processes": self.processes, "phase": self.phase, "loadavg_1m": self.loadavg_1m}


def mib(n_bytes: float) -> float:
    """Bytes → MiB, one decimal."""
    return round(n_bytes / 2**20, 1)


class RssSampler:
    """Samples :func:`benchmarks.replicas.serve_rss_bytes` every ``period_s`` seconds.

    Set :attr:`phase` to label the samples that follow; :meth:`run` samples until its event is set.
    """

    def __init__(self, period_s: float = 1.0, on_sample: Callable[[RssSample], None] | None = None):
        self.period_s = period_s
        self.on_sample = on_sample
        self.phase = "idle"
        self.samples: list[RssSample] = []
        self._t0 = time.monotonic()

    async def run(self, stop: asyncio.Event) -> None:
        """Samples until ``stop`` is set (one sample at least)."""
        while True:
            rss, private, n = await asyncio.to_thread(replicas.serve_rss_bytes)
            sample = RssSample(round(time.monotonic() - self._t0, 1), rss, private, n, os.getloadavg()[0], self.phase)
            self.samples.append(sample)
            if self.on_sample is not None:
                self.on_sample(sample)
            try:
                await asyncio.wait_for(stop.wait(), self.period_s)
                return
            except TimeoutError:
                pass

    def of_phase(self, phase: str) -> list[RssSample]:
        """The samples labelled ``phase``."""
        return [s for s in self.samples if s.phase == phase]
