"""``POST /v1/video/query``: a clip and a question in, the answer out (JSON or server-sent events).

Request fields: :class:`serve_app.http.query.protocol.QueryRequest`. A JSON answer is a
:class:`serve_app.http.query.protocol.QueryResponse`; a stream sends a
:class:`~serve_app.http.query.protocol.QueryClipEvent`,
:class:`~serve_app.http.query.protocol.QueryDeltaEvent` values, and a
:class:`~serve_app.http.query.protocol.QueryDoneEvent`
(the whole response), or an :class:`~serve_app.errors.ErrorEvent`, then ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import uuid

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from serve_app.errors import ErrorEvent, ErrorInfo, error_body
from serve_app.http.context import RequestContext, RouteRunner, json_response
from serve_app.http.pipeline import ClipRun
from serve_app.http.query.parsing import parse_query
from serve_app.http.query.protocol import (
    QueryAnswer,
    QueryClipEvent,
    QueryDeltaEvent,
    QueryDoneEvent,
    QueryRequest,
    QueryResponse,
)
from serve_app.protocol import ClipSource, Delta, Done

ROUTE = "/v1/video/query"


class QueryEncoder:
    """The ``/v1/video/query`` events of one run (see :class:`serve_app.http.sse.StreamEncoder`)."""

    def __init__(self, ctx: RequestContext, run: ClipRun):
        self.ctx = ctx
        self.info = run.info

    def start(self) -> list[BaseModel]:
        """The ``clip`` event: what was sampled."""
        info = self.info
        return [QueryClipEvent(id=self.ctx.request_id, video=info.video, warnings=list(info.warnings))]

    def delta(self, delta: Delta) -> list[BaseModel]:
        """A ``delta`` event."""
        return [QueryDeltaEvent(text=delta.text)]

    def done(self, done: Done, text: str) -> list[BaseModel]:
        """The ``done`` event: the whole response."""
        return [QueryDoneEvent.build(self.ctx.request_id, self.info, text, done, self.ctx.elapsed_ms())]

    def error(self, err: ErrorInfo) -> BaseModel:
        """An ``error`` event: the error body with ``"type": "error"``."""
        return ErrorEvent(error=error_body(err).error)


class QueryServing:
    """Serves ``POST /v1/video/query`` through a :class:`RouteRunner`."""

    def __init__(self, runner: RouteRunner):
        self.runner = runner

    async def endpoint(self, request: Request) -> Response:
        """The route's endpoint."""
        return await self.runner.run(request, ROUTE, self._handle)

    async def _handle(self, request: Request, ctx: RequestContext) -> Response:
        q, source = await parse_query(request, self.runner.config)
        ctx.camera = q.camera_id or ctx.camera
        if q.questions is not None:
            return await self._several(ctx, source, q, q.questions)
        assert q.question is not None  # validate_query: question or questions
        run = await self.runner.start(ctx, source, q.question, q)
        if q.stream:
            return self.runner.stream(ROUTE, ctx, run, QueryEncoder(ctx, run))
        text, done = await self.runner.collect(run)
        return json_response(QueryResponse.build(ctx.request_id, run.info, text, done, ctx.elapsed_ms()))

    async def _several(
        self, ctx: RequestContext, source: ClipSource, q: QueryRequest, questions: list[str]
    ) -> Response:
        """Several questions about one clip: decoded once, one server-made clip identity shared by the
        questions (the engine keys its caches by it). They go to the model replica in order: the first
        question's request (decoded and taken by the replica), then each other one as soon as the replica
        took the one before. The replica's engine prepares them all at once and hands the later ones to
        vLLM once the first one has prefilled, so they read the video's prompt blocks instead of prefilling
        them again (:class:`serve_app.model.engines.prefill_gate.PrefillGate`); all decode alongside. The
        top-level fields are the first answer's."""
        clip_id = uuid.uuid4().hex
        first = await self.runner.start(ctx, source, questions[0], q, clip_id=clip_id)
        runs = [first]
        tasks: list[asyncio.Future[tuple[str, Done]]] = [asyncio.ensure_future(self.runner.collect(first))]
        try:
            for text in questions[1:]:
                run = await self.runner.ask_again(ctx, first, text, q, clip_id)
                runs.append(run)
                tasks.append(asyncio.ensure_future(self.runner.collect(run)))
            results = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for run in runs:
                run.cancel()
        text0, done0 = results[0]
        answers = [QueryAnswer.build(question, first.info, text, done)
                   for question, (text, done) in zip(questions, results, strict=True)]  # fmt: skip
        body = QueryResponse.build(ctx.request_id, first.info, text0, done0, ctx.elapsed_ms())
        return json_response(body.model_copy(update={"answers": answers}))
