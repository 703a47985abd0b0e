"""The Serve graph in one process, without Ray: the real ingress app over fake handles.

:func:`inprocess_app` builds the ingress's Starlette app with the real decoder and
model deployment classes behind stand-ins for ``DeploymentHandle`` that call them
directly (:class:`serve_app.testing.handles.FakeHandle`, the one set of fake handles). Every
value that crosses a stand-in handle is pickled and unpickled, as Ray would, so a value that
cannot cross a real handle fails here too. Metrics are
no-ops (``ray.serve.metrics`` needs a replica). Use it with ``httpx``'s
``ASGITransport``: fast, deterministic response bodies for unit tests.
"""

from __future__ import annotations

import contextlib
from unittest import mock

from serve_app import metrics as metrics_module
from serve_app.app import resolve_paths
from serve_app.config import AppConfig
from serve_app.testing.handles import FakeHandle, construct


class _NoMetric:
    def __init__(self, *args, **kwargs):
        pass

    def inc(self, *args, **kwargs):
        pass

    def set(self, *args, **kwargs):
        pass

    def observe(self, *args, **kwargs):
        pass


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
        decoder = await construct(VideoDecoder.func_or_class, cfg)
        model = await construct(VideoModel.func_or_class, cfg)
        # The class as written, not Serve's ASGI wrapper around it (whose async __del__ the GC would call).
        ingress_cls = next(c for c in Ingress.func_or_class.__mro__ if "__serve_build_asgi_app__" in vars(c))
        ingress = await construct(ingress_cls, cfg, FakeHandle(decoder), FakeHandle(model))
        try:
            yield ingress.__serve_build_asgi_app__(), model
        finally:
            stopping = model.__del__()  # as Serve does when the replica stops: call, await what it returns
            if stopping is not None:
                await stopping
            decoder._pool.shutdown(wait=False)
