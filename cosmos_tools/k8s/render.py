"""``serveConfigV2`` rendered from a Serve config, and written into a manifest with a round-trip YAML library.

One source of truth per RayService: a ``configs/*.yaml`` file. The manifest
carries it as ``serveConfigV2`` (a YAML string) whose first line names the file
(:data:`HEADER`), produced by :func:`render_serve_config` under these rules:

1. ``http_options.host`` becomes ``0.0.0.0`` and ``http_options.port`` becomes
   8000: on Kubernetes the proxy must listen on the pod IP, on the port that
   KubeRay's Serve Service and its worker readiness probe use (the container
   port named ``serve``). Other ``http_options`` keys pass through.
2. Every application's ``args`` must load as :class:`serve_app.config.AppConfig`
   and then pass through **unchanged** (but for rules 4 and 5), so the cluster runs the same application.
3. Settings that only make sense on the machine that holds the file are
   refused: a relative local ``model.model_id`` and relative
   ``sources.allowed_roots`` (relative to what, inside a pod?). A generated
   checkpoint (``model.checkpoint``) is accepted only with an absolute
   ``model_id``: the pod builds it there (the CPU smoke test's random weights).
4. The stream database goes on its volume, and the stream worker next to it: every
   application's ``args.streams.db_path`` becomes :data:`STREAMS_DB_PATH` (on the
   PersistentVolumeClaim that the ``streams`` worker group mounts at :data:`STREAMS_MOUNT`,
   k8s/base/rayservice.yaml) and ``args.stream_worker.resources`` asks for one unit of
   :data:`STREAMS_RESOURCE`, the Ray custom resource only that group's single pod offers. A
   config that names another ``db_path``, or more than one stream-worker replica (the volume
   is ReadWriteOnce), is refused.
5. vLLM's compile cache goes on the model pods' cache volume: for the ``vllm`` backend,
   ``args.model.compile_cache_dir`` becomes :data:`COMPILE_CACHE_MOUNT`, where the GPU worker
   group mounts its ``compile-cache`` volume (k8s/base/rayservice.yaml; the ``pvc-cache`` overlay
   puts it on the ReadWriteMany claim the model pods share). Whatever the config sets there is
   replaced: a local folder means nothing inside a pod, and the config stays usable with
   ``serve run`` on one machine (unset: vLLM's own default folders). Apart from these keys
   (rules 4 and 5), ``args`` pass through unchanged.
6. Everything else (``proxy_location``, ``logging_config``, …) passes through.
"""

from __future__ import annotations

import copy
import io
import math
import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from serve_app.config import AppConfig

if TYPE_CHECKING:
    from ruamel.yaml import YAML


ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = "configs/a100.yaml"
#: Serve's HTTP port on KubeRay: the container port named ``serve`` (KubeRay's default).
SERVE_PORT = 8000
#: Where the ``streams`` worker group mounts the stream database's PersistentVolumeClaim (k8s/base/rayservice.yaml).
STREAMS_MOUNT = "/data/streams"
#: ``streams.db_path`` on KubeRay: the SQLite file on that volume.
STREAMS_DB_PATH = f"{STREAMS_MOUNT}/streams.sqlite"
#: Ray custom resource that only the ``streams`` group's pod offers (1 unit); the stream worker asks for it.
STREAMS_RESOURCE = "cosmos_streams_db"
#: ``model.compile_cache_dir`` on KubeRay: where the GPU worker group mounts the ``compile-cache``
#: volume (vLLM's torch.compile/AOT artifacts, Inductor's and Triton's kernels; k8s/base/rayservice.yaml).
COMPILE_CACHE_MOUNT = "/var/cache/cosmos-serve"
HEADER = "# Generated from {source} by `python -m cosmos_tools.k8s render {source}`: edit the config, not this block.\n"
_HEADER_RE = re.compile(r"^# Generated from (?P<source>\S+) by ")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RenderError(ValueError):
    """The Serve config cannot be carried to Kubernetes as it is (message says why and what to do)."""


def render_serve_config(doc: Mapping[str, Any], source: str = DEFAULT_CONFIG) -> str:
    """Renders a Serve config (a parsed ``configs/*.yaml``) as the RayService's ``serveConfigV2``.

    Args:
        doc: the Serve config file's content.
        source: the file's path (relative to the project root) as written in the header comment.

    Returns:
        YAML text (ends with a newline) under the module's render rules.

    Raises:
        RenderError: no applications, args that do not load as AppConfig, or a
            local-only setting (rule 3).
    """
    out = copy.deepcopy(dict(doc))
    apps = out.get("applications")
    if not apps:
        raise RenderError(f"{source}: no `applications` to deploy")
    http = dict(out.get("http_options") or {})
    http.update(host="0.0.0.0", port=SERVE_PORT)
    out["http_options"] = http
    for i, app in enumerate(apps):
        where = f"{source}: applications[{i}]"
        try:
            config = AppConfig.model_validate(app.get("args") or {})
        except Exception as exc:  # pydantic.ValidationError: say which file and app
            raise RenderError(f"{where}.args do not load as AppConfig: {exc}") from exc
        model = config.model
        if model.model_id.startswith((".", "~")):
            raise RenderError(
                f"{where}.args.model.model_id={model.model_id!r} is relative to the local directory; "
                "use a hub id or an absolute path inside the pod"
            )
        if model.checkpoint is not None and not model.model_id.startswith("/"):
            raise RenderError(
                f"{where}.args.model.checkpoint={model.checkpoint!r} builds a test checkpoint at model_id; "
                "on Kubernetes give it an absolute model_id inside the pod, or point model_id at a hub id "
                "or an absolute path in the image or a volume"
            )
        relative = [r for r in config.sources.allowed_roots if not r.startswith("/")]
        if relative:
            raise RenderError(f"{where}.args.sources.allowed_roots {relative} must be absolute paths inside the pod")
        args = _place_streams(dict(app.get("args") or {}), config, where)
        app["args"] = _place_compile_cache(args, config)
    return HEADER.format(source=source) + yaml.safe_dump(
        out, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True
    )


