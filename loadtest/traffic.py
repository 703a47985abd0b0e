"""Bench traffic on the load tester: one clip per request, any schedule, typed records back.

``python -m loadtest`` cuts each camera's source into windows; a bench instead
sends a clip as it is (uploaded whole, or named by its server path) with the
span the server should sample (``start_s``/``end_s``). A :class:`ClipQuery`
says what one request asks; :func:`run` drives queries through
:class:`loadtest.runner.Runner`, so benches measure with the load tester's
client, schedules and :class:`loadtest.records.RequestRecord` (the same
definitions of latency, TTFT and errors as the camera-fleet runs), and
summarise with :mod:`loadtest.statistics`.

The schedules benches use:

* :func:`closed_loop`: ``clients`` clients, each sending its next request when its last one ends.
* :func:`open_loop`: Poisson arrivals at ``rate_rps``, whatever the answers do.
* :func:`paced`: ``cameras`` cameras, one request per ``period_s`` each (staggered); a late
  answer delays the camera's next request, never overlaps it.
* :func:`batch`: a fixed list of queries, each sent once, at most ``concurrency`` in flight
  (default: all at once); times are seconds since the batch started.
* :func:`batch_json`: the same for ready JSON bodies to any route, e.g. OpenAI chat
  completions (streamed chunks give TTFT, the ``usage`` chunk the token counts).

Example (the GPU bench's Serve side: every window in flight at once, streamed)::

    from loadtest.traffic import ClipQuery, batch

    queries = [ClipQuery(clip, QUESTION, start_s=w.start_s, end_s=w.end_s) for w in wins]
    records = await batch("http://127.0.0.1:8000", queries, max_tokens=256, ignore_eos=True,
                          stream=True, request_timeout_s=600)
    failed = [r for r in records if not r.ok]        # status, error_kind, error_type, error_message
    ttft_s = [r.first_token_s for r in records]      # since the batch started
    e2e_s = [r.done_s for r in records]
    tokens = sum(r.completion_tokens for r in records)
    server_decode_ms = [r.decode_ms for r in records]  # the server's timings and usage, per request

    # plain ``vllm serve`` or the project's OpenAI route: chat bodies as built by the bench
    records = await batch_json(url, [chat_body(model, path) for path in files], request_timeout_s=900)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from loadtest.camera import Window
from loadtest.client import HttpRequest, make_client
from loadtest.records import RequestRecord
from loadtest.runner import Feed, Runner
from loadtest.settings import CameraSpec, RunSettings

#: Longest run a bench schedules when it stops by count or by :meth:`Runner.stop` instead (s).
UNBOUNDED_S = 7 * 24 * 3600.0


@dataclasses.dataclass(frozen=True)
class ClipQuery:
    """What one request asks about one clip.

    Attributes:
        clip: the video file (read once per run when uploaded).
        question: the question sent.
        start_s, end_s: the span the server samples, seconds of the clip (None: the server's default).
        upload: send the bytes (multipart); False: send JSON ``video_path`` (the server must allow its folder).
    """

    clip: Path
    question: str
    start_s: float | None = None
    end_s: float | None = None
    upload: bool = True

    def window(self, index: int, data: bytes | None) -> Window:
        """The load tester's :class:`~loadtest.camera.Window` for this query (``data``: the clip's bytes)."""
        return Window(index, self.start_s or 0.0, self.end_s or 0.0, self.start_s, self.end_s,
                      data if self.upload else None, "clip" if self.upload else "path")


def clip_feeds(queries: Sequence[ClipQuery], cameras: int = 1, *, cycle: bool = True,
               prefix: str = "cam-") -> tuple[list[CameraSpec], list[Feed]]:
    """``cameras`` feeds that each send ``queries`` in order (looping unless ``cycle`` is False).

    Raises:
        ValueError: no queries, fewer than one camera, or path queries naming different clips
            (a camera has one source path).
    """
    if not queries or cameras < 1:
        raise ValueError("need at least one query and one camera")
    if len({q.clip for q in queries if not q.upload}) > 1:
        raise ValueError("path queries of one run must name one clip")
    data = {q.clip: q.clip.read_bytes() for q in queries if q.upload}
    windows = tuple(q.window(i, data.get(q.clip)) for i, q in enumerate(queries))
    specs, feeds = [], []
    for c in range(cameras):
        spec = CameraSpec(id=f"{prefix}{c}", source=str(queries[0].clip), questions=[q.question for q in queries])
        specs.append(spec)
        feeds.append(Feed(spec, windows, 0, cycle))
    return specs, feeds


async def run(target: str, queries: Sequence[ClipQuery], *, cameras: int = 1, cycle: bool = True,
              **options: Any) -> list[RequestRecord]:
    """Sends ``queries`` from ``cameras`` feeds to ``{target}/v1/video/query``; returns every record.

    Args:
        target: base URL of the application (loopback for benches).
        cycle: replay the queries in a loop (False: each once, see :func:`batch`).
        options: the keyword arguments of :func:`drive` and :class:`loadtest.settings.RunSettings` fields.

    Raises:
        pydantic.ValidationError: a bad setting. ValueError: see :func:`clip_feeds`.
    """
    specs, feeds = clip_feeds(queries, cameras, cycle=cycle)
    return await drive(target, specs, feeds, **options)


async def drive(
    target: str,
    specs: list[CameraSpec],
    feeds: list[Feed],
    *,
    api_key: str | None = None,
    client_factory: Callable[[RunSettings], httpx.AsyncClient] | None = None,
    started: Callable[[Runner], None] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    **settings: Any,
) -> list[RequestRecord]:
    """Runs ready feeds (one per camera spec) against ``target`` with bench defaults; returns every record.

    Args:
        target: base URL of the application (loopback for benches).
        settings: :class:`loadtest.settings.RunSettings` fields (``schedule``, ``duration_s``,
            ``max_tokens``, ``ignore_eos``, ``stream``, ``request_timeout_s``, ``interval_s``,
            ``concurrency``…). Defaults for benches: one JSON answer per request (``stream``
            False), no request cap, and the drain waits ``request_timeout_s`` so every answer
            is awaited.
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        client_factory: makes the HTTP client (default: :func:`loadtest.client.make_client`;
            tests pass one over ``httpx.MockTransport``).
        started: called with the :class:`Runner` before it runs (e.g. to keep it for
            :meth:`Runner.stop`, which ends a run early; from another thread through
            ``loop.call_soon_threadsafe``).
        on_record: called with each record when its request ends.
        clock: the runner's clock (tests: the event loop's ``time``).

    Returns:
        The records in send order; times are seconds since the run started.

    Raises:
        pydantic.ValidationError: a bad setting.
    """
    settings.setdefault("stream", False)
    settings.setdefault("max_requests", 10**9)
    timeout_s = settings.get("request_timeout_s", RunSettings.model_fields["request_timeout_s"].default)
    settings.setdefault("drain_s", timeout_s)
    run_settings = RunSettings(target=target, cameras=specs, **settings)
    factory = client_factory or (lambda s: make_client(s, api_key=api_key))
    runner = Runner(run_settings, feeds, client_factory=factory, clock=clock, on_record=on_record)
    if started is not None:
        started(runner)
    return await runner.run()


async def closed_loop(target: str, query: ClipQuery, *, clients: int, duration_s: float,
                      **settings: Any) -> list[RequestRecord]:
    """``clients`` closed-loop clients (camera ids ``cam-0``…) for ``duration_s`` seconds; see :func:`run`."""
    return await run(target, [query], cameras=clients, schedule="closed", duration_s=duration_s, **settings)


async def open_loop(target: str, query: ClipQuery, *, rate_rps: float, duration_s: float, sources: int = 16,
                    seed: int = 0, **settings: Any) -> list[RequestRecord]:
    """Poisson arrivals at ``rate_rps`` requests/s for ``duration_s`` seconds; see :func:`run`.

    The arrivals come from ``sources`` independent Poisson cameras at ``rate_rps / sources``
    each (their sum is Poisson at ``rate_rps``), so requests carry ``sources`` camera ids.
    """
    if rate_rps <= 0:
        raise ValueError(f"rate must be > 0 requests/s (got {rate_rps})")
    return await run(target, [query], cameras=sources, schedule="poisson", interval_s=sources / rate_rps,
                     duration_s=duration_s, seed=seed, **settings)


async def paced(target: str, query: ClipQuery, *, cameras: int, period_s: float, duration_s: float,
                **settings: Any) -> list[RequestRecord]:
    """``cameras`` cameras, one request each per ``period_s`` (phases spread over one period), never
    overlapping: a request that outlasts the period delays the camera's next one; see :func:`run`."""
    return await run(target, [query], cameras=cameras, schedule="closed", interval_s=period_s,
                     duration_s=duration_s, **settings)


