"""What a stream may ask for: its limits and the frame memory it reserves (Ray-free).

A stream holds frames for as long as it runs, so the stream worker's memory is budgeted:

* :func:`check_stream_limits`: the limits a stream definition must pass (window length, sampling
  rate, frames per window, questions, tokens), and the clip routes' check of user text (no
  chat-template control tokens in a question, :func:`serve_app.model.prompt.check_user_text`). The
  ingress checks them at registration (:func:`serve_app.cameras.routes.validate_stream`, with the
  source checks), and the stream worker again for every stream it resumes from the database: a
  stored stream that no longer passes (the config changed since, or it was written before a check
  existed) is shown as ``failed`` with the reason, never started.
* :func:`stream_frame_bytes`: the most bytes of frames one stream can hold at once in the
  worker. Each stream reserves it against ``streams.max_frame_memory_bytes`` when it is
  registered or resumed (:class:`serve_app.cameras.registry.StreamRegistry`); a stream that does
  not fit is refused (503 naming the budget) or, resumed, failed with the reason.

How a stream holds its frames (:mod:`serve_app.cameras.held`): the frames of the window being
filled and of the windows waiting for the model are kept at the model's size in planar YUV 4:2:0
(1.5 bytes per pixel, half of RGB); a window becomes an RGB clip (3 bytes per pixel; the vision
tower's bf16 patches with ``model.vision_input: patches``: 6 more) only when the model takes it,
and leaves the worker for Ray's object store at once.
"""

from __future__ import annotations

import math

from serve_app.cameras.protocol import StreamCreate
from serve_app.cameras.scene_change import CELL_PX
from serve_app.config import AppConfig, PixelBudget
from serve_app.decode.sampling import even_frame_count, frame_pixel_cap
from serve_app.errors import InvalidRequestError, PayloadTooLargeError
from serve_app.model.prompt import check_user_text
from serve_app.text import TEXT_LAYOUT, has_control_chars

#: Bytes per pixel of a held frame: planar YUV 4:2:0 at the model's size (a full-size luma plane,
#: two quarter-size chroma planes).
COMPACT_BYTES_PER_PIXEL = 1.5
#: Bytes per pixel of the clip handed to the model: RGB24.
RGB_BYTES_PER_PIXEL = 3
#: ... and with ``model.vision_input: patches``: the RGB clip and its bf16 patches (3 values per
#: pixel, 2 bytes each) exist together while the patches are made.
PATCHES_BYTES_PER_PIXEL = RGB_BYTES_PER_PIXEL + 6
#: A source smaller than the model's minimum frame area is enlarged to it, its sides rounded up to
#: multiples of 28 pixels: up to ~23 % more than the minimum for aspect ratios up to 4:1. The
#: reservation allows this much; a camera whose frames come out larger still (a tiny, very elongated
#: picture) is failed with the reason when its first frame arrives.
SMALL_SOURCE_AREA_FACTOR = 1.25


def frames_per_window(window_s: float, fps: float) -> int:
    """Most frames one window of ``window_s`` seconds sampled at ``fps`` holds (≥ 1)."""
    return max(1, math.ceil(window_s * fps - 1e-9))


def frame_area_bound(n_frames: int, budget: PixelBudget) -> int:
    """The most pixels one frame of a ``n_frames``-frame window is reserved for (see
    :data:`SMALL_SOURCE_AREA_FACTOR`): the pixel budget's per-frame cap at that count, at least the
    enlarged minimum."""
    enlarged_minimum = int(SMALL_SOURCE_AREA_FACTOR * budget.min_frame_pixels)
    return max(frame_pixel_cap(even_frame_count(n_frames), budget), enlarged_minimum)


def stream_frame_bytes(spec: StreamCreate, config: AppConfig) -> int:
    """The most bytes of frames the stream ``spec`` holds at once in the stream worker.

    The window being filled, ``streams.pending_windows`` windows waiting for the model and the window
    being handed to it, each in YUV 4:2:0, plus that window as the model's input (RGB, or RGB and
    patches), all at :func:`frame_area_bound` pixels per frame; with ``skip_unchanged``, the
    change measure's grids of those windows and its reference grid (4 bytes per ``CELL_PX``² pixels).
    """
    n = frames_per_window(spec.window_s, spec.fps)
    area = frame_area_bound(n, config.decode.budget)
    compact = n * area * COMPACT_BYTES_PER_PIXEL
    per_pixel = PATCHES_BYTES_PER_PIXEL if config.model.vision_input == "patches" else RGB_BYTES_PER_PIXEL
    model_input = even_frame_count(n) * area * per_pixel
    held = compact * (config.streams.pending_windows + 2) + model_input
    if spec.skip_unchanged is not None:  # the change measure's float32 grids: each held window's, and the reference
        grid = area / CELL_PX**2 * 4
        held += grid * (n * (config.streams.pending_windows + 2) + 1)
    return int(held)


