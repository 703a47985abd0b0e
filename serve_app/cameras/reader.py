"""One camera's reader: open the source with PyAV, decode continuously, cut windows (one thread).

A :class:`CameraReader` runs in its own thread (PyAV blocks), so a stalled camera never holds
another. Each decoded frame's presentation time goes to the stream's
:class:`~serve_app.cameras.windows.WindowCutter`; only the frames it keeps are scaled to the model's
pixel budget and held compactly, in planar YUV 4:2:0 (:class:`HeldFrames`), and each completed
window is handed on as a :class:`ReadyWindow`, which becomes the model's RGB clip (upright, the
display matrix applied) only when the model takes it (:meth:`ReadyWindow.clip`). Nothing is
decoded twice.

Sources (each checked as one-off clips are, :mod:`serve_app.sources.rules`):

* a path under ``sources.allowed_roots``; ``loop: true`` replays it in real time, forever;
* ``rtsp://``: TCP-interleaved RTP through a relay pinned to the checked address, redirects refused
  (:mod:`serve_app.sources.rtsp_relay`, as :mod:`serve_app.decode.capture` does);
* ``http(s)://``: progressive MP4, MPEG-TS or MJPEG read as it arrives, over a connection pinned to
  the checked address (:mod:`serve_app.sources.http_source`; TLS verified for the host name).

Failures (refused, stalled past ``streams.read_timeout_s``, the stream ended) are reported and
retried after :class:`~serve_app.cameras.windows.Backoff` delays, until ``streams.max_failed_connects``
attempts in a row brought no frame; errors retrying cannot fix end in state ``failed`` at once,
with the reason: a path outside the roots, a file that is not a video (a text file, a playlist,
a session description: files open through the clip routes' container allowlist,
:func:`serve_app.decode.container.open_container`), a stream without video, an HTTP body that is not
what its first bytes say, an HTTP MP4 whose index sits at its end on a server without byte ranges.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from serve_app.cameras.protocol import StreamCreate, StreamState
from serve_app.cameras.rules import frame_area_bound, frames_per_window
from serve_app.cameras.scene_change import held_luma, luma_grid
from serve_app.cameras.windows import Backoff, Window, WindowCutter
from serve_app.config import AppConfig
from serve_app.decode.clip import DecodedClip
from serve_app.decode.container import configure_decoder, open_container, video_stream
from serve_app.decode.frames import FrameStore, apply_display
from serve_app.decode.sampling import even_frame_count
from serve_app.errors import ServeAppError, UnsupportedMediaError
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.sources.http_source import PinnedHttpBody
from serve_app.sources.rtsp_relay import RtspRelay
from serve_app.sources.rules import check_url, normalize_url, resolve_local_path, url_scheme
from serve_app.text import log_safe

logger = get_logger(__name__)

#: HTTP statuses of errors that retrying cannot fix (forbidden, not found, too large, not a video).
PERMANENT_STATUSES = frozenset({400, 403, 404, 413, 415})


class PermanentSourceError(Exception):
    """The source cannot be read and retrying will not help (state ``failed``)."""


class HeldFrames:
    """A stream's kept frames from decode to the model: held compactly, unpacked when the model takes them.

    Each kept ``av.VideoFrame`` is scaled at once to the window's model size (the pixel budget of
    :class:`serve_app.decode.frames.FrameStore`, the same two libswscale steps as one-off clips) and held as
    planar YUV 4:2:0, ``(H·3/2, W) uint8``: 1.5 bytes per pixel, half of RGB
    (:data:`serve_app.cameras.rules.COMPACT_BYTES_PER_PIXEL`). :meth:`rgb` makes the displayed RGB
    picture (display matrix applied) when the window is handed to the model.

    Args:
        capacity: most frames per window (sets the per-frame pixel budget).
        config: the application config (``decode.budget``, ``decode.interpolation``).

    Raises (from :meth:`__call__`):
        PermanentSourceError: the camera's frames come out larger than the stream reserved
            (:func:`serve_app.cameras.rules.frame_area_bound`).
    """

    def __init__(self, capacity: int, config: AppConfig):
        budget = config.decode.budget
        self.store = FrameStore(capacity, budget, config.decode.interpolation)
        self.interpolation = config.decode.interpolation
        self.area_limit = frame_area_bound(capacity, budget)
        self.spent_s = 0.0
        self.format = "yuv420p"
        self.colorspace: int | None = None
        self._scaler = VideoReformatter()  # the reader thread's

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` of a held frame in its stored orientation, pixels ((0, 0) before the first frame)."""
        return self.store._conv_size

    def __call__(self, frame: av.VideoFrame) -> np.ndarray:
        t0 = time.perf_counter()
        if self.store.source_size is None:
            self.store._allocate(frame)  # the target size (needs the first frame's display matrix)
            self.store.frames = None  # nothing preallocated: windows hold their own frames
            cw, ch = self.size
            if cw * ch > self.area_limit:
                sw, sh = self.store.source_size or (0, 0)
                raise PermanentSourceError(
                    f"the camera's {sw}x{sh} frames become {cw}x{ch} pixels at the model's minimum frame area, "
                    f"more than the {self.area_limit} pixels per frame this stream reserved of "
                    "streams.max_frame_memory_bytes (a picture this small and elongated); use a larger picture"
                )
            self.format = "yuvj420p" if frame.format.name == "yuvj420p" else "yuv420p"
            self.colorspace = int(frame.colorspace)
        cw, ch = self.size
        small = self._scaler.reformat(
            frame, width=cw, height=ch, format=self.format, interpolation=self.interpolation, threads=1
        )
        held = small.to_ndarray()
        self.spent_s += time.perf_counter() - t0
        return held

    def rgb(self, held: np.ndarray, reformatter: VideoReformatter | None = None) -> np.ndarray:
        """One held frame as the displayed ``(h, w, 3) uint8`` RGB picture."""
        frame = av.VideoFrame.from_ndarray(held, format=self.format)
        if self.colorspace is not None:
            frame.colorspace = self.colorspace
        rgb = (reformatter or VideoReformatter()).reformat(frame, format="rgb24", threads=1).to_ndarray()
        return apply_display(rgb, self.store._transform)

    def shape(self) -> tuple[int, int]:
        """``(height, width)`` of the displayed RGB picture, pixels."""
        cw, ch = self.size
        return (cw, ch) if self.store._transform[0] else (ch, cw)


