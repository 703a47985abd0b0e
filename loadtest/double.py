"""A fast test double of the server for the client-capacity check (``python -m loadtest.double``).

It speaks the real API: the request is read and validated by the real
:func:`serve_app.http.query.parsing.parse_query` (uploads read in full, the same limits and
errors), and the response is built by the real :class:`serve_app.http.query.protocol.QueryResponse`
(same JSON, same server-sent events; the clip is a simulated
:class:`~serve_app.protocol.VideoInfo` with a warning saying so). It does not decode video nor run a
model: each request waits ``service_ms`` (optionally behind a
``max_concurrency`` semaphore, which makes it a server of known capacity:
``max_concurrency / service_ms`` requests per second), then streams
``max_tokens`` deltas ``token_ms`` apart. It exists to show that the load
tester itself is not the bottleneck; it is not a product stub.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from serve_app.testing.ports import free_port

if TYPE_CHECKING:
    from pydantic import BaseModel
    from starlette.applications import Starlette

logger = logging.getLogger(__name__)


def build_double(service_ms: float = 50.0, token_ms: float = 0.0, max_concurrency: int = 0) -> Starlette:
    """The double's Starlette app.

    Args:
        service_ms: simulated decode + prefill time per request, milliseconds.
        token_ms: gap between streamed tokens, milliseconds.
        max_concurrency: requests served at once (0: unlimited); the rest queue.
    """
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    from serve_app.config import AppConfig, ModelConfig
    from serve_app.errors import ServeAppError, to_http
    from serve_app.http.query.parsing import parse_query
    from serve_app.http.query.protocol import (
        QueryClipEvent,
        QueryDeltaEvent,
        QueryDoneEvent,
        QueryResponse,
        sampling_options,
    )
    from serve_app.http.request_id import new_request_id
    from serve_app.protocol import ClipInfo, Done, VideoInfo

    config = AppConfig(model=ModelConfig(model_id="loadtest-double", allow_ignore_eos=True))
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency > 0 else None
    stats = {"requests": 0, "bytes": 0}

    def sse(event: str | BaseModel) -> bytes:
        return f"data: {event if isinstance(event, str) else event.model_dump_json()}\n\n".encode()

    async def query(request: Request) -> Response:
        rid = request.headers.get("x-request-id") or new_request_id()
        t0 = time.perf_counter()
        try:
            q, source = await parse_query(request, config)
        except ServeAppError as e:
            status, payload, headers = to_http(e)
            return JSONResponse(payload, status_code=status, headers=headers)
        stats["requests"] += 1
        stats["bytes"] += len(source.data or b"")
        fps = q.fps or config.decode.fps
        span = (q.end_s or 10.0) - (q.start_s or 0.0)
        n_frames = max(2, min(q.max_frames or config.decode.max_frames, math.ceil(span * fps)))
        n_frames += n_frames % 2
        n_tokens = sampling_options(q, config).max_tokens
        video = VideoInfo(
            num_frames=n_frames, frame_width=756, frame_height=420,
            timestamps_s=[round((q.start_s or 0.0) + i / fps, 4) for i in range(n_frames)], padded_frames=0,
            fps=fps, source_width=1280, source_height=720, source_fps=30.0, duration_s=span, rotation_deg=0,
        )
        info = ClipInfo(
            video=video, warnings=("simulated by loadtest.double: no video was decoded",), decode_ms=0.0,
            video_tokens=n_frames * 100, model="loadtest-double", random_weights=True,
        )
        q_start = time.perf_counter()
        async with sem or contextlib.nullcontext():
            queue_ms = (time.perf_counter() - q_start) * 1000
            await asyncio.sleep(service_ms / 1000)
            ttft_ms = (time.perf_counter() - q_start) * 1000 - queue_ms

            def body(cls: type[QueryResponse] = QueryResponse) -> QueryResponse:
                done = Done(
                    finish_reason="length", prompt_tokens=n_frames * 100 + 50, completion_tokens=n_tokens,
                    queue_ms=queue_ms, model_ms=service_ms + n_tokens * token_ms, ttft_ms=ttft_ms,
                )
                return cls.build(rid, info, "x" * n_tokens, done, (time.perf_counter() - t0) * 1000)

            if not q.stream:
                await asyncio.sleep(n_tokens * token_ms / 1000)
                return Response(body().model_dump_json(), media_type="application/json",
                                headers={"x-request-id": rid})

            async def events() -> AsyncIterator[bytes]:
                yield sse(QueryClipEvent(id=rid, video=video, warnings=list(info.warnings)))
                for _ in range(n_tokens):
                    if token_ms:
                        await asyncio.sleep(token_ms / 1000)
                    yield sse(QueryDeltaEvent(text="x"))
                yield sse(body(QueryDoneEvent))
                yield sse("[DONE]")

            # Tokens stream outside the semaphore hold only when token_ms is 0 (the common capacity check).
            return StreamingResponse(events(), media_type="text/event-stream", headers={"x-request-id": rid})

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", **stats})

    return Starlette(routes=[Route("/v1/video/query", query, methods=["POST"]),
                             Route("/healthz", healthz, methods=["GET"])])


@contextlib.contextmanager
def running_double(
    port: int | None = None, service_ms: float = 50.0, token_ms: float = 0.0, max_concurrency: int = 0,
    startup_timeout_s: float = 60.0,
) -> Iterator[str]:
    """Starts the double in a subprocess on loopback; yields its base URL and stops it on exit.

    Raises:
        RuntimeError: it did not answer ``/healthz`` within ``startup_timeout_s``.
    """
    import httpx

    port = port or free_port()
    cmd = [sys.executable, "-m", "loadtest.double", "--port", str(port), "--service-ms", str(service_ms),
           "--token-ms", str(token_ms), "--max-concurrency", str(max_concurrency)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                assert proc.stderr is not None  # stderr=PIPE
                raise RuntimeError(f"test double exited ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"test double not ready on {url} after {startup_timeout_s} s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m loadtest.double --port 8471 [--service-ms 50] [--token-ms 0] [--max-concurrency 0]``."""
    import uvicorn

    p = argparse.ArgumentParser(prog="python -m loadtest.double", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8471)
    p.add_argument("--service-ms", type=float, default=50.0, help="simulated time per request (ms)")
    p.add_argument("--token-ms", type=float, default=0.0, help="gap between streamed tokens (ms)")
    p.add_argument("--max-concurrency", type=int, default=0, help="requests served at once (0: unlimited)")
    a = p.parse_args(argv)
    app = build_double(a.service_ms, a.token_ms, a.max_concurrency)
    uvicorn.run(app, host=a.host, port=a.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
