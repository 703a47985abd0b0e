"""Issue 25, "memory returned when streams end": what a stream held is freed when it ends (Ray-free).

Real reader threads on a looping file camera and a fake model; no Ray. Python's cyclic garbage
collector is off while a stream is deleted, so what the tests see freed was freed by reference
counting at the deletion, as in an idle worker (where a full collection may not run for hours),
not by a collection that happened to run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import HoldingModel

from serve_app.cameras.held import ReadyWindow
from serve_app.cameras.protocol import StreamCreate, StreamState
from serve_app.cameras.reader import CameraReader
from serve_app.cameras.registry import StreamRegistry
from serve_app.cameras.store import StreamStore
from serve_app.config import AppConfig
from serve_app.testing.polling import wait_for_async

DATA = Path(__file__).resolve().parents[2] / "data"
CLIP = "dashcam_0p4s.mp4"  # 0.4 s, replayed in real time when looping
WAIT_S = 120.0  # generous: the reader decodes in real time on a loaded 2-core machine


def config(tmp_path: Path) -> AppConfig:
    return AppConfig.model_validate({
        "sources": {"allowed_roots": [str(DATA)]},
        "streams": {"db_path": str(tmp_path / "streams.sqlite"), "reconnect_initial_s": 0.2, "reconnect_max_s": 0.5},
    })  # fmt: skip


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@pytest.fixture
def sticky_executor(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """``asyncio.to_thread`` that keeps every callable it ran: an executor's worker refers to its work item
    for a moment after the awaiting coroutine resumes (1.5 % of 2,000 calls on a quiet machine), which made
    the deletion test below fail in CI (2026-12-02) when the registry joined ``reader.join``."""
    kept: list[object] = []
    real = asyncio.to_thread

    async def to_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        kept.append((fn, args, kwargs))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    return kept


@pytest.mark.parametrize("executor", ["asyncio", "sticky"])
def test_a_deleted_stream_leaves_no_frames_windows_or_state_behind(tmp_path, executor, request):
    """After ``delete``: the stream's state, reader, the frames of the window it was cutting and the clip
    the model was answering are all unreachable, and its reader thread has ended — also when the executor
    still holds what it ran (``sticky``)."""
    kept = request.getfixturevalue("sticky_executor") if executor == "sticky" else []
    cfg = config(tmp_path)
    model = HoldingModel()

    async def main():
        reg = StreamRegistry(cfg, model, StreamStore(cfg.streams.db_path))
        try:
            spec = StreamCreate(url=CLIP, loop=True, questions=["q"], window_s=1, fps=8)
            sid = reg.create(spec).id

            def open_window_frames() -> int:
                reader = reg.streams[sid].reader
                assert reader is not None
                win = reader.cutter._open
                return 0 if win is None else len(win.frames)

            # the model holds window 0's clip and the reader has frames of a later window
            assert await wait_for_async(lambda: bool(model.clips) and open_window_frames() >= 2, WAIT_S)
            with no_cyclic_gc():
                st = reg.streams[sid]
                reader = st.reader
                assert reader is not None and reader.cutter._open is not None
                thread = reader._thread
                held = [weakref.ref(x) for x in (st, reader, reader.cutter._open, *reader.cutter._open.frames)]
                del st, reader
                await reg.delete(sid)
                alive = [type(r()).__name__ for r in held if r() is not None]
                clip_alive = [r() is not None for r in model.clips]
            return alive, clip_alive, thread, len(reg.streams)
        finally:
            await reg.close()

    alive, clip_alive, thread, n = asyncio.run(main())
    assert n == 0
    assert not thread.is_alive()
    assert alive == []  # LiveStream, CameraReader, the open Window and its frames
    assert clip_alive and not any(clip_alive)  # the window the model was answering
    assert (executor == "sticky") == bool(kept)  # the sticky executor ran the registry's joins


def test_a_reader_lets_go_of_its_open_window_when_its_thread_ends(tmp_path):
    """A file that ends inside a window (0.4 s of a 1 s window, loop off): the window never completes, and
    its frames are dropped when the reader's thread ends, while the reader object may still be referenced."""
    cfg = config(tmp_path)
    states: list[tuple[StreamState, str | None]] = []
    windows: list[ReadyWindow] = []
    spec = StreamCreate(url=CLIP, loop=False, questions=["q"], window_s=1, fps=8)
    reader = CameraReader(spec, cfg, windows.append, lambda s, e: states.append((s, e)))
    frames_at_end: list[int] = []
    cut = reader.cutter.push

    def push(t_s: float, frame: object, wall: float | None = None) -> list:
        done = cut(t_s, frame, wall)
        frames_at_end[:] = [0 if reader.cutter._open is None else len(reader.cutter._open.frames)]
        return done

    reader.cutter.push = push  # records how many frames the open window held
    reader.start()
    reader.join(WAIT_S)
    assert not reader._thread.is_alive()
    assert states[-1] == ("failed", "the file ended (loop is off)") and windows == []
    assert frames_at_end and frames_at_end[0] >= 2  # the open window held frames when the file ended
    assert reader.cutter._open is None