@dataclasses.dataclass
class ReadyWindow:
    """A completed window, its frames still held compactly until :meth:`clip`.

    Attributes:
        window: the cut window (times; ``frames``: the held YUV frames, emptied by :meth:`clip`).
        thumbnail: JPEG of the window's last frame (``streams.thumbnail_width`` wide), or None.
        decode_ms: CPU time spent scaling and converting the window's frames, ms.
        held: the stream's :class:`HeldFrames` (unpacks the frames).
        fps: the stream's sampling rate.
        source: ``(width, height)`` of the displayed source.
        source_fps: the source's frame rate, if known.
        patches: make the vision tower's bf16 patches (``model.vision_input: patches``).
        grids: the frames as change-measure grids (:func:`serve_app.cameras.scene_change.luma_grid`,
            ``(gh, gw) float32`` each) when the stream skips unchanged windows, else None.
    """

    window: Window[np.ndarray]
    thumbnail: bytes | None
    decode_ms: float
    held: HeldFrames
    fps: float
    source: tuple[int, int]
    source_fps: float | None
    patches: bool = False
    grids: list[np.ndarray] | None = None

    @property
    def held_bytes(self) -> int:
        """Bytes of the frames this window still holds."""
        return sum(f.nbytes for f in self.window.frames)

    def clip(self) -> DecodedClip:
        """The window as the model's input (RGB frames, or patches), padded to an even frame count;
        the held frames are released. Blocking (CPU): run it off the event loop."""
        held, self.window.frames = self.window.frames, []
        if not held:
            raise ValueError("the window's frames were handed to the model already")
        n = len(held)
        n_even = even_frame_count(n)
        out = np.empty((n_even, *self.held.shape(), 3), dtype=np.uint8)
        reformatter = VideoReformatter()
        for i in range(n):
            out[i] = self.held.rgb(held[i], reformatter)
            held[i] = None  # type: ignore[call-overload]  # each held frame goes as soon as it is unpacked
        out[n:] = out[n - 1]
        w = self.window
        clip = DecodedClip(
            frames=out,
            timestamps_s=np.maximum(np.asarray(w.times_s, dtype=np.float64) - w.start_s, 0.0),
            fps=self.fps,
            source_width=self.source[0],
            source_height=self.source[1],
            source_fps=self.source_fps,
            duration_s=w.end_s - w.start_s,
            padded_frames=n_even - n,
            decode_ms=self.decode_ms,
            decoded_frames=n,
        )
        return clip.as_patches() if self.patches else clip


