"""The typed values of the streams API (``/v1/streams``, ``/v1/events``), Ray-free.

* :class:`StreamCreate`: the body of ``POST /v1/streams`` (a camera to watch).
* :class:`AlertRule`: a bounded-cost rule on an answer (keywords or yes/no; no regex at all,
  so no backtracking).
* :class:`StreamStatus`: one stream as ``GET /v1/streams/{id}`` returns it.
* :class:`SkipUnchanged`: quiet scenes, skipped windows (opt-in per stream).
* :class:`AnswerEvent`, :class:`AlertEvent`, :class:`SkippedEvent`, :class:`StateEvent`: the server-sent events of
  ``GET /v1/streams/{id}/events`` and ``GET /v1/events`` (each with an ``id`` for ``Last-Event-ID``).

These models cross the ingress ↔ stream-worker handle and leave as JSON responses.
"""

from __future__ import annotations

import re
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Stream states: connecting (first open), running (frames arrive), reconnecting (the camera
#: failed or stalled; retried with backoff), failed (a permanent error: retrying cannot help).
StreamState: TypeAlias = Literal["connecting", "running", "reconnecting", "failed"]

#: Why a window was not answered: the model fell behind (newest wins), the model refused it
#: (queue full / replica unavailable), or the model answered with an error.
DropReason: TypeAlias = Literal["model_behind", "model_busy", "model_error"]

#: Longest alert keyword, characters; most keywords per rule.
MAX_KEYWORD_CHARS = 64
MAX_KEYWORDS = 16

_WORD = re.compile(r"[a-z0-9]+")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlertRule(_Frozen):
    """When an answer raises an alert. Cost is linear in the answer's length: words are split
    once, keywords compared as whole words/phrases (case-insensitive); no regular expression
    from the client is ever compiled.

    ``kind``:
      * ``keywords``: the answer contains any (``match: any``) or all (``match: all``) keywords;
      * ``yes`` / ``no``: the answer's first word is yes / no.
    """

    kind: Literal["keywords", "yes", "no"] = Field("keywords", description="What the rule looks for.")
    keywords: list[str] = Field(
        default_factory=list,
        max_length=MAX_KEYWORDS,
        description=f"Words or phrases (at most {MAX_KEYWORDS}, {MAX_KEYWORD_CHARS} characters each).",
    )
    match: Literal["any", "all"] = Field("any", description="keywords: any one or all of them.")

    @field_validator("keywords")
    @classmethod
    def _keywords(cls, v: list[str]) -> list[str]:
        out = []
        for k in v:
            words = _WORD.findall(k.lower())
            if not words or len(k) > MAX_KEYWORD_CHARS:
                raise ValueError(f"each keyword must have a letter or digit and at most {MAX_KEYWORD_CHARS} characters")
            out.append(" ".join(words))
        return out

    def matches(self, answer: str) -> list[str]:
        """The keywords (or ``yes``/``no``) that matched ``answer``; empty: no alert. O(len(answer))."""
        words = _WORD.findall(answer.lower())
        if self.kind in ("yes", "no"):
            return [self.kind] if words[:1] == [self.kind] else []
        if not self.keywords:
            return []
        text = " " + " ".join(words) + " "
        hits = [k for k in self.keywords if f" {k} " in text]
        if self.match == "all":
            return hits if len(hits) == len(self.keywords) else []
        return hits


class SkipUnchanged(_Frozen):
    """Quiet scenes: windows whose picture did not change are not sent to the model.

    The change measure (``serve_app.cameras.scene_change``): the window's frames as coarse grey grids,
    brightness matched, compared with the last answered window's last frame and with each other;
    its value is the largest fraction of grid cells that changed. Sensor noise, compression
    flicker and slow or global light changes do not count; changes smaller than about one cell
    (~16 px of the model-size frame) do not either.
    """

    threshold: float = Field(
        0.01, gt=0, le=1,
        description="Fraction of grid cells (0-1) that must change for a window to be answered; below it the "
        "window is skipped. 0.01 is ~4 cells of a 448x252 frame's 15x28 grid.",
    )
    max_skip_s: float = Field(
        60.0, gt=0, le=86400,
        description="Stream seconds after the last answered window's end past which a window is answered "
        "whatever its measure (a forced answer).",
    )


class StreamCreate(_Frozen):
    """``POST /v1/streams``: a camera to watch. Limits beyond these shapes come from ``streams.*``."""

    url: str = Field(
        ...,
        min_length=1,
        max_length=4096,
        description="rtsp://, http(s):// (progressive MP4/MPEG-TS/MJPEG) or a path under sources.allowed_roots.",
    )
    name: str | None = Field(None, max_length=80, description="A label for the dashboard and logs.")
    window_s: float = Field(10.0, gt=0, description="Window length in stream seconds.")
    fps: float = Field(4.0, gt=0, description="Frames sampled per second of stream time.")
    every_s: float | None = Field(
        None, gt=0, description="Seconds between window starts (default window_s; ≥ window_s)."
    )
    questions: list[str] = Field(
        ..., min_length=1, description="Questions asked about every window; the first is the standing question."
    )
    max_tokens: int | None = Field(None, gt=0, description="Answer budget in tokens (default: the model's).")
    ignore_eos: bool = Field(False, description="Benchmark-only: answers run to max_tokens; needs "
                             "model.allow_ignore_eos.")
    loop: bool = Field(False, description="Files: replay in real time, from the start again at the end.")
    alert: AlertRule | None = Field(None, description="When an answer raises an alert.")
    webhook: str | None = Field(None, max_length=4096, description="http(s) URL that receives alerts as JSON POSTs.")
    skip_unchanged: SkipUnchanged | None = Field(
        None, description="Skip windows in which nothing changed since the last answer (off when absent)."
    )

    @field_validator("questions")
    @classmethod
    def _questions(cls, v: list[str]) -> list[str]:
        if any(not q.strip() for q in v):
            raise ValueError("questions must not be empty")
        return v


class LatencySummary(_Frozen):
    """Percentiles over the last answers of a stream (None: no answer yet)."""

    p50: float | None = Field(None, description="Median.")
    p95: float | None = Field(None, description="95th percentile.")
    count: int = Field(0, description="Answers in the sample.")


class LastAnswer(_Frozen):
    """The latest answer of a stream."""

    event_id: int = Field(..., description="The id of the answer event it came in (the stream worker's own count).")
    window_index: int = Field(..., description="The window it answers (0: the stream's first window).")
    answer: str = Field(..., description="The <answer> part of the text, or the whole text without that format.")
    reasoning: str | None = Field(..., description="The <think> part of the text, if any.")
    answered_at: float = Field(..., description="Wall clock (Unix seconds).")
    random_weights: bool = Field(..., description="True: the model's weights are random; the text is meaningless.")


class WebhookCounts(_Frozen):
    """A stream's alert webhook deliveries since the worker started it."""

    delivered: int = Field(0, description="Answered with a 2xx.")
    failed: int = Field(0, description="Ended without a 2xx (after retries; a 3xx or 4xx at once).")
    skipped: int = Field(
        0,
        description="Not attempted: streams.webhook_max_in_flight_per_stream (this stream) or "
        "streams.webhook_max_in_flight (all streams) deliveries were in flight.",
    )


class StreamStatus(_Frozen):
    """One stream: ``GET /v1/streams/{id}`` and the items of ``GET /v1/streams``."""

    object: Literal["stream"] = Field("stream", description="Always stream.")
    id: str = Field(..., description="The stream's id, made by the server (str_<hex>).")
    name: str | None = Field(..., description="The label given at creation, or null.")
    url: str = Field(..., description="The source, with any user:password removed.")
    state: StreamState = Field(
        ..., description="connecting (first open), running (frames arrive), reconnecting (the camera failed or "
        "stalled; retried with backoff) or failed (a permanent error)."
    )
    window_s: float = Field(..., description="Window length in stream seconds.")
    every_s: float = Field(..., description="Seconds between window starts.")
    fps: float = Field(..., description="Frames sampled per second of stream time.")
    questions: list[str] = Field(..., description="Questions asked about every window; the first is the standing one.")
    loop: bool = Field(..., description="Files: replayed in real time, from the start again at the end.")
    alert: AlertRule | None = Field(..., description="The alert rule, or null.")
    created_at: float = Field(..., description="Unix seconds.")
    worker: int = Field(
        0, description="Index of the stream worker that reads this camera (0 … streams.workers − 1: crc32(id) mod it)."
    )
    frames_received: int = Field(..., description="Frames decoded since the worker started this stream.")
    windows_cut: int = Field(..., description="Windows cut from the camera since the worker started this stream.")
    windows_answered: int = Field(..., description="Windows whose first question the model answered.")
    windows_dropped: dict[str, int] = Field(..., description="Dropped windows by reason (see DropReason).")
    windows_skipped: int = Field(0, description="Windows not sent to the model: unchanged (skip_unchanged).")
    skip_unchanged: SkipUnchanged | None = Field(None, description="The quiet-scene settings, or null (off).")
    alerts: int = Field(..., description="Answers that matched the alert rule.")
    webhooks: WebhookCounts = Field(default_factory=WebhookCounts, description="Alert webhook deliveries.")
    reconnects: int = Field(..., description="Times the camera was opened again after a failure or stall.")
    last_error: str | None = Field(..., description="The last error of the camera or of the model, or null.")
    latency_ms: LatencySummary = Field(..., description="Window handed to the model → answer, ms.")
    freshness_s: LatencySummary = Field(..., description="Answer time − window end (wall clock), seconds.")
    last_answer: LastAnswer | None = Field(..., description="The newest answer to the first question, or null.")


class StreamList(_Frozen):
    """``GET /v1/streams``."""

    object: Literal["list"] = Field("list", description="Always list.")
    data: list[StreamStatus] = Field(..., description="Every stream, on every stream worker.")


class Deleted(_Frozen):
    """``DELETE /v1/streams/{id}``."""

    id: str = Field(..., description="The deleted stream's id.")
    object: Literal["stream"] = Field("stream", description="Always stream.")
    deleted: bool = Field(True, description="Always true: the stream is stopped and its camera closed.")


class WindowTimes(_Frozen):
    """Where a window lies: stream time (seconds from the stream's first frame; looping files keep
    counting) and wall clock (Unix seconds when its first and last frames arrived)."""

    start_s: float = Field(..., description="The window's first frame, stream seconds.")
    end_s: float = Field(..., description="The window's end, stream seconds.")
    wall_start: float = Field(..., description="When its first frame arrived, Unix seconds.")
    wall_end: float = Field(..., description="When its last frame arrived, Unix seconds.")


class AnswerTimings(_Frozen):
    """Milliseconds: decode (sampling + resize of the window), queue (waiting for the model), model, total."""

    decode_ms: float = Field(..., description="Sampling and resizing the window's frames.")
    queue_ms: float | None = Field(..., description="Waiting in the engine before generation started (null: unknown).")
    model_ms: float | None = Field(..., description="Generation after the queue (null: unknown).")
    ttft_ms: float | None = Field(..., description="Engine call to the first token (null: no token).")
    latency_ms: float = Field(..., description="Window handed to the model → answer.")
    freshness_s: float = Field(..., description="Answer time − window end (wall clock), seconds.")


class AnswerUsage(_Frozen):
    """Token counts of one answer."""

    prompt_tokens: int | None = Field(..., description="Prompt tokens, video tokens included (null: unknown).")
    completion_tokens: int = Field(..., description="Generated tokens.")
    video_tokens: int = Field(..., description="Tokens the window's frames take in the prompt.")


class _Event(_Frozen):
    id: int = Field(
        ..., description="The stream worker's event number (increasing). To resume an event stream, send the "
        "last SSE id: line back as Last-Event-ID: with several stream workers that is a cursor over all of them."
    )
    stream_id: str = Field(..., description="The stream it is about.")
    time: float = Field(..., description="Wall clock, Unix seconds.")


class AnswerEvent(_Event):
    """One answered window (one question)."""

    type: Literal["answer"] = Field("answer", description="Also the SSE event name.")
    window_index: int = Field(..., description="The window answered (0: the stream's first window).")
    question_index: int = Field(..., description="Which of the stream's questions (0: the standing one).")
    question: str = Field(..., description="The question, as asked.")
    window: WindowTimes = Field(..., description="Where the window lies in stream time and wall clock.")
    frames: int = Field(..., description="Frames sampled from the window (before any padding to an even count).")
    answer: str = Field(..., description="The <answer> part of the text, or the whole text without that format.")
    reasoning: str | None = Field(..., description="The <think> part of the text, if any.")
    finish_reason: str | None = Field(..., description="stop, length or abort (the engine's); null if unknown.")
    timings: AnswerTimings = Field(..., description="Where the time went.")
    usage: AnswerUsage = Field(..., description="Token counts.")
    model: str = Field(..., description="The served model name.")
    random_weights: bool = Field(..., description="True: the model's weights are random; the text is meaningless.")
    note: str | None = Field(
        None, description="The random-weights note, or why the answer format was not followed, or null."
    )
    windows_dropped: int = Field(..., description="The stream's dropped windows so far.")


class AlertEvent(_Event):
    """An answer that matched the stream's alert rule."""

    type: Literal["alert"] = Field("alert", description="Also the SSE event name.")
    window_index: int = Field(..., description="The window whose answer matched.")
    answer_event_id: int = Field(..., description="The id of the answer event that matched.")
    matched: list[str] = Field(..., description="The keywords (or yes / no) found in the answer.")
    answer: str = Field(..., description="The answer that matched.")
    random_weights: bool = Field(..., description="True: the model's weights are random; the text is meaningless.")


class SkippedEvent(_Event):
    """A window not sent to the model because nothing changed (``skip_unchanged``): the answer of
    window ``since_window_index`` stands. Alert rules never match a skipped window."""

    type: Literal["skipped"] = Field("skipped", description="Also the SSE event name.")
    window_index: int = Field(..., description="The window not sent to the model.")
    window: WindowTimes = Field(..., description="Where the window lies in stream time and wall clock.")
    since_window_index: int = Field(..., description="The last answered window, whose answer stands.")
    change: float = Field(..., description="The window's change measure (fraction of grid cells).")
    threshold: float = Field(..., description="The stream's skip_unchanged threshold it stayed under.")
    message: str = Field(..., description="unchanged since window k; previous answer stands (with the measure).")


class StateEvent(_Event):
    """A stream's state changed (or it was created / deleted)."""

    type: Literal["state"] = Field("state", description="Also the SSE event name.")
    state: StreamState | Literal["deleted"] = Field(..., description="The new state (deleted: the stream was deleted).")
    previous: StreamState | None = Field(..., description="The state before (null: the stream is new).")
    error: str | None = Field(None, description="Why the camera failed or is reconnecting, or null.")


StreamEvent: TypeAlias = AnswerEvent | AlertEvent | SkippedEvent | StateEvent


class EventBatch(_Frozen):
    """What the stream worker hands the ingress per poll: events after ``after`` (oldest first)."""

    events: list[AnswerEvent | AlertEvent | SkippedEvent | StateEvent] = Field(..., description="Oldest first.")
    missed: bool = Field(False, description="Events between `after` and the first one fell out of the history.")
    last_id: int = Field(0, description="The newest event id the worker has handed out.")


RANDOM_WEIGHTS_NOTE = "random-weight model: the text is meaningless (the pipeline is real)"
