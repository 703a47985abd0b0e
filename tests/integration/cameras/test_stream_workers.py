"""Several stream workers (``streams.workers``) sharing one database, without Ray: who owns which stream,
each worker's share of the limits, disjoint event ids, and what each resumes after a restart or a new count."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fakes import FakeModel

from serve_app.cameras.protocol import StreamCreate
from serve_app.cameras.registry import StreamRegistry
from serve_app.cameras.shards import shard_of
from serve_app.cameras.store import StreamStore
from serve_app.config import AppConfig
from serve_app.errors import OverloadedError

DATA = Path(__file__).resolve().parents[2] / "data"
SPEC = StreamCreate(url="dashcam_0p4s.mp4", window_s=0.5, fps=4, questions=["anyone?"], loop=True)


def config(db: Path, workers: int, **streams) -> AppConfig:
    return AppConfig.model_validate(
        {"sources": {"allowed_roots": [str(DATA)]},
         "streams": {"db_path": str(db), "workers": workers, "max_streams": 4, **streams}}
    )  # fmt: skip


def registries(cfg: AppConfig) -> list[StreamRegistry]:
    store = cfg.streams.db_path
    return [StreamRegistry(cfg, FakeModel(), StreamStore(store), shard=k) for k in range(cfg.streams.workers)]


def test_two_workers_split_the_streams_the_limits_and_the_event_ids(tmp_path):
    cfg = config(tmp_path / "streams.sqlite", 2)

    async def main():
        regs = registries(cfg)
        made = [[reg.create(SPEC) for _ in range(2)] for reg in regs]
        with pytest.raises(OverloadedError) as full:  # max_streams 4 over 2 workers: 2 each
            regs[0].create(SPEC)
        await asyncio.sleep(0.5)  # the readers connect: state events on both workers
        events = [reg.events.since(0).events for reg in regs]
        for reg in regs:
            await reg.close()
        return regs, made, full.value, events

    regs, made, full, events = asyncio.run(main())
    for k, statuses in enumerate(made):
        assert all(s.worker == k and shard_of(s.id, 2) == k for s in statuses)
    assert "the limit is 2 (streams.max_streams over streams.workers 2" in full.message and full.status == 503
    assert [r.max_frame_memory_bytes for r in regs] == [cfg.streams.max_frame_memory_bytes // 2] * 2
    ids = [{e.id for e in ev} for ev in events]
    assert ids[0] and ids[1] and not ids[0] & ids[1]
    assert all(i % 2 == k for k in (0, 1) for i in ids[k])


def test_each_worker_resumes_its_own_streams_and_a_new_count_resumes_them_all(tmp_path):
    db = tmp_path / "streams.sqlite"

    async def register():
        regs = registries(config(db, 2))
        ids = [{reg.create(SPEC).id for _ in range(2)} for reg in regs]
        for reg in regs:
            await reg.close()
        return ids

    async def resume(workers: int):
        regs = registries(config(db, workers))
        counts = [reg.resume() for reg in regs]
        owned = [set(reg.streams) for reg in regs]
        states = {s.state for reg in regs for s in reg.list()}
        for reg in regs:
            await reg.close()
        return counts, owned, states

    ids = asyncio.run(register())
    counts, owned, states = asyncio.run(resume(2))
    assert counts == [2, 2] and owned == ids and "failed" not in states
    # one worker now: it owns every stored stream (none lost, none refused: 4 fit max_streams 4)
    counts, owned, states = asyncio.run(resume(1))
    assert counts == [4] and owned == [ids[0] | ids[1]] and "failed" not in states
    # three workers: each resumes the streams that hash to it, together all four
    counts, owned, _ = asyncio.run(resume(3))
    assert sum(counts) == 4 and set().union(*owned) == ids[0] | ids[1]
    assert all(shard_of(sid, 3) == k for k, own in enumerate(owned) for sid in own)


def test_a_stream_worker_of_more_replicas_is_refused_naming_streams_workers():
    with pytest.raises(ValueError, match=r"stream_worker runs one replica .* set streams\.workers"):
        AppConfig.model_validate({"stream_worker": {"num_replicas": 2}})
    with pytest.raises(ValueError, match=r"streams\.workers"):
        AppConfig.model_validate({"stream_worker": {"autoscaling_config": {"min_replicas": 1, "max_replicas": 3}}})
    assert AppConfig.model_validate({"streams": {"max_streams": 0}, "stream_worker": {"num_replicas": 2}})  # API off
