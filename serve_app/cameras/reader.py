"""One camera's reader: open the source, decode continuously, cut windows (one thread).

A :class:`CameraReader` runs in its own thread (PyAV blocks), so a stalled camera never holds
another. It opens the camera (:func:`serve_app.cameras.opening.open_source`: a file under
``sources.allowed_roots``, replayed in real time forever with ``loop: true``; ``rtsp://``;
``http(s)://``), and passes each decoded frame's presentation time to the stream's
:class:`~serve_app.cameras.windows.WindowCutter`; the frames it keeps are held compactly by
:class:`~serve_app.cameras.held.HeldFrames`, and each completed window is handed on as a
:class:`~serve_app.cameras.held.ReadyWindow` (with its thumbnail).

Failures (refused, stalled past ``streams.read_timeout_s``, the stream ended) are reported and
retried after :class:`~serve_app.cameras.windows.Backoff` delays, until ``streams.max_failed_connects``
attempts in a row brought no frame; errors retrying cannot fix
(:class:`~serve_app.cameras.opening.PermanentSourceError`: a path outside the roots, a file that is not a
video, a stream without video, an HTTP body that is not what its first bytes say, …) end in state
``failed`` at once, with the reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import av
import numpy as np

from serve_app.cameras.held import HeldFrames, ReadyWindow, jpeg_thumbnail
from serve_app.cameras.opening import PermanentSourceError, open_source
from serve_app.cameras.protocol import StreamCreate, StreamState
from serve_app.cameras.rules import frames_per_window
from serve_app.cameras.scene_change import held_luma, luma_grid
from serve_app.cameras.windows import Backoff, Window, WindowCutter
from serve_app.config import AppConfig
from serve_app.decode.container import configure_decoder, video_stream
from serve_app.errors import ServeAppError
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.sources.http_source import PinnedHttpBody
from serve_app.sources.rtsp_relay import RtspRelay
from serve_app.sources.rules import url_scheme
from serve_app.text import log_safe

logger = get_logger(__name__)


class CameraReader:
    """Reads one camera until :meth:`stop` (see the module docstring).

    Args:
        spec: the stream's definition.
        config: the application config (sources, limits, decode, streams).
        on_window: called (in the reader thread) with each :class:`ReadyWindow`.
        on_state: called with ``(state, error message or None)`` on every state change.
        on_frame: called once per decoded frame (counting).
    """

    def __init__(
        self,
        spec: StreamCreate,
        config: AppConfig,
        on_window: Callable[[ReadyWindow], None],
        on_state: Callable[[StreamState, str | None], None],
        on_frame: Callable[[], None] = lambda: None,
    ):
        self.spec, self.config = spec, config
        self.scheme = url_scheme(spec.url)  # None: a file path (serve_app.sources.rules.url_scheme decides, once)
        self.on_window, self.on_state, self.on_frame = on_window, on_state, on_frame
        every_s = spec.every_s or spec.window_s
        self.held = HeldFrames(frames_per_window(spec.window_s, spec.fps), config)
        self.cutter: WindowCutter[np.ndarray] = WindowCutter(spec.window_s, every_s, spec.fps, self.held)
        s = config.streams
        self.backoff = Backoff(s.reconnect_initial_s, s.reconnect_max_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.run, daemon=True, name="camera-reader")
        self._offset_s = 0.0  # stream time of this connection's first frame
        self._last_t = 0.0
        self._last_wall = 0.0
        self.reconnects = 0
        self._log_key = f"camera reader {id(self):x}"  # this reader's repeated messages (serve_app.log_limit)
        self._source: RtspRelay | PinnedHttpBody | None = None  # what the open container reads through

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Asks the reader to stop (it closes its source within about a read timeout)."""
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    @property
    def thread(self) -> threading.Thread:
        """The reader's thread. Join this rather than :meth:`join` from another thread when the reader must
        be freed at once: an executor's worker still refers to the callable it ran for a moment after the
        caller resumes, and a finished :class:`threading.Thread` no longer refers to its target (the reader)."""
        return self._thread

    def run(self) -> None:
        """Reads, reconnecting with backoff, until stopped or a permanent error; the open window's frames
        go when it ends (the container and source are closed by :meth:`_read_once`)."""
        try:
            self._read_until_stopped()
        finally:
            self.cutter.reset()

    def _read_until_stopped(self) -> None:
        attempt = 0
        self.on_state("connecting", None)
        while not self._stop.is_set():
            got_frames = False
            try:
                got_frames = self._read_once()
                if self._stop.is_set():
                    return
                if self.spec.loop and got_frames:
                    attempt = 0
                    continue  # replay from the start; stream time keeps counting
                if self.scheme is not None or self.spec.loop:
                    raise ConnectionError("the stream ended")
                self.on_state("failed", "the file ended (loop is off)")
                return
            except PermanentSourceError as e:
                self.on_state("failed", str(e))
                return
            except Exception as e:  # noqa: BLE001 - any camera failure is reported and retried
                if self._stop.is_set():
                    return
                msg = _message(e)
                if got_frames or getattr(e, "got_frames", False):
                    attempt = 0
                delay = self.backoff.delay_s(attempt)
                attempt += 1
                limit = self.config.streams.max_failed_connects
                if limit and attempt >= limit:  # the same camera failing every time: say so and stop
                    self.on_state(
                        "failed",
                        f"{msg} ({attempt} connection attempts in a row brought no frame; "
                        "streams.max_failed_connects)",
                    )
                    return
                self.reconnects += 1
                LOG_LIMIT.log(  # a camera failing the same way forever must not flood the log
                    logger, logging.INFO, self._log_key,
                    "stream %s: %s; reconnecting in %.1f s", log_safe(self.spec.name or "-"), log_safe(msg), delay,
                )
                self.on_state("reconnecting", msg)
                self.cutter.reset()
                if self._stop.wait(delay):
                    return

    def _close_source(self) -> None:
        """Closes the relay or HTTP body the open container reads through (idempotent)."""
        source, self._source = self._source, None
        if source is not None:
            source.close()

    def _read_once(self) -> bool:
        """One connection: decode until the source ends or fails. Returns whether frames arrived."""
        container, self._source = open_source(self.spec.url, self.scheme, self.config)
        got = False
        try:
            try:
                stream = video_stream(container, param="url")
            except ServeAppError as e:
                raise PermanentSourceError(e.message) from None
            configure_decoder(stream, self.config.decode.threads)
            tb = float(stream.time_base or 0) or 1 / 90000
            rate = float(stream.average_rate) if stream.average_rate else None
            is_file = self.scheme is None
            # Files and HTTP sources (a progressive MP4 may be a file on a web server) are paced by their
            # timestamps; an RTSP camera paces itself.
            paced = self.scheme != "rtsp"
            # A new connection continues stream time where the last one stopped (plus the wall-clock gap).
            if self._last_wall:
                self._offset_s = self._last_t + max(
                    1e-3, time.time() - self._last_wall if not is_file else 1 / (rate or 25)
                )
            wall0 = time.monotonic()
            first_pts = None
            for n, frame in enumerate(container.decode(stream)):
                if self._stop.is_set():
                    return got
                ts = frame.pts if frame.pts is not None else frame.dts
                if ts is None:
                    ts_s = n / (rate or 25)
                else:
                    first_pts = ts if first_pts is None else first_pts
                    ts_s = (ts - first_pts) * tb
                if paced:  # real-time pacing: show each frame at its presentation time
                    delay = wall0 + ts_s - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        return got
                t = self._offset_s + ts_s
                if not got:
                    got = True
                    self.on_state("running", None)
                self.on_frame()
                self._last_t, self._last_wall = t, time.time()
                for w in self.cutter.push(t, frame, self._last_wall):
                    self._emit(w, rate)
            return got
        except Exception as e:
            e.got_frames = got  # type: ignore[attr-defined]  # tags the error for run() (read with getattr)
            raise
        finally:
            container.close()
            self._close_source()

    def _emit(self, window: Window[np.ndarray], source_fps: float | None) -> None:
        if not window.frames:
            return
        spent_ms = self.held.spent_s * 1000
        self.held.spent_s = 0.0
        thumb = jpeg_thumbnail(self.held.rgb(window.frames[-1]), self.config.streams.thumbnail_width)
        # the change measure's grids, here in the reader's thread (a block mean per frame), not on the worker's loop
        grids = [luma_grid(held_luma(f)) for f in window.frames] if self.spec.skip_unchanged is not None else None
        self.on_window(ReadyWindow(
            window, thumb, spent_ms, self.held, self.spec.fps, self.held.store.source_size or (0, 0), source_fps,
            patches=self.config.model.vision_input == "patches", grids=grids,
        ))  # fmt: skip


def _message(e: BaseException) -> str:
    if isinstance(e, ServeAppError):
        return e.message
    if isinstance(e, av.error.FFmpegError):
        return f"camera error: {e.strerror or type(e).__name__}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
