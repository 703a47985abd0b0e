"""Alert webhooks: POST an alert event as JSON, bounded retries with backoff, never blocking a stream.

Each delivery is its own asyncio task; a stream's answer loop only schedules it. The URL is
checked like a clip URL (:func:`serve_app.sources.check_url`: scheme, private-network policy,
every address) at registration and again at each delivery, and the delivery connects to the
checked address (:meth:`serve_app.sources.CheckedURL.pinned`: the ``Host`` header keeps the
name; for ``https://`` TLS sends the name as SNI and verifies the certificate against it), so a
DNS answer that changes between the check and the connection cannot redirect it inside. No
proxy from the environment is used (it would resolve the name itself). Redirects are not
followed. At most ``MAX_IN_FLIGHT`` deliveries run at once; beyond that an alert's delivery is
skipped and counted.
"""

from __future__ import annotations

import asyncio
import logging

import httpx
from pydantic import BaseModel

from serve_app.guards import log_safe
from serve_app.config import AppConfig
from serve_app.log_limit import LOG_LIMIT
from serve_app.errors import ServeAppError
from serve_app.sources import check_url, tls_verify
from serve_app.stream_core import Backoff

logger = logging.getLogger("ray.serve")

#: Most webhook deliveries in flight at once (all streams).
MAX_IN_FLIGHT = 32


class Webhooks:
    """Delivers alert events (see the module docstring).

    Args:
        config: the application config (``sources`` for URL checks, ``streams.webhook_*``).
        transport: an httpx transport (tests); None: the network, https certificates verified
            as :func:`serve_app.sources.tls_verify` says (httpx's default CA bundle, certifi).
    """

    def __init__(self, config: AppConfig, transport: httpx.AsyncBaseTransport | None = None):
        self.config = config
        self.transport = transport
        self.backoff = Backoff(0.5, 8.0)
        self.delivered = 0
        self.failed = 0
        self.skipped = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, url: str, event: BaseModel) -> None:
        """Schedules one delivery of ``event`` to ``url`` (returns at once)."""
        if len(self._tasks) >= MAX_IN_FLIGHT:
            self.skipped += 1
            return
        task = asyncio.get_running_loop().create_task(self._deliver(url, event.model_dump_json()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Waits for the deliveries in flight (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _deliver(self, url: str, body: str) -> None:
        s = self.config.streams
        for attempt in range(s.webhook_retries + 1):
            try:
                checked = await asyncio.to_thread(check_url, url, self.config.sources)
                pinned = checked.pinned()
                async with httpx.AsyncClient(
                    transport=self.transport,
                    timeout=s.webhook_timeout_s,
                    follow_redirects=False,
                    trust_env=False,
                    verify=tls_verify(),
                ) as client:
                    r = await client.post(
                        pinned.url,
                        content=body,
                        headers={**pinned.headers, "content-type": "application/json"},
                        extensions=pinned.extensions,
                    )
                if r.status_code < 300:
                    self.delivered += 1
                    return
                reason = f"HTTP {r.status_code}"
            except ServeAppError as e:
                LOG_LIMIT.log(logger, logging.WARNING, "webhook refused", "webhook refused: %s", log_safe(e.message))
                self.failed += 1
                return
            except (httpx.HTTPError, OSError) as e:
                reason = type(e).__name__
            if attempt < s.webhook_retries:
                await asyncio.sleep(self.backoff.delay_s(attempt))
        LOG_LIMIT.log(logger, logging.WARNING, "webhook failed",
                      "webhook delivery failed after %d attempts (%s)", s.webhook_retries + 1, reason)
        self.failed += 1
