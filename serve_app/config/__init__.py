"""The one typed configuration of the application.

A Serve config file's ``args:`` maps onto :class:`AppConfig`; so do the KubeRay
manifest (rendered from ``configs/a100.yaml``) and the load tester, which
reads the same file to learn the server's limits. Every model is
``extra="forbid"``: a misspelled key fails at load time, not on a cluster.

The sections live in one module each or by group: :mod:`.model` (``model:``), :mod:`.decode`
(``decode:``), :mod:`.clients` (``limits:``, ``sources:``, ``security:``), :mod:`.streams`
(``streams:``), :mod:`.deployments` (the four deployment blocks and their defaults), :mod:`.app`
(:class:`AppConfig`, the checks across sections) and :mod:`.files` (reading a Serve config file,
overrides; ``python -m serve_app.config override``, :mod:`.__main__`). This package's names are
the config's public API: import them from ``serve_app.config``.
"""

from __future__ import annotations

from serve_app.config.app import AppConfig
from serve_app.config.clients import (
    RAY_SERVE_CONTROL_HEADERS,
    URL_SCHEMES,
    LimitsConfig,
    SecurityConfig,
    SourcesConfig,
    UrlScheme,
)
from serve_app.config.decode import DecodeConfig, PixelBudget
from serve_app.config.deployments import (
    DEPLOYMENT_DEFAULTS,
    STREAM_API_SLOTS,
    DeploymentOptions,
    deployment_defaults,
)
from serve_app.config.files import app_config_from_file, load_serve_config, override
from serve_app.config.model import WARMUP_TEXT_TOKENS, ModelConfig, SamplingDefaults
from serve_app.config.streams import StreamsConfig
from serve_app.model_facts import PIXEL_FACTOR  # re-exported: serve_app.decode.sampling imports it here

__all__ = [
    "DEPLOYMENT_DEFAULTS",
    "PIXEL_FACTOR",
    "RAY_SERVE_CONTROL_HEADERS",
    "STREAM_API_SLOTS",
    "URL_SCHEMES",
    "WARMUP_TEXT_TOKENS",
    "AppConfig",
    "DecodeConfig",
    "DeploymentOptions",
    "LimitsConfig",
    "ModelConfig",
    "PixelBudget",
    "SamplingDefaults",
    "SecurityConfig",
    "SourcesConfig",
    "StreamsConfig",
    "UrlScheme",
    "app_config_from_file",
    "deployment_defaults",
    "load_serve_config",
    "override",
]