def mib(n_bytes: float) -> str:
    """``n_bytes`` in MiB for messages, e.g. ``"367 MiB"``."""
    return f"{n_bytes / 2**20:.0f} MiB"


def check_stream_limits(spec: StreamCreate, config: AppConfig) -> None:
    """Checks a stream definition against the configured limits (no I/O: the source checks are apart).

    Raises:
        InvalidRequestError (400): a value over a ``streams.*`` / ``limits.*`` limit (the message names
            the value, the limit and its setting), or a question holding a chat-template control token
            (``<|im_end|>``, ``<|video_pad|>`` …: it would end the user's turn or add a video), or
            ``ignore_eos`` on a server without ``model.allow_ignore_eos``.
        PayloadTooLargeError (413): a question over ``limits.max_question_chars``.
    """
    s, lim = config.streams, config.limits
    if spec.window_s > s.max_window_s:
        raise InvalidRequestError(
            f"window_s is {spec.window_s:g}; the limit is {s.max_window_s:g} s (streams.max_window_s)", param="window_s"
        )
    if spec.fps > s.max_fps:
        raise InvalidRequestError(f"fps is {spec.fps:g}; the limit is {s.max_fps:g} (streams.max_fps)", param="fps")
    if spec.ignore_eos and not config.model.allow_ignore_eos:
        raise InvalidRequestError(
            "ignore_eos is a benchmark-only option and this server does not enable it (model.allow_ignore_eos: false)",
            param="ignore_eos",
        )
    if spec.every_s is not None and spec.every_s < spec.window_s:
        raise InvalidRequestError("every_s must be at least window_s (windows do not overlap)", param="every_s")
    frames = spec.window_s * spec.fps
    cap = min(s.max_window_frames, lim.max_frames)
    if frames > cap:
        raise InvalidRequestError(
            f"window_s × fps = {frames:g} frames per window; the limit for streams is {cap} "
            "(streams.max_window_frames: a stream holds its windows for as long as it runs); "
            "lower window_s or fps",
            param="fps",
        )
    if frames < 1:
        raise InvalidRequestError("window_s × fps must give at least one frame per window", param="fps")
    if len(spec.questions) > s.max_questions:
        raise InvalidRequestError(
            f"{len(spec.questions)} questions; the limit is {s.max_questions} (streams.max_questions)",
            param="questions",
        )
    if any(len(q) > lim.max_question_chars for q in spec.questions):
        raise PayloadTooLargeError(
            f"a question is longer than {lim.max_question_chars} characters (limits.max_question_chars)",
            param="questions",
        )
    for i, question in enumerate(spec.questions):  # the clip routes' check: every question reaches the model
        check_user_text(question, f"questions.{i}")
    if spec.max_tokens is not None and spec.max_tokens > lim.max_tokens:
        raise InvalidRequestError(
            f"max_tokens is {spec.max_tokens}; the limit is {lim.max_tokens} (limits.max_tokens)", param="max_tokens"
        )
    check_stored_text(spec)


def check_stored_text(spec: StreamCreate) -> None:
    """Refuses control characters in the text a stream stores and logs (:data:`serve_app.text.CONTROL_CHARS`):
    none in ``name``, ``url`` and ``webhook``; in questions only tabs and line breaks (a question may have lines).

    A newline, ESC or NUL in a stream's name forged log lines; logged fields are escaped as well
    (:func:`serve_app.text.log_safe`).

    Raises:
        InvalidRequestError (400): names the field.
    """
    fields: list[tuple[str, str | None, str]] = [("name", spec.name, ""), ("url", spec.url, ""),
                                                 ("webhook", spec.webhook, "")]  # fmt: skip
    fields += [(f"questions.{i}", q, TEXT_LAYOUT) for i, q in enumerate(spec.questions)]
    for param, value, allow in fields:
        if value is not None and has_control_chars(value, allow):
            kinds = "control characters (e.g. a newline, ESC or NUL)" if not allow else (
                "control characters other than tabs and line breaks (e.g. ESC or NUL)")
            raise InvalidRequestError(f"{param} contains {kinds}; they are refused in stored text", param=param)
