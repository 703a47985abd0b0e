"""Builds the engine a config names: the built-in ``transformers`` and ``vllm`` engines, or any
``module:factory`` import path (how tests inject engines).

The interface (:mod:`serve_app.model.engines.base`) imports no implementation; this module imports them
(lazily: vLLM exists on GPU machines only).
"""

from __future__ import annotations

import importlib

from serve_app.config import ModelConfig
from serve_app.model.engines.base import Engine


def create_engine(config: ModelConfig) -> Engine:
    """Builds the engine named by ``config.backend``.

    ``transformers`` and ``vllm`` are built in; any other value is an import
    path ``package.module:factory`` called with the :class:`ModelConfig`.

    Raises:
        ValueError: unknown backend name or import path.
        TypeError: the factory did not return an :class:`Engine`.
    """
    if config.backend == "transformers":
        from serve_app.model.engines.transformers_engine import TransformersEngine

        return TransformersEngine(config)
    if config.backend == "vllm":
        from serve_app.model.engines.vllm_engine import VLLMEngine

        return VLLMEngine(config)
    if ":" in config.backend:
        module, _, attr = config.backend.partition(":")
        engine = getattr(importlib.import_module(module), attr)(config)
        if not isinstance(engine, Engine):
            raise TypeError(f"engine factory {config.backend!r} returned {type(engine).__name__}, not an Engine")
        return engine
    raise ValueError(f"unknown engine backend {config.backend!r}")
