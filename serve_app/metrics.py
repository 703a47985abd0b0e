"""The application's Prometheus metrics, defined once, recorded by the deployments.

Built on ``ray.serve.metrics`` (Counter, Histogram, Gauge): Serve adds the
``deployment``, ``replica`` and ``application`` tags, and Ray's metrics
agent exports them on each node's Prometheus endpoint
(``ray start --metrics-export-port`` / ``ray.init(_metrics_export_port=...)``)
with Ray's ``ray_`` name prefix, e.g. ``ray_cosmos_decode_ms_bucket``.

Each deployment creates its own group once, in its constructor
(:class:`IngressMetrics`, :class:`DecoderMetrics`, :class:`ModelMetrics`).
Camera ids are deliberately not tags (unbounded cardinality); they are in the logs.

HTTP request counts by route and status code, end-to-end latency and requests in flight are
Ray Serve's own metrics (``serve_num_http_requests``, ``serve_http_request_latency_ms``,
``serve_num_ongoing_http_requests``, ``serve_replica_processing_queries``); they are not repeated here.

Metric names (before the ``ray_`` prefix):

* ``cosmos_request_ms`` (histogram; route, status): time to the response head (streams: first byte)
* ``cosmos_errors`` (counter; route, type): every client-visible error by kind
* ``cosmos_decode_ms``, ``cosmos_decode_frames`` (histograms) and ``cosmos_decode_errors`` (counter; type)
* ``cosmos_model_queue_depth`` (gauge): requests waiting for the engine
* ``cosmos_model_queue_ms``, ``cosmos_model_ms``, ``cosmos_ttft_ms`` (histograms)
* ``cosmos_tokens`` (counter; kind = prompt | completion)
* ``cosmos_model_requests`` (counter; finish_reason = stop | length | abort | error): ``abort``
  counts generations stopped because the client went away
"""

from __future__ import annotations

from ray.serve.metrics import Counter, Gauge, Histogram

#: Latency buckets in milliseconds: 5 ms … 10 min.
LATENCY_MS_BUCKETS: list[float] = [
    5, 10, 25, 50, 100, 250, 500, 1000,
    2500, 5000, 10_000, 30_000, 60_000, 120_000, 600_000,
]
#: Frames-per-clip buckets (the default cap is 128; the request limit 512).
FRAME_BUCKETS: list[float] = [2, 4, 8, 16, 32, 64, 128, 256, 512]


class IngressMetrics:
    """Time to the response head and client-visible errors of the HTTP ingress.

    Request counts by route and status, end-to-end latency and in-flight requests are Ray Serve's
    own (``serve_num_http_requests``, ``serve_http_request_latency_ms``,
    ``serve_replica_processing_queries``); this class adds only what Serve cannot know.
    """

    def __init__(self) -> None:
        self.request_ms = Histogram(
            "cosmos_request_ms",
            description="Time to the response head (streams: to the first byte), ms.",
            boundaries=LATENCY_MS_BUCKETS,
            tag_keys=("route", "status"),  # type: ignore[arg-type]  # ray types tag_keys as Tuple[str] (one key)
        )
        self.errors = Counter(
            "cosmos_errors",
            description="Client-visible errors by route and error type.",
            tag_keys=("route", "type"),  # type: ignore[arg-type]  # ray types tag_keys as Tuple[str] (one key)
        )

    def finished(self, route: str, status: int, latency_ms: float, error_type: str | None = None) -> None:
        """A route answered: its HTTP status (499: the client went away first), the time to the
        response head (ms) and the error type if it failed."""
        self.request_ms.observe(latency_ms, tags={"route": route, "status": str(status)})
        if error_type:
            self.error(route, error_type)

    def error(self, route: str, error_type: str) -> None:
        """Counts one client-visible error (also used for errors inside a started stream)."""
        self.errors.inc(tags={"route": route, "type": error_type})


class DecoderMetrics:
    """Decode time, frames per clip and rejected clips of the decode tier."""

    def __init__(self) -> None:
        self.decode_ms = Histogram(
            "cosmos_decode_ms", description="Clip decode and sampling time, ms.", boundaries=LATENCY_MS_BUCKETS
        )
        self.frames = Histogram(
            "cosmos_decode_frames", description="Frames sampled per clip (after padding).", boundaries=FRAME_BUCKETS
        )
        self.errors = Counter("cosmos_decode_errors", description="Clips rejected, by error type.", tag_keys=("type",))

    def clip(self, decode_ms: float, num_frames: int) -> None:
        """One decoded clip: its decode time (ms) and frame count."""
        self.decode_ms.observe(decode_ms)
        self.frames.observe(num_frames)

    def error(self, error_type: str) -> None:
        """One rejected clip."""
        self.errors.inc(tags={"type": error_type})