#: HTTP live formats a stream may use, by what their first bytes look like (FFmpeg demuxer names).
HTTP_FORMATS = ("mov,mp4,m4a,3gp,3g2,mj2", "mpegts", "mpjpeg", "mjpeg")
#: How messages name them.
FORMAT_NAMES = {HTTP_FORMATS[0]: "an MP4", "mpegts": "an MPEG-TS stream", "mpjpeg": "an MJPEG stream",
                "mjpeg": "an MJPEG stream"}  # fmt: skip


def mp4_index_after_media(head: bytes) -> bool:
    """Whether an MP4's top-level boxes in ``head`` (its first bytes) reach the media data (``mdat``)
    before the index (``moov``): such a file can only be read by seeking to its end."""
    pos = 0
    while pos + 8 <= len(head):
        size = int.from_bytes(head[pos : pos + 4], "big")
        kind = head[pos + 4 : pos + 8]
        if kind == b"moov":
            return False
        if kind == b"mdat":
            return True
        if size == 1 and pos + 16 <= len(head):  # a 64-bit size follows the type
            size = int.from_bytes(head[pos + 8 : pos + 16], "big")
        if size < 8:
            return False  # to the end of the file, or malformed: let FFmpeg judge
        pos += size
    return False


def sniff_http_format(head: bytes, content_type: str) -> str:
    """The FFmpeg demuxer for an ``http(s)://`` live source, from its first bytes and ``Content-Type``.

    Progressive MP4 (``ftyp``/``moov``/``mdat`` box), MPEG-TS (sync byte 0x47 every 188 bytes),
    MJPEG over HTTP (``multipart/x-mixed-replace``, or raw JPEG ``FF D8``). Anything else, notably
    an HLS playlist (``#EXTM3U``, whose segment URLs would not pass the source checks), is refused.

    Args:
        head: the body's first bytes (400 or more when the body has them).
        content_type: the ``Content-Type`` header, lower case ("" when absent).

    Raises:
        UnsupportedMediaError (415): not one of those formats (HLS included).
    """
    ctype = content_type
    if ctype.startswith("multipart/x-mixed-replace"):
        return "mpjpeg"
    if head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide"):
        return HTTP_FORMATS[0]
    if len(head) >= 377 and head[0] == 0x47 and head[188] == 0x47 and head[376] == 0x47:
        return "mpegts"
    if head[:2] == b"\xff\xd8":
        return "mjpeg"
    if head.lstrip().startswith(b"#EXTM3U") or "mpegurl" in ctype:
        raise UnsupportedMediaError(
            "HLS playlists are refused: their segment URLs are not checked by the source rules; "
            "use progressive MP4, MPEG-TS or MJPEG over HTTP, or rtsp://",
            param="url",
        )
    raise UnsupportedMediaError("the camera URL is not progressive MP4, MPEG-TS or MJPEG over HTTP", param="url")


