"""The CPU decode/sampling deployment: a thin wrapper around the clip sources and :func:`decode_clip`.

A :class:`ClipSource` is read here, where its rules apply: uploaded bytes
are decoded as they are, a path must lie under an allowed root, an
``http(s)`` URL is downloaded (:func:`serve_app.sources.fetch.fetch_url`) and an
``rtsp`` URL is captured live (:func:`serve_app.decode.capture.capture_rtsp`).
Decoding is blocking C code, so it runs in a thread pool sized to the
replica's ``max_ongoing_requests``; the event loop stays free for health
checks and new requests. Every source has a time limit (decode, download,
camera open/read), so a slow or stalled source frees its thread. Results
cross the handle as values: a :class:`DecodedClip` or an :class:`ErrorInfo`.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ray import serve

from serve_app.config import AppConfig
from serve_app.decode.capture import capture_rtsp
from serve_app.decode.clip import decode_clip
from serve_app.decode.vision_patches import as_patches, bf16_table
from serve_app.errors import ErrorInfo, ServeAppError, internal_error
from serve_app.log_limit import get_logger
from serve_app.metrics import DecoderMetrics
from serve_app.protocol import ClipSource, DecodedClip, FrameSampling
from serve_app.sources.fetch import fetch_url
from serve_app.sources.rules import resolve_local_path, url_scheme
from serve_app.text import log_safe

logger = get_logger(__name__)


@serve.deployment(name="VideoDecoder")
class VideoDecoder:
    """Decodes and samples clips on CPU.

    Args:
        config: the application config (as a dict, as Serve passes it).
    """

    def __init__(self, config: dict[str, Any]):
        t0 = time.perf_counter()
        self.config = AppConfig.model_validate(config)
        workers = max(1, self.config.decoder.max_ongoing_requests)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decode")
        self.metrics = DecoderMetrics()
        if self.config.model.vision_input == "patches":
            bf16_table()  # imports torch now (~4 s on a fresh replica), not on the first clip
        logger.info("decode replica ready in %.2f s", time.perf_counter() - t0)

    def _decode(self, source: ClipSource, request: FrameSampling) -> DecodedClip:
        clip = self._decode_frames(source, request)
        if self.config.model.vision_input == "patches":  # the vision tower's input, made on this CPU tier
            clip = as_patches(clip)
        return clip

    def _decode_frames(self, source: ClipSource, request: FrameSampling) -> DecodedClip:
        cfg = self.config
        try:
            if source.path is not None:
                path = resolve_local_path(source.path, cfg.sources.allowed_roots, cfg.limits.max_upload_bytes)
                return decode_clip(path, request, cfg.decode, cfg.limits)
            if source.url is not None:
                if url_scheme(source.url) == "rtsp":
                    return capture_rtsp(source.url, request, cfg.decode, cfg.limits, cfg.sources)
                data = fetch_url(source.url, cfg.sources, cfg.limits.max_upload_bytes)
                return decode_clip(data, request, cfg.decode, cfg.limits)
            assert source.data is not None  # ClipSource holds exactly one of data, path or url
            return decode_clip(source.data, request, cfg.decode, cfg.limits)
        except ServeAppError as e:
            if e.param == "video":  # name the field the client used for this clip
                e.param = source.param
            raise

    async def decode(self, source: ClipSource, request: FrameSampling, request_id: str = "") -> DecodedClip | ErrorInfo:
        """Decodes one clip; returns the clip, or the client-visible error as a value."""
        loop = asyncio.get_running_loop()
        try:
            clip = await loop.run_in_executor(self._pool, self._decode, source, request)
        except ServeAppError as e:
            logger.info(  # security: client-chosen names escaped (issue 13)
                "request %s: clip %s rejected: %s %s", request_id, log_safe(source.name), e.status, log_safe(e.message)
            )
            self.metrics.error(e.type)
            return e.info()
        except Exception:
            logger.exception("request %s: decoder bug on %s", request_id, log_safe(source.name))
            self.metrics.error("internal_error")
            return internal_error(request_id)
        self.metrics.clip(clip.decode_ms, clip.num_frames)
        return clip
