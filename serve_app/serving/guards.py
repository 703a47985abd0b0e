"""The ingress's request guards (:mod:`serve_app.guards`) configured for the routes, in order.

Outermost first: Ray Serve's control headers refused (every route), the API key,
admission of the clip routes before their body (per replica, per client, a full
pipeline), then the body's deadline, size and large-body count.
"""

from __future__ import annotations

from starlette.middleware import Middleware

from serve_app.api import FORM_OVERHEAD_BYTES
from serve_app.auth import ApiKey
from serve_app.config import AppConfig
from serve_app.guards import AdmissionGuard, BodyGuard, ControlHeaderGuard, Reject, client_key
from serve_app.serving import chat, query


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
        Middleware(ControlHeaderGuard, headers=sec.refused_headers, reject=reject),
        auth,
        Middleware(
            AdmissionGuard,
            paths={query.ROUTE, chat.ROUTE},
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
            },
            timeout_s=sec.body_timeout_s,
            min_rate_bytes_s=sec.body_min_rate_bytes_s,
            large_body_bytes=sec.large_body_bytes,
            max_large_bodies=sec.max_large_bodies,
            retry_after_s=lim.retry_after_s,
            reject=reject,
        ),
    ]
