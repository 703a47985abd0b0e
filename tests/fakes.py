"""The fake stream models of the camera tests: what a :class:`~serve_app.cameras.registry.StreamRegistry`
calls with each window (``async model(question, clip)`` yielding the engine's events).

* :class:`FakeModel`: answers every window with a fixed text after ``delay_s`` (or yields ``fail``);
  records the questions and clips it saw.
* :class:`RecordingModel`: logs when each question starts and when its first token leaves (the
  shared-clip and ``ignore_eos`` tests).
* :class:`HoldingModel`: takes each window's clip and never answers; keeps only weak references
  to the clips (the memory-release tests).

The fake engines a model replica loads live in :mod:`serve_app.testing.engines`; the fake handles
of the in-process app in ``inprocess.py``.
"""

from __future__ import annotations

import asyncio
import weakref

from serve_app.protocol import ClipInfo, ClipQuestion, DecodedClip, Delta, Done, VideoInfo

#: 0.4 s of a dashcam: a looping file camera that wraps every 0.4 s of stream time.
LOOP_CLIP = "dashcam_0p4s.mp4"


def _info(clip: DecodedClip, decode_ms: float) -> ClipInfo:
    return ClipInfo(video=VideoInfo.of(clip), warnings=(), decode_ms=decode_ms, video_tokens=10, model="fake",
                    random_weights=True)  # fmt: skip


class FakeModel:
    """Answers every window with a fixed text after ``delay_s``; records what it saw."""

    def __init__(self, text="<think>looked</think><answer>yes, a person</answer>", delay_s=0.0, fail=None):
        self.text, self.delay_s, self.fail = text, delay_s, fail
        self.clips: list[DecodedClip] = []
        self.questions: list[ClipQuestion] = []

    async def __call__(self, question: ClipQuestion, clip: DecodedClip):
        self.questions.append(question)
        self.clips.append(clip)
        if self.fail is not None:
            yield self.fail
            return
        await asyncio.sleep(self.delay_s)
        yield _info(clip, clip.decode_ms)
        yield Delta(self.text, 3)
        yield Done("stop", 20, 3, queue_ms=0.0, model_ms=1.0, ttft_ms=1.0)


class RecordingModel:
    """Logs when each question starts and when its first token leaves: ``log`` holds
    ``(what, request id, clip_id)`` with ``what`` in ``start`` / ``first_token``."""

    def __init__(self, delay_s: float = 0.05):
        self.delay_s = delay_s
        self.log: list[tuple[str, str, str | None]] = []

    async def __call__(self, question, clip):
        self.log.append(("start", question.request_id, question.clip_id))
        await asyncio.sleep(self.delay_s)  # the prefill
        yield _info(clip, 0.0)
        self.log.append(("first_token", question.request_id, question.clip_id))
        yield Delta("<answer>no</answer>", 3)
        await asyncio.sleep(self.delay_s)  # the decode
        yield Done("stop", 20, 3, queue_ms=0.0, model_ms=1.0, ttft_ms=1.0)


class HoldingModel:
    """Takes each window's clip and never answers (until cancelled); keeps only weak references to the clips."""

    def __init__(self) -> None:
        self.clips: list[weakref.ref[DecodedClip]] = []

    async def __call__(self, question: ClipQuestion, clip: DecodedClip):
        self.clips.append(weakref.ref(clip))
        await asyncio.Event().wait()  # the stream is deleted meanwhile: cancelled here
        yield  # pragma: no cover - never reached
