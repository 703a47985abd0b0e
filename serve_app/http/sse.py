"""The one server-sent-events loop of every streaming route.

A route streams a :class:`~serve_app.http.pipeline.ClipRun` by giving :func:`sse_stream` a
:class:`StreamEncoder` that turns the pipeline's typed chunks into the route's own
pydantic events; each event leaves as ``data: {event.model_dump_json()}`` and the stream
ends with ``data: [DONE]``. Errors after the status line (a model error value, or an
exception such as the deadline passing) are sent as the route's error event, and the
run is cancelled whenever the stream ends (finished, failed, or the client went away),
which aborts the generation in the engine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol

from pydantic import BaseModel

from serve_app.errors import ErrorInfo, ServeAppError, error_value
from serve_app.http.pipeline import ClipRun
from serve_app.protocol import Delta, Done

#: The last event of every stream (OpenAI's convention, kept on both routes).
DONE_EVENT = "[DONE]"


class StreamEncoder(Protocol):
    """A route's events for the chunks of one run."""

    def start(self) -> list[BaseModel]:
        """Events sent before the model stream is read (the route's clip facts; may be none)."""

    def delta(self, delta: Delta) -> list[BaseModel]:
        """Events for newly generated text."""

    def done(self, done: Done, text: str) -> list[BaseModel]:
        """Events when generation finished (``text``: the whole answer)."""

    def error(self, err: ErrorInfo) -> BaseModel:
        """The event for an error inside the stream."""


def sse_event(data: BaseModel | str, *, event: str | None = None, event_id: int | str | None = None) -> bytes:
    """One server-sent event, the project's only framer: ``id:`` (``event_id``, for ``Last-Event-ID``) and
    ``event:`` (the event type) lines when given, then ``data: <json>`` (or a literal such as
    ``[DONE]``) and a blank line (the WHATWG event-stream format)."""
    payload = data if isinstance(data, str) else data.model_dump_json()
    head = (f"id: {event_id}\n" if event_id is not None else "") + (f"event: {event}\n" if event else "")
    return f"{head}data: {payload}\n\n".encode()


async def sse_stream(
    run: ClipRun,
    encoder: StreamEncoder,
    *,
    error_of: Callable[[BaseException], ServeAppError | ErrorInfo],
    count_error: Callable[[str], None],
) -> AsyncIterator[bytes]:
    """The bytes of a streamed response for ``run``.

    Args:
        run: the request's run (its first chunk already received).
        encoder: the route's events.
        error_of: the client-visible error of an exception raised mid-stream.
        count_error: records an error type sent in the stream (metrics).
    """
    parts: list[str] = []
    try:
        for event in encoder.start():
            yield sse_event(event)
        async for chunk in run.chunks():  # to the end, past the final chunk (see ClipRun): no break
            if isinstance(chunk, Delta):
                parts.append(chunk.text)
                for event in encoder.delta(chunk):
                    yield sse_event(event)
            elif isinstance(chunk, ErrorInfo):
                count_error(chunk.type)
                yield sse_event(encoder.error(chunk))
            elif isinstance(chunk, Done):
                for event in encoder.done(chunk, "".join(parts)):
                    yield sse_event(event)
    except Exception as e:  # noqa: BLE001 - the status line is sent: report in the stream
        err = error_value(error_of(e))
        count_error(err.type)
        yield sse_event(encoder.error(err))
    finally:
        run.cancel()  # client disconnected or an error: cancel down to the engine (no-op once the stream ended)
    yield sse_event(DONE_EVENT)
