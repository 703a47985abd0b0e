"""Delta coalescing before chunks cross a DeploymentHandle."""

import asyncio

import pytest

from serve_app.protocol import Delta, Done
from serve_app.streaming import coalesce_deltas

pytestmark = pytest.mark.unit


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


async def collect(agen):
    return [c async for c in agen]


def test_deltas_are_merged_first_passes_at_once_and_nothing_is_lost():
    out = asyncio.run(collect(coalesce_deltas(source(40, 0.005), 0.05)))
    assert out[0] == "clip" and isinstance(out[-1], Done)
    deltas = [c for c in out if isinstance(c, Delta)]
    assert deltas[0].text == "t0 "  # TTFT untouched
    assert "".join(d.text for d in deltas) == "".join(f"t{i} " for i in range(40))
    assert 2 <= len(deltas) < 20  # ~0.2 s of tokens in 50-ms batches, not 40 items
    assert deltas[-1].completion_tokens == 40


def test_zero_interval_passes_everything_through():
    out = asyncio.run(collect(coalesce_deltas(source(10, 0), 0)))
    assert len([c for c in out if isinstance(c, Delta)]) == 10


def test_errors_arrive_after_the_text_before_them():
    got = []

    async def run():
        async for c in coalesce_deltas(source(5, 0.001, fail=True), 0.05):
            got.append(c)

    with pytest.raises(RuntimeError, match="engine broke"):
        asyncio.run(run())
    assert "".join(c.text for c in got if isinstance(c, Delta)) == "t0 t1 t2 t3 t4 "


def test_a_consumer_that_leaves_closes_the_source():
    log = []

    async def run():
        agen = coalesce_deltas(source(1000, 0.001, log), 0.02)
        async for c in agen:
            if isinstance(c, Delta):
                break
        await agen.aclose()
        await asyncio.sleep(0.01)

    asyncio.run(run())
    assert log == ["source closed"]
