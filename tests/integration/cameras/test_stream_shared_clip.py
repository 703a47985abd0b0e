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


def test_a_windows_questions_go_to_the_model_together_the_first_one_first(tmp_path):
    """To the model replica; its vLLM engine holds the later ones until the first has prefilled (test_prefill_gate)."""
    log, _events, _statuses = asyncio.run(watch(tmp_path, [spec("a", QUESTIONS)], windows=2))
    checked = 0
    for window in {rid.rsplit("-", 1)[0] for _, rid, _ in log}:
        order = [(what, rid.rsplit("-", 1)[1]) for what, rid, _ in log if rid.startswith(window + "-")]
        if ("first_token", "q0") not in order:
            continue
        starts = [q for what, q in order if what == "start"]
        assert starts == ["q0", "q1", "q2"]  # every question asked, the first one's call first
        assert order.index(("start", "q2")) < order.index(("first_token", "q0"))  # the replica has all three first
        checked += 1
    assert checked >= 2


def test_one_question_has_no_shared_identity(tmp_path):
    log, _events, _statuses = asyncio.run(watch(tmp_path, [spec("a", QUESTIONS[:1])], windows=2))
    assert {clip_id for what, _, clip_id in log if what == "start"} == {None}


class FirstFailsModel:
    """The first question of every window fails; the others wait until cancelled (logged)."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def __call__(self, question, clip):
        if question.request_id.endswith("-q0"):
            await asyncio.sleep(0.02)
            raise RuntimeError("engine broke")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(question.request_id)
            raise
        yield  # pragma: no cover - never reached


def test_when_the_first_question_fails_the_window_is_dropped_once_and_the_others_are_cancelled(tmp_path):
    model = FirstFailsModel()

    async def go():
        reg = StreamRegistry(config(tmp_path), model, StreamStore(str(tmp_path / "s.sqlite")))
        sid = reg.create(spec("a", QUESTIONS)).id
        await wait_for_async(lambda: reg.status(sid).windows_dropped.get("model_error", 0) >= 2, 30)
        status = reg.status(sid)
        await reg.close()
        return status

    status = asyncio.run(go())
    dropped = status.windows_dropped["model_error"]
    assert status.windows_answered == 0
    windows = {rid.rsplit("-", 1)[0] for rid in model.cancelled}
    # one drop per window (the later questions were cancelled, not counted), and they were asked, not held back
    assert len(windows) >= dropped - 1 and dropped >= 2
    assert all(rid.rsplit("-", 1)[1] in ("q1", "q2") for rid in model.cancelled)
    assert sum(status.windows_dropped.values()) == dropped
