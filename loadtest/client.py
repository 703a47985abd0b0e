"""The HTTP side: building a window's request and sending it with a pooled ``httpx.AsyncClient``.

:func:`build_request` is pure (tested without a server): an uploaded window
becomes ``multipart/form-data`` (the ``video`` part plus form fields); a URL
camera becomes JSON ``{video_url, start_s, end_s, …}``; a server-local file
(``transport: path``) becomes JSON ``{video_path, start_s, end_s, …}``.

:func:`send` fills a :class:`loadtest.records.RequestRecord` from the
response: with ``stream`` it reads the server-sent events (``clip``,
``delta``…, ``done``, ``[DONE]``), stamps the first ``delta`` as the
time to first token and counts the deltas (an OpenAI chat stream's
``chat.completion.chunk`` s count the same way, its ``usage`` kept); a refusal keeps its
``Retry-After``; errors are classified by kind (``http``, ``stream``,
``timeout``, ``connect``, ``protocol``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import EventSource, SSEError

from loadtest.camera import Window, is_url
from loadtest.records import RequestRecord
from loadtest.settings import CameraSpec, RunSettings

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class HttpRequest:
    """A ready-to-send request body: either ``json`` or ``data`` + ``files`` (multipart)."""

    json: dict[str, Any] | None = None
    data: dict[str, str] | None = None
    files: dict[str, tuple[str, bytes, str]] | None = None
    upload_bytes: int = 0

    @property
    def bytes_sent(self) -> int:
        """Clip bytes carried: the multipart ``video`` part, or a JSON body's data URL (before base64)."""
        return sum(len(f[1]) for f in (self.files or {}).values()) + self.upload_bytes


def _form_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def request_fields(camera: CameraSpec, window: Window, question: str, settings: RunSettings) -> dict[str, Any]:
    """The query fields of one window's request (None values omitted)."""
    fields: dict[str, Any] = {
        "question": question,
        "camera_id": camera.id,
        "fps": camera.fps,
        "max_frames": camera.max_frames,
        "start_s": window.start_s,
        "end_s": window.end_s,
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "seed": settings.request_seed,
        "stream": settings.stream,
    }
    if settings.ignore_eos:
        fields["ignore_eos"] = True
    return {k: v for k, v in fields.items() if v is not None}


def chat_request(window: Window, question: str, settings: RunSettings) -> HttpRequest:
    """An OpenAI Chat Completions request about one window (``api: openai``): one user message with
    the window's cut MP4 as a ``video_url`` data URL, then the question, as any OpenAI-compatible
    server takes it (plain ``vllm serve`` included; its ``ignore_eos`` is vLLM's extra parameter).

    Raises:
        ValueError: the window has no bytes (a URL or ``path`` camera), or ``settings.model`` is unset.
    """
    if window.data is None:
        raise ValueError("api openai sends the window's bytes: a cut window is needed (--transport upload)")
    if not settings.model:
        raise ValueError("api openai needs the model name (--model, or the server's GET /v1/models)")
    url = "data:video/mp4;base64," + base64.b64encode(window.data).decode("ascii")
    body: dict[str, Any] = {
        "model": settings.model,
        "messages": [{"role": "user", "content": [
            {"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": question}]}],
        "max_tokens": settings.max_tokens,
        "stream": settings.stream,
    }  # fmt: skip
    if settings.stream:
        body["stream_options"] = {"include_usage": True}
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.request_seed is not None:
        body["seed"] = settings.request_seed
    if settings.ignore_eos:
        body["ignore_eos"] = True
    body.update(settings.extra_body or {})
    return HttpRequest(json=body, upload_bytes=len(window.data))


def build_request(camera: CameraSpec, window: Window, question: str, settings: RunSettings) -> HttpRequest:
    """The request for one window of one camera (``settings.api``: this service's route or OpenAI's).

    Raises:
        ValueError: an uploaded window without bytes; see :func:`chat_request`.
    """
    if settings.api == "openai":
        return chat_request(window, question, settings)
    fields = request_fields(camera, window, question, settings)
    if is_url(camera.source):
        return HttpRequest(json={"video_url": camera.source, **fields})
    if window.data is None:
        return HttpRequest(json={"video_path": str(Path(camera.source).resolve()), **fields})
    name = f"{camera.id}-w{window.index}.mp4"
    return HttpRequest(
        data={k: _form_value(v) for k, v in fields.items()},
        files={"video": (name, window.data, "video/mp4")},
    )


def _apply_body(record: RequestRecord, body: dict[str, Any]) -> None:
    timings = body.get("timings") or {}
    usage = body.get("usage") or {}
    record.decode_ms = timings.get("decode_ms")
    record.queue_ms = timings.get("queue_ms")
    record.model_ms = timings.get("model_ms")
    record.server_ttft_ms = timings.get("ttft_ms")
    record.server_total_ms = timings.get("total_ms")
    record.prompt_tokens = usage.get("prompt_tokens")
    record.completion_tokens = usage.get("completion_tokens")
    record.video_tokens = usage.get("video_tokens")
    video = body.get("video") or {}
    if video.get("num_frames") is not None:
        record.num_frames = video["num_frames"]
    record.request_id = body.get("id") or record.request_id


def _apply_error(record: RequestRecord, kind: str, body: Any, fallback: str) -> None:
    record.error_kind = kind
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        record.error_type = err.get("type")
        record.error_message = (err.get("message") or "")[:300]
    else:
        record.error_message = fallback[:300]


