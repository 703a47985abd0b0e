"""What clients may send and reach: request limits (``limits:``), clip sources (``sources:``) and the
defences against hostile clients (``security:``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, IPvAnyNetwork

from serve_app.config.base import _Model

#: A URL scheme a ``video_url`` may use.
UrlScheme = Literal["http", "https", "rtsp"]
#: Every URL scheme the server can read (the default of ``sources.url_schemes``).
URL_SCHEMES: tuple[UrlScheme, ...] = ("http", "https", "rtsp")


class LimitsConfig(_Model):
    """Request limits; each violation is a 4xx naming the limit."""

    max_upload_bytes: int = Field(200 * 1000 * 1000, gt=0, description="Largest accepted clip, in bytes (200 MB).")
    max_clip_duration_s: float = Field(600.0, gt=0, description="Longest accepted clip, in seconds (10 min).")
    max_source_width: int = Field(7680, gt=0, description="Widest accepted source frame, in pixels (8K UHD).")
    max_source_height: int = Field(4320, gt=0, description="Tallest accepted source frame, in pixels (8K UHD).")
    max_frames: int = Field(512, ge=2, description="Largest `max_frames` a request may ask for.")
    max_question_chars: int = Field(8000, gt=0, description="Longest accepted question, in characters.")
    max_questions: int = Field(
        8, ge=1, le=64, description="Most questions one /v1/video/query request may ask about its clip (questions)."
    )
    max_tokens: int = Field(8192, gt=0, description="Largest `max_tokens` a request may ask for.")
    request_timeout_s: float = Field(600.0, gt=0, description="Total time a request may take, in seconds.")
    retry_after_s: int = Field(
        1, ge=0, description="Retry-After (seconds) sent with 503 when queues are full or a replica is replaced."
    )
    max_url_chars: int = Field(
        4096,
        gt=0,
        description="Longest clip URL or path (every route, every scheme but data:, whose size "
        "max_upload_bytes bounds), in characters.",
    )


class SourcesConfig(_Model):
    """Where clips may come from besides uploaded bytes."""

    allowed_roots: list[str] = Field(
        default_factory=list,
        description="Directories a JSON `video_path` may point into (resolved, symlinks followed). Empty: none.",
    )
    url_schemes: list[UrlScheme] = Field(
        default_factory=lambda: list(URL_SCHEMES),
        description="URL schemes a `video_url` may use. Empty: URL sources are refused (403).",
    )
    allow_private_networks: bool = Field(
        False,
        description="Let URLs reach private, loopback, link-local and other non-public addresses "
        "(off: such hosts are refused with 403, after DNS resolution, so a public name cannot point inside).",
    )
    allowed_networks: list[IPvAnyNetwork] = Field(
        default_factory=list,
        description="Private networks (CIDR, e.g. a camera VLAN `10.20.0.0/16`) URLs may reach even while "
        "allow_private_networks is off; every other non-public address stays refused.",
    )
    url_connect_timeout_s: float = Field(5.0, gt=0, description="http(s): seconds to connect (per address).")
    url_read_timeout_s: float = Field(10.0, gt=0, description="http(s): seconds a read may wait for data.")
    url_total_timeout_s: float = Field(60.0, gt=0, description="http(s): seconds for the whole download.")
    url_max_redirects: int = Field(3, ge=0, description="http(s): redirects followed (each hop re-checked).")
    rtsp_open_timeout_s: float = Field(
        5.0, gt=0, description="rtsp: seconds to connect and get the stream description (RTSP DESCRIBE/SETUP/PLAY)."
    )
    rtsp_read_timeout_s: float = Field(
        5.0, gt=0, description="rtsp: seconds a read may wait for packets (a stalled camera fails after this)."
    )
    rtsp_capture_s: float = Field(
        10.0, gt=0, description="rtsp: seconds of live video captured when the request sets no `end_s`."
    )
    rtsp_max_capture_s: float = Field(60.0, gt=0, description="rtsp: longest capture a request may ask for (`end_s`).")


#: Ray Serve's per-request control headers (ray/serve/_private/constants.py, 2.60): the proxy acts on them
#: before the ingress runs (x-request-disconnect-disabled: ?1 turns off cancellation on disconnect;
#: x-request-timeout-seconds: the request's timeout; the other two pick replicas). Compared with
#: ``_`` and ``-`` treated alike, as Ray does.
RAY_SERVE_CONTROL_HEADERS = (
    "x-request-disconnect-disabled",
    "x-request-timeout-seconds",
    "serve-multiplexed-model-id",
    "x-session-id",
)


class SecurityConfig(_Model):
    """Defences against hostile clients: body deadlines, admission limits, control headers."""

    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Seconds a request body may take on top of what body_min_rate_bytes_s allows "
        "(a body still arriving after timeout + received/min_rate seconds gets 408).",
    )
    body_min_rate_bytes_s: int = Field(
        64 * 1024,
        gt=0,
        description="Slowest accepted upload rate in bytes/s, averaged over the body (each byte buys "
        "1/rate seconds more): a client trickling bytes is cut off with 408.",
    )
    max_requests_per_client: int | None = Field(
        None,
        ge=1,
        description="Requests with a body (POST, PUT, PATCH: every route) one client (see client_identity) may "
        "hold at once on one ingress replica; past it 429 with Retry-After, before the body is read. None: no "
        "per-client limit.",
    )
    client_identity: Literal["address", "api_key"] = Field(
        "address",
        description="What one client is for max_requests_per_client: its IP address as the ingress sees it, "
        "or its API key (only when keys are on; otherwise the address).",
    )
    large_body_bytes: int = Field(
        16 * 1000 * 1000,
        gt=0,
        description="A request body over this many bytes (declared, or once received) is a large body.",
    )
    max_large_bodies: int = Field(
        8,
        ge=1,
        description="Large bodies one ingress replica receives at once; more get 503 with Retry-After "
        "(before reading, when Content-Length declares the size). Bounds ingress memory to about "
        "max_large_bodies x the body limit.",
    )
    reserved_slots: int = Field(
        16,
        ge=1,
        description="Ray Serve request slots of the ingress replica kept for /healthz, /readyz and "
        "/v1/models: Serve's max_ongoing_requests is ingress.max_ongoing_requests plus "
        "streams.max_subscribers plus these; every other route is admitted only up to "
        "ingress.max_ongoing_requests (event subscriptions up to streams.max_subscribers), before its body, "
        "so health checks never wait behind uploads, slow bodies or subscribers.",
    )
    readiness_cache_s: float = Field(
        1.0, ge=0, description="Seconds a /readyz answer (one controller round trip) is reused."
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Web origins (scheme://host[:port], e.g. https://cams.example.com: a fronting proxy's public "
        "name) whose pages may send state-changing requests (POST, PUT, PATCH, DELETE) besides the server's own "
        "origin; any other cross-site request (Origin or Sec-Fetch-Site says so) is refused with 403. Requests "
        "without Origin and Sec-Fetch-Site (curl, SDKs) are not affected.",
    )
    refused_headers: list[str] = Field(
        default_factory=lambda: list(RAY_SERVE_CONTROL_HEADERS),
        description="Request headers refused with 400 on every route: Ray Serve's per-request control "
        "headers, which are the operator's, not the client's.",
    )
