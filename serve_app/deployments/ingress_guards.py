"""The ingress's request guards (:mod:`serve_app.http.guards`) configured for the routes, in order.

Outermost first: a client that went away turned into the disconnect message it is, Ray
Serve's control headers refused (every route), state-changing
requests from other sites' web pages refused (every route), the API key,
admission of every route but the health checks and the event subscriptions before
their body (per replica; with a body, per client; the clip routes also while the
pipeline is full), then the body's deadline, size and large-body count (every route).

Ray Serve's slots of an ingress replica (:func:`ingress_slots`) are the admitted
requests, plus the event subscribers, plus ``security.reserved_slots``: whatever
clients do with the other routes, the health checks find a free slot.
"""

from __future__ import annotations

from ray.exceptions import TaskCancelledError
from starlette.middleware import Middleware

from serve_app.cameras import routes as streams
from serve_app.config import AppConfig
from serve_app.http import health, models
from serve_app.http.auth import ApiKey
from serve_app.http.chat import serving as chat
from serve_app.http.guards.admission import AdmissionGuard
from serve_app.http.guards.body import BodyGuard
from serve_app.http.guards.disconnect import DisconnectAsEnd
from serve_app.http.guards.headers import ControlHeaderGuard, CrossSiteGuard
from serve_app.http.guards.request import Reject, client_key
from serve_app.http.query import serving as query
from serve_app.http.query.protocol import FORM_OVERHEAD_BYTES


def health_path(path: str) -> bool:
    """The routes answered from the reserved slots: ``/healthz``, ``/readyz``, ``/v1/models[/…]``."""
    return path in (health.HEALTH_ROUTE, health.READY_ROUTE, models.ROUTE) or path.startswith(models.ROUTE + "/")


def subscriber_path(path: str) -> bool:
    """The server-sent-event subscriptions (``/v1/events``, ``/v1/streams/{id}/events``): their own slots."""
    return path == streams.EVENTS_ROUTE or (path.startswith(streams.ROUTE + "/") and path.endswith("/events"))


def ingress_slots(config: AppConfig) -> int:
    """Ray Serve's ``max_ongoing_requests`` of an ingress replica: the requests the admission guard
    admits (``ingress.max_ongoing_requests``), the event subscribers (``streams.max_subscribers``, when
    streams are on) and the slots kept for the health checks (``security.reserved_slots``)."""
    subscribers = config.streams.max_subscribers if config.streams.max_streams > 0 else 0
    return config.ingress.max_ongoing_requests + subscribers + config.security.reserved_slots


def guard_middleware(config: AppConfig, api_key: ApiKey, auth: Middleware, reject: Reject) -> list[Middleware]:
    """The guard middlewares around ``auth`` (the API-key middleware), outermost first.

    Args:
        config: the application config (``security``, ``limits``, ``ingress``).
        api_key: the configured key (per-client identity by key needs keys on).
        auth: the API-key middleware, placed after the control-header check.
        reject: sends a refusal in the project's error shape, counted and logged.
    """
    sec, lim = config.security, config.limits
    upload = lim.max_upload_bytes
    return [
        Middleware(DisconnectAsEnd, disconnect_errors=(TaskCancelledError,)),
        Middleware(ControlHeaderGuard, headers=sec.refused_headers, reject=reject),
        Middleware(CrossSiteGuard, allowed_origins=sec.allowed_origins, reject=reject),
        auth,
        Middleware(
            AdmissionGuard,
            exempt=health_path,
            pipeline_paths={query.ROUTE, chat.ROUTE},
            subscriber=subscriber_path,
            max_subscribers=config.streams.max_subscribers,
            max_in_flight=config.ingress.max_ongoing_requests,
            max_per_client=sec.max_requests_per_client,
            client_key=lambda scope, headers: client_key(scope, headers, sec.client_identity, api_key.enabled),
            retry_after_s=lim.retry_after_s,
            reject=reject,
        ),
        Middleware(
            BodyGuard,
            max_bytes={  # multipart: the clip + form overhead; chat: the clip in base64 (4 bytes per 3)
                query.ROUTE: upload + FORM_OVERHEAD_BYTES,
                chat.ROUTE: upload * 4 // 3 + FORM_OVERHEAD_BYTES,
                streams.ROUTE: streams.MAX_BODY_BYTES,
            },
            timeout_s=sec.body_timeout_s,
            min_rate_bytes_s=sec.body_min_rate_bytes_s,
            large_body_bytes=sec.large_body_bytes,
            max_large_bodies=sec.max_large_bodies,
            retry_after_s=lim.retry_after_s,
            reject=reject,
        ),
    ]
