"""Alert webhooks: POST an alert event as JSON, bounded in time, memory and number, never blocking a stream.

Each delivery is its own asyncio task; a stream's answer loop only schedules it. The URL is
checked like a clip URL (:func:`serve_app.sources.rules.check_url`: scheme, special-purpose addresses,
every address) at registration and again at each attempt, and the attempt connects to the
checked address (:meth:`serve_app.sources.rules.CheckedURL.pinned`: the ``Host`` header keeps the
name; for ``https://`` TLS sends the name as SNI and verifies the certificate against it), so a
DNS answer that changes between the check and the connection cannot redirect it inside. No
proxy from the environment is used (it would resolve the name itself).

Bounds (issue 25 item 6; each was an attack):

* **Time**: one attempt (connect, send, response head, the first bytes of the body) has a total
  deadline, ``streams.webhook_timeout_s`` (httpx's timeouts are per read: an endpoint dripping a
  byte at a time never ended a delivery).
* **Memory**: the response is streamed, and at most :data:`MAX_RESPONSE_BYTES` of its body are
  read (and discarded) before the connection is closed (200-MB answers took the worker from 360
  to 1,228 MiB).
* **Number**: at most ``streams.webhook_max_in_flight`` deliveries at once (all streams) and
  ``streams.webhook_max_in_flight_per_stream`` per stream, so one stream's slow endpoint cannot
  take every place; an alert beyond either is *skipped*. Delivered, failed and skipped counts
  are in each stream's status (``webhooks``) and the ``cosmos_stream_webhooks`` metric.
* **Retries**: a transport error, a timeout, a 5xx, 408 or 429 is retried up to
  ``streams.webhook_retries`` times with exponential backoff (``tenacity``); a 3xx is a
  permanent failure (never followed, never retried), as is any other 4xx and a URL that no
  longer passes the checks.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator
from typing import Protocol

import httpx
from pydantic import BaseModel
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from serve_app.cameras.protocol import WebhookCounts
from serve_app.config import AppConfig
from serve_app.errors import ServeAppError
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.sources.rules import check_url, tls_verify
from serve_app.text import log_safe

logger = get_logger(__name__)

#: Most bytes of a webhook response body read (then discarded) before the connection is closed.
MAX_RESPONSE_BYTES = 4096
#: Statuses worth another attempt (besides 5xx): request timeout, too many requests.
RETRIED_STATUSES = frozenset({408, 429})
#: The backoff between attempts: first wait, longest wait, seconds.
BACKOFF_INITIAL_S, BACKOFF_MAX_S = 0.5, 8.0


class WebhookMetrics(Protocol):
    """Where delivery outcomes are counted (:class:`serve_app.metrics.StreamMetrics`)."""

    def webhook(self, stream_id: str, outcome: str) -> None: ...


class _Retry(Exception):
    """An attempt failed in a way another attempt may fix; ``reason`` says how."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _Permanent(Exception):
    """An attempt failed in a way no retry fixes (a 3xx or 4xx, a refused URL)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


class Webhooks:
    """Delivers alert events (see the module docstring).

    Args:
        config: the application config (``sources`` for URL checks, ``streams.webhook_*``).
        transport: an httpx transport (tests); None: the network, https certificates verified
            as :func:`serve_app.sources.rules.tls_verify` says (httpx's default CA bundle, certifi).
        metrics: counts each delivery's outcome per stream (none by default).
    """

    def __init__(
        self, config: AppConfig, transport: httpx.AsyncBaseTransport | None = None,
        metrics: WebhookMetrics | None = None,
    ):  # fmt: skip
        self.config = config
        self.transport = transport
        self.metrics = metrics
        self.counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: collections.Counter[str] = collections.Counter()

    # ------------------------------------------------------------------ counts

    def _total(self, outcome: str) -> int:
        return sum(c[outcome] for c in self.counts.values())

    @property
    def delivered(self) -> int:
        """Deliveries that got a 2xx answer (all streams)."""
        return self._total("delivered")

    @property
    def failed(self) -> int:
        """Deliveries that ended without a 2xx answer (all streams)."""
        return self._total("failed")

    @property
    def skipped(self) -> int:
        """Alerts not delivered because too many deliveries were in flight (all streams)."""
        return self._total("skipped")

    def counts_of(self, stream_id: str) -> WebhookCounts:
        """One stream's delivered / failed / skipped counts."""
        c = self.counts.get(stream_id, collections.Counter())
        return WebhookCounts(delivered=c["delivered"], failed=c["failed"], skipped=c["skipped"])

    def forget(self, stream_id: str) -> None:
        """Drops a deleted stream's counts (deliveries in flight still end by themselves)."""
        self.counts.pop(stream_id, None)

    def _count(self, stream_id: str, outcome: str) -> None:
        self.counts[stream_id][outcome] += 1
        if self.metrics is not None:
            self.metrics.webhook(stream_id, outcome)

    # ------------------------------------------------------------------ delivery

    def send(self, url: str, event: BaseModel, stream_id: str = "-") -> None:
        """Schedules one delivery of ``event`` to ``url`` for stream ``stream_id`` (returns at once);
        skipped (and counted) when the global or the stream's in-flight limit is reached."""
        s = self.config.streams
        if len(self._tasks) >= s.webhook_max_in_flight or self._in_flight[stream_id] >= (
            s.webhook_max_in_flight_per_stream
        ):
            self._count(stream_id, "skipped")
            LOG_LIMIT.log(
                logger, logging.WARNING, f"webhook skipped {stream_id}",
                "stream %s: webhook skipped (%d of its deliveries in flight, %d in all; "
                "streams.webhook_max_in_flight_per_stream %d, streams.webhook_max_in_flight %d)",
                log_safe(stream_id), self._in_flight[stream_id], len(self._tasks),
                s.webhook_max_in_flight_per_stream, s.webhook_max_in_flight,
            )  # fmt: skip
            return
        self._in_flight[stream_id] += 1
        task = asyncio.get_running_loop().create_task(self._deliver(url, event.model_dump_json(), stream_id))
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, stream_id))

    def _done(self, task: asyncio.Task[None], stream_id: str) -> None:
        self._tasks.discard(task)
        self._in_flight[stream_id] -= 1
        if self._in_flight[stream_id] <= 0:
            del self._in_flight[stream_id]

    async def drain(self) -> None:
        """Waits for the deliveries in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _deliver(self, url: str, body: str, stream_id: str) -> None:
        s = self.config.streams
        retrying = AsyncRetrying(
            stop=stop_after_attempt(s.webhook_retries + 1),
            wait=wait_exponential(multiplier=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S),
            retry=retry_if_exception_type(_Retry),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._attempt(url, body)
        except (_Retry, _Permanent) as e:
            self._count(stream_id, "failed")
            n = retrying.statistics.get("attempt_number", 1)
            LOG_LIMIT.log(
                logger, logging.WARNING, f"webhook failed {stream_id}",
                "stream %s: webhook delivery failed after %d attempt(s): %s",
                log_safe(stream_id), n, log_safe(e.reason),
            )  # fmt: skip
            return
        self._count(stream_id, "delivered")

    async def _attempt(self, url: str, body: str) -> None:
        """One POST within ``streams.webhook_timeout_s`` in total; returns on a 2xx.

        Raises:
            _Retry: a transport error, the deadline, a 5xx, 408 or 429.
            _Permanent: the URL fails the checks now, a 3xx (not followed) or another 4xx.
        """
        timeout_s = self.config.streams.webhook_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                checked = await asyncio.to_thread(check_url, url, self.config.sources)
                pinned = checked.pinned()
                async with httpx.AsyncClient(
                    transport=self.transport, timeout=timeout_s, follow_redirects=False, trust_env=False,
                    verify=tls_verify(),
                ) as client:  # fmt: skip
                    request = client.build_request(
                        "POST", pinned.url, content=body,
                        headers={**pinned.headers, "content-type": "application/json"}, extensions=pinned.extensions,
                    )  # fmt: skip
                    response = await client.send(request, stream=True)
                    try:
                        read = 0
                        # a few KB at most, then the connection goes (a body already read, as a test
                        # transport's, is not streamed again)
                        chunks = response.aiter_raw() if not response.is_stream_consumed else _nothing()
                        async for chunk in chunks:
                            read += len(chunk)
                            if read >= MAX_RESPONSE_BYTES:
                                break
                    finally:
                        await response.aclose()
        except ServeAppError as e:
            raise _Permanent(f"the URL is refused now: {e.message}") from None
        except TimeoutError:
            raise _Retry(f"no complete answer within {timeout_s:g} s (streams.webhook_timeout_s)") from None
        except (httpx.HTTPError, OSError) as e:
            raise _Retry(type(e).__name__) from None
        status = response.status_code
        if status < 300:
            return
        if 300 <= status < 400:
            raise _Permanent(f"HTTP {status}: redirects are not followed (register the URL that answers)")
        if status >= 500 or status in RETRIED_STATUSES:
            raise _Retry(f"HTTP {status}")
        raise _Permanent(f"HTTP {status}")
