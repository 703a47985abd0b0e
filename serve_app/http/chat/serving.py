"""``POST /v1/chat/completions``: the OpenAI-compatible route over the same pipeline.

Request: :class:`serve_app.http.chat.protocol.ChatCompletionRequest` (parsed by
:func:`~serve_app.http.chat.parsing.parse_chat_request`). Answer: a
:class:`~serve_app.http.chat.protocol.ChatCompletion`, or a stream of
:class:`~serve_app.http.chat.protocol.ChatCompletionChunk` values (a role chunk, content
chunks, a finish chunk, and a usage-only chunk with ``stream_options.include_usage``)
ending with ``data: [DONE]``; an error inside a stream is the error body.

As vLLM's server, the stream sends no chunk with ``choices`` before the engine's first output:
the role chunk (``{"role": "assistant", "content": ""}``) leaves just before the first content
chunk (or before the finish chunk of an answer without text). Clients such as ``vllm bench
serve`` take the first chunk with ``choices`` as the first token, so the time to it is the
time to the first token. What the route knows earlier (the sampled clip) is sent only by
``/v1/video/query``'s ``clip`` event.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from serve_app.errors import ErrorInfo, ServeAppError, UnsupportedMediaError, error_body
from serve_app.http.chat import protocol as openai_api
from serve_app.http.chat.parsing import parse_chat_body
from serve_app.http.chat.protocol import ChatCompletion, ChatCompletionChunk, ChoiceDelta, ChunkChoice, CompletionUsage
from serve_app.http.chat.video_url import CLIP_PARAMS
from serve_app.http.context import RequestContext, RouteRunner, json_response
from serve_app.http.json_body import read_body
from serve_app.http.query.protocol import FORM_OVERHEAD_BYTES
from serve_app.protocol import Delta, Done

ROUTE = "/v1/chat/completions"


class ChatEncoder:
    """The ``chat.completion.chunk`` events of one run (see :class:`serve_app.http.sse.StreamEncoder`).

    Args:
        completion_id: ``chatcmpl-<request id>``.
        created: Unix seconds.
        model: the served model name.
        include_usage: send the usage-only last chunk.
    """

    def __init__(self, completion_id: str, created: int, model: str, include_usage: bool):
        self.ids = {"id": completion_id, "created": created, "model": model}
        self.include_usage = include_usage
        self._role_sent = False

    def _chunk(
        self, delta: ChoiceDelta, finish_reason: Literal["stop", "length"] | None = None
    ) -> ChatCompletionChunk:
        return ChatCompletionChunk(**self.ids, choices=[ChunkChoice(delta=delta, finish_reason=finish_reason)])

    def _role(self) -> list[BaseModel]:
        """The role chunk (``{"role": "assistant", "content": ""}``) the first time, then nothing."""
        if self._role_sent:
            return []
        self._role_sent = True
        return [self._chunk(ChoiceDelta(role="assistant", content=""))]

    def start(self) -> list[BaseModel]:
        """Nothing: no chunk with ``choices`` before the engine's first output (see the module docstring)."""
        return []

    def delta(self, delta: Delta) -> list[BaseModel]:
        """A content chunk, after the role chunk the first time."""
        return [*self._role(), self._chunk(ChoiceDelta(content=delta.text))]

    def done(self, done: Done, text: str) -> list[BaseModel]:
        """The finish chunk (empty delta; after the role chunk if no text came), then the usage-only
        chunk if asked for."""
        events: list[BaseModel] = [
            *self._role(), self._chunk(ChoiceDelta(), openai_api.finish_reason(done.finish_reason))
        ]
        if self.include_usage:
            usage = CompletionUsage.of(done.prompt_tokens, done.completion_tokens)
            events.append(ChatCompletionChunk(**self.ids, choices=[], usage=usage))
        return events

    def error(self, err: ErrorInfo) -> BaseModel:
        """The error body (OpenAI clients read ``error`` from a stream event)."""
        return error_body(err)


class ChatServing:
    """Serves ``POST /v1/chat/completions`` through a :class:`RouteRunner`."""

    def __init__(self, runner: RouteRunner):
        self.runner = runner

    async def endpoint(self, request: Request) -> Response:
        """The route's endpoint."""
        return await self.runner.run(request, ROUTE, self._handle)

    async def _handle(self, request: Request, ctx: RequestContext) -> Response:
        cfg = self.runner.config
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise UnsupportedMediaError(f"content type {ctype or '(none)'!r} is not supported: send application/json")
        # A data: URL carries the clip in base64: 4 bytes per 3.
        raw = await read_body(request, cfg.limits.max_upload_bytes * 4 // 3 + FORM_OVERHEAD_BYTES)
        chat, source = parse_chat_body(raw, cfg)  # security: frees raw as it goes (issue 13)
        ctx.camera = chat.query.camera_id or ctx.camera
        del raw  # the clip's bytes live on in the source only
        assert chat.query.question is not None  # the chat route always sets the one question
        try:
            run = await self.runner.start(
                ctx, source, chat.query.question, chat.query,
                system_prompt=chat.system_prompt, history=chat.history, stop=chat.stop,
            )  # fmt: skip
        except ServeAppError as e:  # the pipeline names its clip fields in /v1/video/query terms
            if e.param in CLIP_PARAMS:
                e.param = chat.video_param
            raise
        completion_id, created = f"chatcmpl-{ctx.request_id}", int(time.time())
        if chat.query.stream:
            encoder = ChatEncoder(completion_id, created, run.info.model, chat.include_usage)
            return self.runner.stream(ROUTE, ctx, run, encoder)
        text, done = await self.runner.collect(run)
        completion = ChatCompletion.build(
            completion_id=completion_id, created=created, model=run.info.model, done=done, text=text
        )
        return json_response(completion)