class ModelMetrics:
    """Engine queue, model time, TTFT, tokens and finished generations of the model tier."""

    def __init__(self) -> None:
        self.queue_depth = Gauge("cosmos_model_queue_depth", description="Requests waiting for the engine.")
        self.queue_ms = Histogram(
            "cosmos_model_queue_ms", description="Time waiting for the engine, ms.", boundaries=LATENCY_MS_BUCKETS
        )
        self.model_ms = Histogram(
            "cosmos_model_ms", description="Engine time of a request (prefill + decode), ms.",
            boundaries=LATENCY_MS_BUCKETS,
        )
        self.ttft_ms = Histogram(
            "cosmos_ttft_ms", description="Time to first token from engine submit, ms.", boundaries=LATENCY_MS_BUCKETS
        )
        self.tokens = Counter("cosmos_tokens", description="Tokens processed, by kind.", tag_keys=("kind",))
        self.finished = Counter(
            "cosmos_model_requests",
            description="Generations ended, by finish reason (abort: the client went away).",
            tag_keys=("finish_reason",),
        )
        self._waiting = 0
        self.queue_depth.set(0)

    def enqueued(self) -> None:
        """A request started waiting for the engine."""
        self._waiting += 1
        self.queue_depth.set(self._waiting)

    def dequeued(self, queue_ms: float | None) -> None:
        """A request left the engine queue (started, or went away); ``queue_ms`` if it started."""
        self._waiting = max(0, self._waiting - 1)
        self.queue_depth.set(self._waiting)
        if queue_ms is not None:
            self.queue_ms.observe(queue_ms)

    def done(
        self, finish_reason: str, *, model_ms: float | None = None, ttft_ms: float | None = None,
        prompt_tokens: int | None = None, completion_tokens: int = 0,
    ) -> None:
        """A generation ended (``finish_reason``: stop, length, abort or error); times in ms."""
        self.finished.inc(tags={"finish_reason": finish_reason})
        if model_ms is not None:
            self.model_ms.observe(model_ms)
        if ttft_ms is not None:
            self.ttft_ms.observe(ttft_ms)
        if prompt_tokens:
            self.tokens.inc(prompt_tokens, tags={"kind": "prompt"})
        if completion_tokens:
            self.tokens.inc(completion_tokens, tags={"kind": "completion"})


class StreamMetrics:
    """Per-stream counters and freshness of the stream worker (tag ``stream``: a stream id; bounded by
    ``streams.max_streams``, unlike camera ids of one-off requests).

    * ``cosmos_stream_windows`` (counter; stream, outcome = answered | skipped | dropped_<reason>)
    * ``cosmos_stream_reconnects`` (counter; stream)
    * ``cosmos_stream_freshness_s`` (gauge; stream): answer time − window end of the latest answer, seconds
    * ``cosmos_stream_webhooks`` (counter; stream, outcome = delivered | failed | skipped): alert webhooks
    """

    def __init__(self) -> None:
        self.windows = Counter(
            "cosmos_stream_windows",
            description="Stream windows by outcome.",
            tag_keys=("stream", "outcome"),  # type: ignore[arg-type]  # ray types tag_keys as Tuple[str] (one key)
        )
        self.reconnects = Counter("cosmos_stream_reconnects", description="Camera reconnects.", tag_keys=("stream",))
        self.webhooks = Counter(
            "cosmos_stream_webhooks",
            description="Alert webhook deliveries by outcome (skipped: too many in flight).",
            tag_keys=("stream", "outcome"),  # type: ignore[arg-type]  # ray types tag_keys as Tuple[str] (one key)
        )
        self.fresh = Gauge(
            "cosmos_stream_freshness_s", description="Latest answer time minus window end, s.", tag_keys=("stream",)
        )

    def window(self, stream_id: str, outcome: str) -> None:
        """One window answered, skipped (unchanged) or dropped (``dropped_<reason>``)."""
        self.windows.inc(tags={"stream": stream_id, "outcome": outcome})

    def reconnect(self, stream_id: str) -> None:
        """The camera failed or stalled and is being reconnected."""
        self.reconnects.inc(tags={"stream": stream_id})

    def freshness(self, stream_id: str, seconds: float) -> None:
        """The latest answer's freshness, seconds."""
        self.fresh.set(seconds, tags={"stream": stream_id})

    def webhook(self, stream_id: str, outcome: str) -> None:
        """One alert webhook delivered, failed or skipped."""
        self.webhooks.inc(tags={"stream": stream_id, "outcome": outcome})