def _place_streams(args: dict[str, Any], config: AppConfig, where: str) -> dict[str, Any]:
    """``args`` with the stream database on its volume and the stream worker pinned next to it (rule 4).

    With ``streams.workers: N`` each of the N stream-worker deployments asks for 1/N of the unit (rounded
    down to Ray's 0.0001 resource granularity), so all of them land on the one pod with the volume.

    Raises:
        RenderError: the config names another ``streams.db_path`` (more than one replica per stream worker is
            refused by the config itself, :class:`serve_app.config.AppConfig`).
    """
    if config.streams.db_path not in (None, STREAMS_DB_PATH):
        raise RenderError(
            f"{where}.args.streams.db_path={config.streams.db_path!r}: on KubeRay the stream database is "
            f"{STREAMS_DB_PATH}, on the volume of the `streams` worker group; leave db_path unset (the render "
            "sets it) or set that path"
        )
    worker = config.stream_worker
    streams = dict(args.get("streams") or {})
    streams["db_path"] = STREAMS_DB_PATH
    # what the config sets, or its defaults (num_cpus 0.5 …) when it has no stream_worker section: a
    # section holding only `resources` would otherwise take DeploymentOptions' plain defaults (1 CPU)
    stream_worker = {**worker.model_dump(mode="json", exclude_unset=True), **(args.get("stream_worker") or {})}
    n = config.streams.workers
    share: float = 1 if n == 1 else math.floor(10_000 / n) / 10_000  # Ray keeps custom resources to 4 decimals
    stream_worker["resources"] = {**(stream_worker.get("resources") or {}), STREAMS_RESOURCE: share}
    return {**args, "streams": streams, "stream_worker": stream_worker}


def _place_compile_cache(args: dict[str, Any], config: AppConfig) -> dict[str, Any]:
    """``args`` with vLLM's compile cache on the model pods' cache volume (rule 5); other backends unchanged."""
    if config.model.backend != "vllm":
        return args
    return {**args, "model": {**(args.get("model") or {}), "compile_cache_dir": COMPILE_CACHE_MOUNT}}


def display_path(path: str | Path) -> str:
    """``path`` relative to the project root where it lies inside it, else as given."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def render_file(path: str | Path) -> str:
    """:func:`render_serve_config` of a config file (its path relative to the project root goes into the header).

    Raises:
        RenderError: as :func:`render_serve_config`.
        OSError: the file cannot be read.
    """
    return render_serve_config(yaml.load(Path(path).read_text(), Loader=_Loader), source=display_path(path))


def source_of(serve_config: str) -> str | None:
    """The config file named by a rendered ``serveConfigV2``'s header line, or None when there is none."""
    match = _HEADER_RE.match(serve_config)
    return match["source"] if match else None


def _yaml() -> YAML:
    from ruamel.yaml import YAML


    rt = YAML()  # round-trip: comments, key order, flow style and quotes survive
    rt.preserve_quotes = True
    rt.width = 4096
    rt.indent(mapping=2, sequence=2, offset=0)
    return rt


def replace_serve_config(manifest_text: str, serve_config: str) -> str:
    """Replaces the ``serveConfigV2`` of a manifest's text, keeping every other line and comment.

    The manifest is either a RayService (the value of its ``spec.serveConfigV2``)
    or an RFC 6902 patch file (the ``value`` of the operation whose ``path`` is
    ``/spec/serveConfigV2``). The new value is written as a literal block (``|``).

    Raises:
        ValueError: the text has no ``serveConfigV2`` to replace.
    """
    from ruamel.yaml.scalarstring import LiteralScalarString

    rt = _yaml()
    docs = list(rt.load_all(manifest_text))
    hits = 0
    for doc in docs:
        if (
            isinstance(doc, MutableMapping)
            and isinstance(doc.get("spec"), MutableMapping)
            and "serveConfigV2" in doc["spec"]
        ):
            doc["spec"]["serveConfigV2"] = LiteralScalarString(serve_config)
            hits += 1
        elif isinstance(doc, list):
            for op in doc:
                if isinstance(op, MutableMapping) and op.get("path") == "/spec/serveConfigV2" and "value" in op:
                    op["value"] = LiteralScalarString(serve_config)
                    hits += 1
    if not hits:
        raise ValueError("no spec.serveConfigV2 (nor a patch of /spec/serveConfigV2) in the manifest")
    out = io.StringIO()
    if len(docs) == 1:
        rt.dump(docs[0], out)
    else:
        rt.explicit_start = True
        rt.dump_all(docs, out)
    return out.getvalue()
