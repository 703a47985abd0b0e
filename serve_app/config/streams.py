"""Live camera streams (``streams:``): limits, persistence, reconnects, webhooks."""

from __future__ import annotations

from pydantic import Field

from serve_app.config.base import _Model


class StreamsConfig(_Model):
    """Live camera streams (``/v1/streams``): limits, persistence, reconnects (see :mod:`serve_app.streams`)."""

    db_path: str | None = Field(
        None,
        description="SQLite file holding the registered streams and their bounded answer history, so they "
        "resume after a restart (relative: to the cwd of `serve run`; on KubeRay a path on a volume that "
        "outlives the pod). None: kept in memory only (streams are lost with the worker replica).",
    )
    max_streams: int = Field(
        64,
        ge=0,
        description="Most registered streams, all stream workers together (0: the streams API is off); each worker "
        "admits its share, max_streams / workers rounded up.",
    )
    workers: int = Field(
        1,
        ge=1,
        le=16,
        description="Stream-worker deployments that share the cameras, one process each (a process reads about a "
        "hundred real-time 768×432 cameras before its own API slows: results/gpu/quiet-scenes). A stream belongs to "
        "worker crc32(id) mod workers, which reads it, asks the model and keeps its events; each worker holds its "
        "share of max_streams and of max_frame_memory_bytes and asks for stream_worker's resources. Changing it "
        "keeps the stored streams (each worker resumes those that hash to it), and a Last-Event-ID from before "
        "the change still resumes GET /v1/events without a loss.",
    )
    max_subscribers: int = Field(
        16, ge=1, description="Most concurrent server-sent-event subscribers per ingress replica (beyond: 503)."
    )
    max_window_s: float = Field(60.0, gt=0, description="Longest `window_s` a stream may ask for, seconds.")
    max_fps: float = Field(8.0, gt=0, le=30, description="Highest `fps` a stream may ask for, frames/s.")
    max_window_frames: int = Field(
        128,
        ge=1,
        description="Most frames one stream window may hold (`window_s` × `fps`), frames; at most limits.max_frames "
        "(the clip routes' limit): a stream holds its windows for as long as it runs.",
    )
    max_frame_memory_bytes: int = Field(
        2 * 2**30,
        gt=0,
        description="Frame memory the stream workers may hold for all streams together, bytes (each worker its "
        "share, max_frame_memory_bytes / workers). Each stream reserves "
        "the most its windows can hold (serve_app/cameras/rules.py: window frames at the model's size, the window "
        "being filled and those waiting for the model in YUV 4:2:0, the one handed to the model in RGB) when it is "
        "registered (past the budget: 503 naming it) or resumed (past it: the stream is failed with the reason).",
    )
    max_questions: int = Field(8, ge=1, description="Most questions per stream.")
    pending_windows: int = Field(
        1, ge=1, description="Windows a stream may hold waiting for the model; when full the oldest is dropped."
    )
    event_history: int = Field(2000, ge=10, description="Events kept for Last-Event-ID replay (all streams).")
    answer_history: int = Field(50, ge=1, description="Answers (with thumbnails) kept per stream in the database.")
    thumbnail_width: int = Field(320, ge=32, le=1280, description="Width of the per-window JPEG thumbnail, pixels.")
    reconnect_initial_s: float = Field(0.5, gt=0, description="First reconnect delay after a camera fails, seconds.")
    reconnect_max_s: float = Field(
        10.0, gt=0, description="Longest reconnect delay (exponential backoff cap), seconds."
    )
    read_timeout_s: float = Field(
        5.0, gt=0, description="Seconds without a packet before a camera counts as stalled and is reconnected."
    )
    max_failed_connects: int = Field(
        20,
        ge=0,
        description="Connection attempts in a row that bring no frame before a stream is failed (state failed, "
        "with the last error; with the backoff's 10-s cap about 3 minutes); 0: retry forever. Errors no retry "
        "can fix (not a video, no video stream, a forbidden source) fail a stream at once.",
    )
    webhook_timeout_s: float = Field(
        5.0, gt=0, description="Seconds one webhook delivery attempt may take in total (connect, send, answer)."
    )
    webhook_retries: int = Field(
        3, ge=0, le=10, description="Retries of a webhook delivery after a transport error, timeout, 5xx, 408 or 429 "
        "(exponential backoff); a 3xx or other 4xx is not retried.",
    )
    webhook_max_in_flight: int = Field(
        32, ge=1, description="Webhook deliveries in flight at once, all streams of one stream worker; an alert past "
        "it is skipped."
    )
    webhook_max_in_flight_per_stream: int = Field(
        4, ge=1, description="Webhook deliveries in flight at once for one stream, so one slow endpoint cannot take "
        "every place; an alert past it is skipped (counted in the stream's status and cosmos_stream_webhooks).",
    )