async def _read_error(record: RequestRecord, response: httpx.Response) -> None:
    record.retry_after_s = _retry_after_s(response)
    raw = await response.aread()
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    _apply_error(record, "http", body, raw[:300].decode("utf-8", "replace"))


def _apply_chat_chunk(record: RequestRecord, chunk: dict[str, Any], clock: Callable[[], float]) -> None:
    """One OpenAI ``chat.completion.chunk``: text (or reasoning) deltas stamp TTFT and count; usage is kept."""
    choices = chunk.get("choices") or []
    delta = (choices[0].get("delta") or {}) if choices else {}
    if delta.get("content") or delta.get("reasoning_content"):
        record.delta_events += 1
        if record.first_token_s is None:
            record.first_token_s = clock()
    usage = chunk.get("usage") or {}
    if usage:
        record.prompt_tokens = usage.get("prompt_tokens")
        record.completion_tokens = usage.get("completion_tokens")
    record.request_id = record.request_id or chunk.get("id")


#: How the server starts a delta event's data (``json.dumps`` separators, or compact JSON).
_DELTA_PREFIXES = ('{"type": "delta"', '{"type":"delta"')


def _retry_after_s(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds (RFC 9110 delay-seconds form), None if absent or a date."""
    value = response.headers.get("retry-after")
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def parse_sse_data(data: str) -> dict[str, Any] | str:
    """One server-sent event's ``data``: the decoded JSON object, or ``"[DONE]"`` (the OpenAI stream's end).

    Raises:
        ValueError: data that is neither ``[DONE]`` nor a JSON object.
    """
    payload = data.strip()
    if payload == "[DONE]":
        return payload
    event = json.loads(payload)
    if not isinstance(event, dict):
        raise ValueError(f"SSE data is not a JSON object: {payload[:80]!r}")
    return event


async def send(  # noqa: C901 - one streamed read: a branch per event kind and per transport failure, all recorded
    client: httpx.AsyncClient, url: str, request: HttpRequest, record: RequestRecord,
    clock: Callable[[], float], stream: bool,
) -> None:
    """Sends one request and fills ``record`` (status, times, server timings, usage, error).

    ``clock()`` returns seconds since the run started. Never raises for HTTP or
    transport failures (they become the record's ``error_kind``); cancellation
    propagates (the runner records it as ``unfinished``).
    """
    kwargs: dict[str, Any] = {"json": request.json} if request.json is not None else {
        "data": request.data, "files": request.files}
    record.bytes_sent = request.bytes_sent
    try:
        if not stream:
            r = await client.post(url, **kwargs)
            record.status = r.status_code
            record.request_id = r.headers.get("x-request-id")
            if r.status_code >= 400:
                await _read_error(record, r)
            else:
                _apply_body(record, r.json())
            record.done_s = clock()
            return
        async with client.stream("POST", url, **kwargs) as r:
            record.status = r.status_code
            record.request_id = r.headers.get("x-request-id")
            if r.status_code >= 400:
                await _read_error(record, r)
                record.done_s = clock()
                return
            got_done = chat = False
            async for sse in EventSource(r).aiter_sse():  # httpx-sse: the event-stream framing (WHATWG)
                if record.first_token_s is not None and sse.data.startswith(_DELTA_PREFIXES):
                    record.delta_events += 1
                    continue  # later deltas carry nothing else we measure: skip the JSON parse
                if not sse.data:
                    continue
                event = parse_sse_data(sse.data)
                if isinstance(event, str):  # "[DONE]"
                    got_done = got_done or chat  # a chat stream ends with [DONE]; ours with a done event
                    break
                kind = event.get("type")
                if kind is None and "choices" in event:
                    chat = True
                    _apply_chat_chunk(record, event, clock)
                elif kind is None and "error" in event:
                    _apply_error(record, "stream", event, "error event")
                elif kind == "delta":
                    record.delta_events += 1
                    if record.first_token_s is None:
                        record.first_token_s = clock()
                elif kind == "clip":
                    record.num_frames = (event.get("video") or {}).get("num_frames")
                elif kind == "done":
                    _apply_body(record, event)
                    got_done = True
                elif kind == "error":
                    _apply_error(record, "stream", event, "error event")
            record.done_s = clock()
            if not got_done and record.error_kind is None:
                _apply_error(record, "protocol", None, "stream ended without a 'done' event")
    except httpx.TimeoutException as e:
        record.done_s = clock()
        _apply_error(record, "timeout", None, f"{type(e).__name__}: {e}")
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.NetworkError) as e:
        record.done_s = clock()
        _apply_error(record, "connect", None, f"{type(e).__name__}: {e}")
    except (ValueError, httpx.DecodingError, SSEError) as e:  # SSEError: a 2xx stream that is not text/event-stream
        record.done_s = clock()
        _apply_error(record, "protocol", None, f"{type(e).__name__}: {e}")


def make_client(settings: RunSettings, api_key: str | None = None) -> httpx.AsyncClient:
    """A pooled async client: one keep-alive connection per in-flight request, no proxies.

    Args:
        api_key: sent as ``Authorization: Bearer <key>`` when given (the server's optional API key).
    """
    headers = {"authorization": f"Bearer {api_key}"} if api_key else None
    limits = httpx.Limits(max_connections=settings.max_connections, max_keepalive_connections=None,
                          keepalive_expiry=60)
    timeout = httpx.Timeout(settings.request_timeout_s, connect=min(10.0, settings.request_timeout_s))
    return httpx.AsyncClient(base_url=settings.target, limits=limits, timeout=timeout, trust_env=False,
                             headers=headers)
