"""Delta coalescing before chunks cross a DeploymentHandle.

The streams run in virtual time (``tests/clock.py``): token gaps and the
coalescing interval take no wall time, and the times asserted are exact.
"""

import asyncio

import pytest
from clock import run_virtual

from serve_app.model.coalesce import coalesce_deltas
from serve_app.protocol import Delta, Done


async def source(n_tokens: int, gap_s: float, log: list | None = None, fail: bool = False):
    try:
        yield "clip"
        for i in range(n_tokens):
            await asyncio.sleep(gap_s)
            yield Delta(text=f"t{i} ", completion_tokens=i + 1)
        if fail:
            raise RuntimeError("engine broke")
        yield Done(finish_reason="length", prompt_tokens=1, completion_tokens=n_tokens)
    finally:
        if log is not None:
            log.append("source closed")


def coalesced(n_tokens: int, gap_s: float, interval_s: float) -> list[tuple[float, object]]:
    """(virtual time, chunk) of each chunk ``coalesce_deltas`` yields for a stream of ``n_tokens``."""

    async def main():
        loop = asyncio.get_running_loop()
        return [(loop.time(), c) async for c in coalesce_deltas(source(n_tokens, gap_s), interval_s, clock=loop.time)]

    return run_virtual(main())


def test_deltas_are_merged_first_passes_at_once_and_nothing_is_lost():
    out = coalesced(40, 0.005, 0.05)
    assert out[0][1] == "clip" and isinstance(out[-1][1], Done)
    deltas = [(t, c) for t, c in out if isinstance(c, Delta)]
    assert deltas[0] == (pytest.approx(0.005), Delta(text="t0 ", completion_tokens=1))  # TTFT untouched
    assert "".join(d.text for _, d in deltas) == "".join(f"t{i} " for i in range(40))
    assert deltas[-1][1].completion_tokens == 40
    # 0.2 s of tokens leave in 50-ms batches, not as 40 items; the rest as soon as the stream ends
    assert [round(t, 6) for t, _ in deltas] == [0.005, 0.055, 0.105, 0.155, 0.2]
    assert [d.completion_tokens for _, d in deltas] == [1, 10, 20, 30, 40]


def test_zero_interval_passes_everything_through():
    out = coalesced(10, 0.005, 0)
    assert [t for t, c in out if isinstance(c, Delta)] == pytest.approx([0.005 * k for k in range(1, 11)])


def test_errors_arrive_after_the_text_before_them():
    got = []

    async def run():
        async for c in coalesce_deltas(source(5, 0.001, fail=True), 0.05, clock=asyncio.get_running_loop().time):
            got.append(c)

    with pytest.raises(RuntimeError, match="engine broke"):
        run_virtual(run())
    assert "".join(c.text for c in got if isinstance(c, Delta)) == "t0 t1 t2 t3 t4 "


def test_a_consumer_that_leaves_closes_the_source():
    log = []

    async def run():
        agen = coalesce_deltas(source(1000, 0.001, log), 0.02, clock=asyncio.get_running_loop().time)
        async for c in agen:
            if isinstance(c, Delta):
                break
        await agen.aclose()
        await asyncio.sleep(0.01)

    run_virtual(run())
    assert log == ["source closed"]
