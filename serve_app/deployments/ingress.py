"""The HTTP ingress: a Starlette app on a Serve deployment that only declares the routes.

Routes (each served by a module of :mod:`serve_app.http`):
  * ``POST /v1/video/query`` (:mod:`~serve_app.http.query.serving`): a clip and a question in, the
    answer out (JSON, or server-sent events with ``stream: true``), with timings and timestamps.
  * ``POST /v1/chat/completions`` (:mod:`~serve_app.http.chat.serving`): the OpenAI-compatible route:
    ``chat.completion`` or ``chat.completion.chunk`` events ending with ``data: [DONE]``.
  * ``GET /v1/models``, ``GET /v1/models/{model}`` (:mod:`~serve_app.http.models`).
  * ``/v1/streams``, ``/v1/events``, ``GET /`` (:mod:`~serve_app.cameras.routes`): live cameras
    (handled by the stream-worker deployment) and the dashboard page.
  * ``GET /healthz``, ``GET /readyz`` (:mod:`~serve_app.http.health`; never need the API key).

Every error leaves as ``{"error": {"type", "message", "param"}}`` with its status and
Ray Serve's ``X-Request-Id`` header (:mod:`~serve_app.http.request_id` gives every
request its id); a 500 carries only the request id. Back-pressure: the decoder and
model deployments have bounded queues (``max_queued_requests``); their
``BackPressureError``, and a replica that is unavailable or died under a request,
become the project's 503 with ``Retry-After`` (:func:`serve_app.http.pipeline.client_error`).
A client that disconnects cancels its request down to the engine.
"""

from __future__ import annotations

import time
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route

from serve_app.cameras import routes as streams
from serve_app.config import AppConfig
from serve_app.deployments.ingress_guards import guard_middleware
from serve_app.http import health, models
from serve_app.http.auth import ApiKey, ApiKeyMiddleware
from serve_app.http.chat import serving as chat
from serve_app.http.context import RouteRunner
from serve_app.http.error_handlers import AuthRejector, http_exception
from serve_app.http.query import serving as query
from serve_app.http.request_id import RequestIdMiddleware
from serve_app.log_limit import get_logger
from serve_app.metrics import IngressMetrics

logger = get_logger(__name__)

QUERY_ROUTE = query.ROUTE
CHAT_ROUTE = chat.ROUTE
MODELS_ROUTE = models.ROUTE
HEALTH_ROUTE = health.HEALTH_ROUTE
READY_ROUTE = health.READY_ROUTE


@serve.deployment(name="Ingress")
@serve.ingress()
class Ingress:
    """HTTP front door: declares the routes; the work is in :mod:`serve_app.http`.

    Args:
        config: the application config (as a dict).
        decoder: handle of :class:`serve_app.deployments.decoder.VideoDecoder`.
        model: handle of :class:`serve_app.deployments.model.VideoModel`.
        workers: handles of the :class:`serve_app.deployments.stream_worker.StreamWorker` deployments
            (``streams.workers``), None when the streams API is off.
    """

    def __init__(
        self,
        config: dict[str, Any],
        decoder: DeploymentHandle[Any],
        model: DeploymentHandle[Any],
        workers: list[DeploymentHandle[Any]] | None = None,
    ):
        self.config = AppConfig.model_validate(config)
        self.api_key = ApiKey.from_env(self.config.api_key_env)
        self.metrics = IngressMetrics()
        runner = RouteRunner(self.config, decoder, model, self.metrics)
        self.query = query.QueryServing(runner)
        self.chat = chat.ChatServing(runner)
        self.models = models.ModelsServing(self.config.model.name, int(time.time()))
        self.readiness = health.Readiness(self.config.security.readiness_cache_s)  # security: cached ~1 s
        self.streams = streams.StreamsServing(runner, workers) if workers else None
        logger.info(
            "ingress ready: API key %s", f"required (${self.config.api_key_env})" if self.api_key.enabled else "off"
        )

    def __serve_build_asgi_app__(self) -> Starlette:
        """The routes, the request-id, API-key and guard middlewares, and the error shape of Starlette's errors."""
        reject = AuthRejector(self.metrics)
        auth = Middleware(
            ApiKeyMiddleware,
            api_key=self.api_key,
            exempt_paths={HEALTH_ROUTE, READY_ROUTE, *streams.DASHBOARD_ROUTES, *streams.DASHBOARD_ASSETS},
            reject=reject,
        )
        stream_routes = []
        if self.streams is not None:
            sv, sr = self.streams, streams.ROUTE
            stream_routes = [
                Route(sr, sv.create, methods=["POST"]),
                Route(sr, sv.list, methods=["GET"]),
                Route(sr + "/{id}", sv.get, methods=["GET"]),
                Route(sr + "/{id}", sv.delete, methods=["DELETE"]),
                Route(sr + "/{id}/thumbnail", sv.thumbnail, methods=["GET"]),
                Route(sr + "/{id}/answers", sv.answers, methods=["GET"]),
                Route(sr + "/{id}/events", sv.events, methods=["GET"]),
                Route(streams.EVENTS_ROUTE, sv.events, methods=["GET"]),
                *(Route(p, streams.dashboard, methods=["GET"]) for p in streams.DASHBOARD_ROUTES),
                *(Route(p, streams.dashboard_asset(p), methods=["GET"]) for p in streams.DASHBOARD_ASSETS),
            ]
        return Starlette(
            routes=[
                *stream_routes,
                Route(QUERY_ROUTE, self.query.endpoint, methods=["POST"]),
                Route(CHAT_ROUTE, self.chat.endpoint, methods=["POST"]),
                Route(MODELS_ROUTE, self.models.models, methods=["GET"]),
                Route(MODELS_ROUTE + "/{model:path}", self.models.model_card, methods=["GET"]),
                Route(HEALTH_ROUTE, health.healthz, methods=["GET"]),
                Route(READY_ROUTE, self.readiness.readyz, methods=["GET"]),
            ],
            middleware=[Middleware(RequestIdMiddleware), *guard_middleware(self.config, self.api_key, auth, reject)],
            exception_handlers={HTTPException: http_exception},
        )