def jpeg_thumbnail(rgb: np.ndarray, width: int) -> bytes:
    """A JPEG of ``rgb`` ``(H, W, 3) uint8`` scaled down to ``width`` pixels (FFmpeg's mjpeg encoder, q≈5)."""
    h, w = rgb.shape[:2]
    out_w = min(width, w) // 2 * 2
    out_h = max(2, round(h * out_w / w) // 2 * 2)
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
    frame = frame.reformat(width=out_w, height=out_h, format="yuvj420p")
    cc = av.CodecContext.create("mjpeg", "w")
    cc.width, cc.height, cc.pix_fmt = out_w, out_h, "yuvj420p"
    cc.time_base = Fraction(1, 25)
    cc.options = {"qmin": "2", "qmax": "8"}
    packets = cc.encode(frame) + cc.encode(None)
    return b"".join(bytes(p) for p in packets)


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

    def _open(self) -> av.container.InputContainer:
        """Opens the source; network sources connect to the checked address only.

        ``rtsp://`` goes through an :class:`~serve_app.sources.rtsp_relay.RtspRelay` pinned to the checked
        address (FFmpeg's RTSP client would follow a redirect anywhere); ``http(s)://`` is read by
        a :class:`~serve_app.sources.http_source.PinnedHttpBody` (no second lookup, redirects refused, TLS
        verified for the host name) that PyAV demuxes as a file. Both are closed with the container
        (:meth:`_close_source`).
        """
        cfg, url = self.config, normalize_url(self.spec.url)
        s = cfg.streams
        timeout = (cfg.sources.rtsp_open_timeout_s, s.read_timeout_s)
        try:
            if self.scheme is not None:
                checked = check_url(url, cfg.sources)
                if checked.scheme == "rtsp":
                    opts = {
                        "rtsp_transport": "tcp",
                        "timeout": str(int(s.read_timeout_s * 1e6)),
                        "analyzeduration": "1000000",
                        # FFmpeg speaks RTSP over plain TCP to the relay on loopback, and nothing else
                        "format_whitelist": "rtsp",
                        "protocol_whitelist": "tcp",
                    }
                    relay = RtspRelay(checked.addresses[0], checked.port, cfg.sources.rtsp_open_timeout_s)
                    self._source = relay.__enter__()
                    try:
                        return av.open(relay.url(checked.url), options=opts, timeout=timeout)
                    except (av.error.FFmpegError, OSError):
                        if relay.redirect is not None:
                            raise PermanentSourceError(
                                "the camera answered with a redirect to another address; RTSP redirects are not "
                                "followed (register the address that serves the stream)"
                            ) from None
                        raise
                body = PinnedHttpBody(checked, cfg.sources.url_connect_timeout_s, s.read_timeout_s)
                self._source = body
                head = body.peek(400)
                fmt = sniff_http_format(head, body.content_type)
                if fmt == HTTP_FORMATS[0] and not body.seekable() and mp4_index_after_media(head):
                    raise PermanentSourceError(
                        "the camera's MP4 keeps its index (the 'moov' box) after its media data and the server "
                        "does not take byte ranges (Accept-Ranges: bytes), so it cannot be read as it arrives; "
                        "serve it with the index first (ffmpeg -movflags +faststart), with byte ranges, or as "
                        "MPEG-TS"
                    )
                # The format is forced: FFmpeg never probes the body as a playlist that opens further URLs.
                try:
                    return av.open(body, mode="r", format=fmt, timeout=timeout)
                except av.error.InvalidDataError as e:  # the bytes are not what they looked like: no retry helps
                    raise PermanentSourceError(
                        f"the camera's data is not {FORMAT_NAMES.get(fmt, fmt)} FFmpeg can read "
                        f"(FFmpeg says: {e.strerror or type(e).__name__})"
                    ) from None
            path = resolve_local_path(url, cfg.sources.allowed_roots, cfg.limits.max_upload_bytes)
            try:  # the clip routes' opening: video containers only, the file protocol only
                return open_container(path, param="url", label="the camera file")
            except ServeAppError as e:  # a file that is not a readable video stays so: no retry
                raise PermanentSourceError(e.message) from None
        except BaseException as e:
            self._close_source()
            if isinstance(e, ServeAppError):
                e.message = e.message.replace("video_url", "url").replace("video_path", "url")
                if e.status in PERMANENT_STATUSES:
                    raise PermanentSourceError(e.message) from None
            raise

    def _close_source(self) -> None:
        """Closes the relay or HTTP body of the last :meth:`_open` (idempotent)."""
        source, self._source = self._source, None
        if source is not None:
            source.close()

    def _read_once(self) -> bool:
        """One connection: decode until the source ends or fails. Returns whether frames arrived."""
        container = self._open()
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
