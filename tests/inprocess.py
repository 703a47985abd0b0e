"""The Serve graph in one process, without Ray: the real ingress app over fake handles.

:func:`inprocess_app` builds the ingress's Starlette app with the real decoder and
model deployment classes behind stand-ins for ``DeploymentHandle`` that call them
directly. Every value that crosses a stand-in handle is pickled and unpickled, as
Ray would, so a value that cannot cross a real handle fails here too. Metrics are
no-ops (``ray.serve.metrics`` needs a replica). Use it with ``httpx``'s
``ASGITransport``: fast, deterministic response bodies for unit tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
from typing import Any
from unittest import mock

from serve_app import metrics as metrics_module
from serve_app.app import resolve_paths
from serve_app.config import AppConfig


class _NoMetric:
    def __init__(self, *args, **kwargs):
        pass

    def inc(self, *args, **kwargs):
        pass

    def set(self, *args, **kwargs):
        pass

    def observe(self, *args, **kwargs):
        pass


def _crossed(value: Any) -> Any:
    """``value`` as the other side of a handle sees it (pickled and unpickled)."""
    return pickle.loads(pickle.dumps(value))


class FakeResponse:
    """Stands in for ``DeploymentResponse``: a task, awaited or passed on as its "object ref"."""

    def __init__(self, coro):
        self._task = asyncio.ensure_future(coro)

    async def _to_object_ref(self):
        return _crossed(await self._task)

    def __await__(self):
        return self._to_object_ref().__await__()

    def cancel(self) -> None:
        self._task.cancel()


class FakeGenerator:
    """Stands in for ``DeploymentResponseGenerator``: an async generator's items, crossed."""

    def __init__(self, agen):
        self._agen = agen
        self._task: asyncio.Task | None = None

    def __aiter__(self):
        return self

    async def __anext__(self):
        return _crossed(await self._agen.__anext__())

    def cancel(self) -> None:
        self._task = asyncio.ensure_future(self._agen.aclose())


class FakeHandle:
    """Stands in for ``DeploymentHandle``: ``handle.options(stream=...).method.remote(*args)``."""

    def __init__(self, target, stream: bool = False):
        self._target = target
        self._stream = stream

    def options(self, *, stream: bool = False, **_):
        return FakeHandle(self._target, stream)

    def __getattr__(self, name: str):
        method = getattr(self._target, name)
        stream = self._stream

        class _Method:
            @staticmethod
            def remote(*args, **kwargs):
                args, kwargs = _crossed(args), _crossed(kwargs)
                if stream:
                    return FakeGenerator(method(*args, **kwargs))
                return FakeResponse(method(*args, **kwargs))

        return _Method


async def _construct(cls, *args):
    obj = cls.__new__(cls)
    result = obj.__init__(*args)
    if asyncio.iscoroutine(result):
        await result
    return obj


@contextlib.asynccontextmanager
async def inprocess_app(args: dict):
    """The ingress ASGI app of the graph built from ``args`` (an ``AppConfig`` dict), in this process.

    Yields ``(asgi_app, model_instance)``; the model's engine is shut down on exit.
    """
    from serve_app.deployments.decoder import VideoDecoder
    from serve_app.deployments.ingress import Ingress
    from serve_app.deployments.model import VideoModel

    cfg = resolve_paths(AppConfig.model_validate(args)).model_dump(mode="json")
    with contextlib.ExitStack() as stack:
        for name in ("Counter", "Gauge", "Histogram"):
            stack.enter_context(mock.patch.object(metrics_module, name, _NoMetric))
        decoder = await _construct(VideoDecoder.func_or_class, cfg)
        model = await _construct(VideoModel.func_or_class, cfg)
        # The class as written, not Serve's ASGI wrapper around it (whose async __del__ the GC would call).
        ingress_cls = next(c for c in Ingress.func_or_class.__mro__ if "__serve_build_asgi_app__" in vars(c))
        ingress = await _construct(ingress_cls, cfg, FakeHandle(decoder), FakeHandle(model))
        try:
            yield ingress.__serve_build_asgi_app__(), model
        finally:
            stopping = model.__del__()  # as Serve does when the replica stops: call, await what it returns
            if stopping is not None:
                await stopping
            decoder._pool.shutdown(wait=False)
