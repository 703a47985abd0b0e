"""Reading a model's chunk stream (the caller's side of ``VideoModel.generate``; Ray-free).

One way to read the stream of :data:`~serve_app.protocol.ModelChunk` a model call yields, used by the
HTTP pipeline (:class:`serve_app.http.pipeline.ClipRun`) and the camera path
(:class:`serve_app.cameras.answering.WindowAnswering`):

* :func:`read_to_end` yields the chunks up to the final one (:class:`~serve_app.protocol.Done` or an
  :class:`~serve_app.errors.ErrorInfo`) and, resumed after it, reads the stream to its end. The model
  replica's generator then returns by itself, and Serve writes the call's access-log line
  (``CALL generate OK``, with the request id) and records its request metrics; a call cancelled after
  its last chunk but before that return gets neither (Ray 2.60; two plain deployments, 300 calls each:
  67 unlogged when cancelled after the last chunk, none when read to the end). Chunks after the final
  one (a model bug) are logged (rate-limited) and dropped.
* :func:`collect` reads such a stream into the answer's text and its final chunk.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

from serve_app.errors import ErrorInfo
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.protocol import ClipInfo, Delta, Done, ModelChunk

logger = get_logger(__name__)


async def read_to_end(stream: Any, deadline: float | None = None) -> AsyncIterator[ModelChunk]:
    """The chunks of ``stream`` up to its final one, then (resumed) the rest of it read and dropped.

    Args:
        stream: the model call's chunk stream: anything with ``__anext__`` (a Serve
            ``DeploymentResponseGenerator``, or an async generator in tests).
        deadline: when the request must be done, in the event loop's clock (seconds); None: no limit.
            A stream still open at the deadline after its final chunk ends the iteration (the answer
            is whole; the caller cancels the call).

    Raises:
        TimeoutError: the deadline passed before the final chunk.
        Whatever ``stream`` raises.
    """
    final = False
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                chunk: ModelChunk = await stream.__anext__()
        except StopAsyncIteration:
            return
        except TimeoutError:
            if not final:
                raise
            LOG_LIMIT.log(logger, logging.WARNING, "model stream open at deadline",
                          "model stream still open at the deadline after its final chunk")
            return
        if final:
            LOG_LIMIT.log(logger, logging.WARNING, "model stream extra chunk",
                          "model stream sent %s after its final chunk; dropped", type(chunk).__name__)
            continue
        final = isinstance(chunk, Done | ErrorInfo)
        yield chunk


@dataclasses.dataclass(frozen=True)
class Collected:
    """A model stream read to its end by :func:`collect`.

    Attributes:
        info: the stream's :class:`ClipInfo`, or None when it sent none (a stream already past its
            first chunk, as :class:`serve_app.http.pipeline.ClipRun`'s, or a rejected clip).
        text: the answer's text (every :class:`Delta`'s, joined; ``""`` after an error value).
        final: the final chunk (:class:`Done` or the model's error value), or None when the stream
            ended without one (a bug).
    """

    info: ClipInfo | None
    text: str
    final: Done | ErrorInfo | None


async def collect(chunks: AsyncIterator[ModelChunk]) -> Collected:
    """Reads ``chunks`` (from :func:`read_to_end`) to their end: the :class:`ClipInfo`, the text, the final chunk.

    Raises:
        Whatever ``chunks`` raises (see :func:`read_to_end`).
    """
    info: ClipInfo | None = None
    parts: list[str] = []
    final: Done | ErrorInfo | None = None
    async for chunk in chunks:  # to the end: no return at the final chunk
        if isinstance(chunk, ClipInfo):
            info = chunk
            continue
        if isinstance(chunk, Delta):
            parts.append(chunk.text)
        else:
            final = chunk
    if isinstance(final, ErrorInfo):
        return Collected(info, "", final)
    return Collected(info, "".join(parts), final)