async def batch(target: str, queries: Sequence[ClipQuery], *, concurrency: int | None = None,
                **settings: Any) -> list[RequestRecord]:
    """Each query once, at most ``concurrency`` in flight (None: all at once); see :func:`run`.

    With fewer workers than queries, worker ``w`` sends queries ``w, w + concurrency, …``.
    """
    return await run(target, queries, cameras=1, cycle=False, schedule="closed",
                     concurrency=concurrency or len(queries), duration_s=UNBOUNDED_S, **settings)


async def batch_json(target: str, bodies: Sequence[dict[str, Any]], *, route: str = "/v1/chat/completions",
                     concurrency: int | None = None, **settings: Any) -> list[RequestRecord]:
    """Each JSON body once to ``{target}{route}``, at most ``concurrency`` in flight (None: all at once).

    For routes whose bodies a bench builds itself, e.g. OpenAI chat completions (the project's
    ``/v1/chat/completions`` or plain ``vllm serve``): a streamed chat answer's first non-empty
    ``delta`` is the TTFT and its ``usage`` chunk (``stream_options: {include_usage: true}``)
    gives the token counts. ``stream`` defaults to whether the bodies ask for it. See :func:`run`.
    """
    if not bodies:
        raise ValueError("need at least one body")
    settings.setdefault("stream", any(b.get("stream") for b in bodies))
    spec = CameraSpec(id="batch")
    windows = tuple(Window(i, 0.0, 0.0, None, None, None, "json") for i in range(len(bodies)))
    requests = tuple(HttpRequest(json=dict(b)) for b in bodies)
    feed = Feed(spec, windows, 0, cycle=False, requests=requests)
    return await drive(target, [spec], [feed], route=route, schedule="closed", concurrency=concurrency or len(bodies),
                       duration_s=UNBOUNDED_S, **settings)
