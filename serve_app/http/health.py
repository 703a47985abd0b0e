"""``GET /healthz`` (liveness) and ``GET /readyz`` (readiness), answered without the API key."""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve
from ray.serve.schema import ReplicaState, ServeStatus
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from serve_app.errors import NotReadyError
from serve_app.http.context import error_response
from serve_app.http.shared_result import SharedResult
from serve_app.log_limit import get_logger

logger = get_logger(__name__)

HEALTH_ROUTE = "/healthz"
READY_ROUTE = "/readyz"
#: Seconds a client is told to wait before asking again while the application starts.
NOT_READY_RETRY_AFTER_S = 5


async def healthz(request: Request) -> Response:
    """Liveness: 200 ``{"status": "ok"}`` while the ingress replica runs (the model may still be loading)."""
    return JSONResponse({"status": "ok"})


class Readiness:
    """``GET /readyz`` with Serve's status read once per ``cache_s`` seconds, shared by concurrent
    pollers (:class:`serve_app.http.shared_result.SharedResult`): 64 pollers cost one controller round trip,
    not 64 (issue 13).

    Args:
        cache_s: seconds a status read is reused (``security.readiness_cache_s``).
    """

    def __init__(self, cache_s: float):
        self.status = SharedResult(lambda: asyncio.to_thread(serve.status), cache_s)

    async def readyz(self, request: Request) -> Response:
        """See :func:`readyz`; the body also carries ``status_reads``, the number of the status
        read answered (reads so far)."""
        return await readyz(request, self.status)


async def readyz(request: Request, status_source: SharedResult[ServeStatus] | None = None) -> Response:
    """Readiness: 200 ``{"status": "ready", "running_replicas": {deployment: n}}`` once every
    deployment of this application has at least one RUNNING replica; before that 503
    (``Retry-After``) naming the deployments without one. Reads Serve's status from the
    controller (through ``status_source`` when given), so a busy model replica does not make the
    application look unready. A deployment autoscaled down to zero replicas (``min_replicas: 0``)
    reads as not ready."""
    app_name = serve.get_replica_context().app_name
    reads = None
    try:
        if status_source is None:
            status = await asyncio.to_thread(serve.status)
        else:
            status, reads = await status_source.get()
    except Exception as e:  # noqa: BLE001 - the controller is unreachable or restarting
        logger.warning("readyz: cannot read Serve's status: %r", e)
        err = NotReadyError("not ready: Serve's controller did not answer", retry_after_s=NOT_READY_RETRY_AFTER_S)
        return error_response(err)
    app = status.applications.get(app_name)
    running = {
        name: d.replica_states.get(ReplicaState.RUNNING, 0) for name, d in (app.deployments.items() if app else [])
    }
    waiting = sorted(name for name, n in running.items() if n == 0)
    if app is None or waiting:
        detail = ", ".join(waiting) if waiting else f"application {app_name!r}"
        err = NotReadyError(f"not ready: no running replica yet for {detail}", retry_after_s=NOT_READY_RETRY_AFTER_S)
        return error_response(err)
    body: dict[str, Any] = {"status": "ready", "running_replicas": running}
    if reads is not None:
        body["status_reads"] = reads
    return JSONResponse(body)
