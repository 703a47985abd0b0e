"""Several questions about one stream window share the clip's server-made identity (no Ray: real reader threads
on a looping file, a fake model)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from fakes import LOOP_CLIP as CLIP
from fakes import RecordingModel

from serve_app.cameras.protocol import AnswerEvent, StreamCreate
from serve_app.cameras.registry import StreamRegistry
from serve_app.cameras.store import StreamStore
from serve_app.config import AppConfig
from serve_app.testing.polling import wait_for_async

DATA = Path(__file__).resolve().parents[2] / "data"
QUESTIONS = ["Is anyone in danger?", "How many cars?", "Is the road wet?"]


def config(tmp_path) -> AppConfig:
    return AppConfig.model_validate(
        {"sources": {"allowed_roots": [str(DATA)]}, "streams": {"db_path": str(tmp_path / "s.sqlite")}}
    )


async def watch(tmp_path, specs, windows: int):
    model = RecordingModel()
    reg = StreamRegistry(config(tmp_path), model, StreamStore(str(tmp_path / "s.sqlite")))
    ids = [reg.create(spec).id for spec in specs]
    await wait_for_async(lambda: all(reg.status(i).windows_answered >= windows for i in ids), 30)
    events = reg.events.since(0).events
    statuses = [reg.status(i) for i in ids]
    await reg.close()
    return model.log, events, statuses


def spec(name: str, questions: list[str]) -> StreamCreate:
    return StreamCreate(url=CLIP, name=name, window_s=0.5, fps=4, loop=True, questions=questions)


def test_a_windows_questions_share_one_clip_id_distinct_across_windows_and_streams(tmp_path):
    log, events, statuses = asyncio.run(watch(tmp_path, [spec("a", QUESTIONS), spec("b", QUESTIONS)], windows=3))
    assert all(s.windows_answered >= 3 for s in statuses)
    by_window: dict[tuple[str, str], set[str | None]] = {}
    for what, rid, clip_id in log:
        if what == "start":
            stream, window, _q = rid.rsplit("-", 2)
            by_window.setdefault((stream, window), set()).add(clip_id)
    complete = {k: v for k, v in by_window.items() if len(v) == 1}
    assert len(complete) >= 6  # 2 streams × 3 windows at least
    clip_ids = [next(iter(v)) for v in complete.values()]
    assert len(set(clip_ids)) == len(clip_ids)  # never shared across windows or streams
    for clip_id in clip_ids:
        assert clip_id is not None and re.fullmatch(r"[0-9a-f]{32}", clip_id)  # server-made, nothing of the client
    answers = [e for e in events if isinstance(e, AnswerEvent)]
    assert {e.question_index for e in answers} == {0, 1, 2}


def test_the_later_questions_start_after_the_first_ones_first_token(tmp_path):
    log, _events, _statuses = asyncio.run(watch(tmp_path, [spec("a", QUESTIONS)], windows=2))
    for window in {rid.rsplit("-", 1)[0] for _, rid, _ in log}:
        order = [(what, rid.rsplit("-", 1)[1]) for what, rid, _ in log if rid.startswith(window + "-")]
        if ("first_token", "q0") not in order:
            continue
        first_token = order.index(("first_token", "q0"))
        starts = {q: order.index(("start", q)) for q in ("q0", "q1", "q2") if ("start", q) in order}
        assert starts["q0"] < first_token
        assert all(starts[q] > first_token for q in ("q1", "q2") if q in starts)


def test_one_question_has_no_shared_identity(tmp_path):
    log, _events, _statuses = asyncio.run(watch(tmp_path, [spec("a", QUESTIONS[:1])], windows=2))
    assert {clip_id for what, _, clip_id in log if what == "start"} == {None}
