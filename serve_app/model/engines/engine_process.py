"""The engine-core process is forked from a server that imported vLLM while the replica did.

vLLM 0.24 starts ``AsyncLLM``'s engine core (``VLLM::EngineCore``, the process that holds the GPU) with
``multiprocessing``'s ``spawn`` method whenever it runs inside a Ray actor (``_maybe_force_spawn`` in
``vllm/utils/system_utils.py``: "In a Ray actor and can only be spawned"). A spawned child starts a fresh
interpreter and imports vLLM again, after the replica has imported it and built its HF processor: on the H200
that second import cost 18 s of a warm start of 84 s, one after the other (``results/gpu/lifecycle/``:
engine core spawned at +28.5 s, its ``Initializing a V1 LLM engine`` at +46.5 s).

Python's ``forkserver`` method removes it without the hazards of ``fork`` in a Ray worker: at the start of
the replica (before it imports vLLM) :func:`start_server` launches the fork server, a fresh interpreter
(no Ray threads, no CUDA) that imports :data:`PRELOAD` **while** the replica imports vLLM; the engine core
is then forked from that server at once, with vLLM already imported. :func:`install` makes vLLM's
engine-core launcher (``vllm.v1.engine.utils.get_mp_context``) use it wherever vLLM would have spawned.

What differs from ``spawn`` and how it is handled:

* The environment: a forked child inherits the *server's* environment (the replica's when the server
  started), not the replica's at the time of the start. :class:`EnvForwardingProcess` sends the replica's
  ``os.environ`` at ``start()`` and the child takes it over before vLLM's code runs.
* The parent: the engine core's parent is the fork server, which exits as soon as the replica dies (it
  reads a pipe only the replica holds; ``multiprocessing/forkserver.py``). The child therefore watches its
  actual parent (:data:`~serve_app.model.engines.engine_watch.PARENT_ENV` is set to it), so it still ends
  when the replica dies, one hop later.
* CUDA: the server must never initialise CUDA (a forked child could not use it then). vLLM keeps CUDA
  uninitialised on import (its ``fork`` method, the default outside Ray, relies on it);
  :func:`_check_no_cuda` refuses to run a child from a server that broke this.

Checked against CPython 3.11/3.12 and vLLM 0.24.0.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from serve_app.log_limit import get_logger

logger = get_logger(__name__)

#: Modules the fork server imports before it forks anything: vLLM's engine core (it pulls in torch,
#: transformers and vLLM's model registry) and this project's engine-core entry point
#: (:mod:`serve_app.model.engines.engine_watch`). A module that fails to import is skipped there (the child
#: imports it itself, as under spawn).
PRELOAD = ("vllm.v1.engine.core", "serve_app.model.engines.engine_watch")


def _run_with_env(
    env: Mapping[str, str], target: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Any:
    """The child's entry point: take over the starting process's environment, then run ``target``."""
    from serve_app.model.engines import engine_watch

    os.environ.clear()
    os.environ.update(env)
    _name_process(os.environ.get(_TITLE_ENV, ""))
    _drop_alive_fd()
    # Watch the actual parent (the fork server, which exits with the replica), not the replica.
    os.environ[engine_watch.PARENT_ENV] = str(os.getppid())
    _check_no_cuda()
    return target(*args, **kwargs)


#: Environment key through which :class:`EnvForwardingProcess` passes the child's process title.
_TITLE_ENV = "COSMOS_SERVE_PROCESS_TITLE"


def _name_process(title: str) -> None:
    """Sets this process's kernel name (``comm``: what ``ps -o comm``, ``top`` and psutil's ``name()`` show;
    at most 15 bytes, so ``VLLM::EngineCore`` shows as ``VLLM::EngineCor``).

    vLLM titles its engine core ``VLLM::EngineCore`` with setproctitle, which did not take in a child forked
    from the fork server on the H200 (its command line stayed the fork server's); the name keeps a left-over
    engine core recognisable to ``ps`` and the lifecycle bench. Does nothing without a title or off Linux.
    """
    if not title or not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, title.encode()[:15] + b"\0", 0, 0, 0)  # PR_SET_NAME (linux/prctl.h)


def _drop_alive_fd() -> None:
    """Closes this child's copy of the replica's end of the fork server's "alive" pipe.

    ``multiprocessing`` hands every forked child that end (so the child could use the server too); while
    any process holds it the server never sees the replica die, never exits, and the engine core's watch
    never fires. The engine core starts no processes through this server, so it lets go of it.
    """
    server: Any = getattr(multiprocessing.forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None


def _check_no_cuda() -> None:
    """Raises RuntimeError when CUDA was initialised before the fork (in the fork server)."""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.cuda, "is_initialized", lambda: False)():
        raise RuntimeError(
            "the engine-core fork server initialised CUDA before forking; set model.engine_process: spawn"
        )


class EnvForwardingProcess(multiprocessing.context.ForkServerProcess):
    """A ``forkserver`` process that runs its target under the starting process's environment of ``start()``.

    Same constructor and behaviour as ``multiprocessing``'s ``Process``; only ``start()`` differs: it
    captures ``os.environ`` and wraps the target (:func:`_run_with_env`).
    """

    def start(self) -> None:
        """Starts the process (forked by the fork server) with a snapshot of ``os.environ`` taken now."""
        slots: Any = self  # multiprocessing's private _target/_args/_kwargs (untyped in typeshed)
        target, args, kwargs = slots._target, slots._args, slots._kwargs
        slots._target = _run_with_env
        env = dict(os.environ)
        env[_TITLE_ENV] = f"VLLM::{self.name}"  # vLLM names it EngineCore (EngineCore_DP<i> with data parallelism)
        slots._args = (env, target, tuple(args), dict(kwargs))
        slots._kwargs = {}
        super().start()


class PreloadedContext(multiprocessing.context.ForkServerContext):
    """``multiprocessing.get_context("forkserver")`` whose ``Process`` is :class:`EnvForwardingProcess`."""

    Process = EnvForwardingProcess


#: The one context (the fork server is per process anyway).
CONTEXT = PreloadedContext()


def start_server(preload: Sequence[str] = PRELOAD) -> None:
    """Starts this process's fork server now, importing ``preload`` there, and returns at once.

    Call it before the replica imports vLLM, after the environment that the engine core's imports read is
    set (e.g. ``VLLM_CACHE_ROOT``); later changes still reach the child (:class:`EnvForwardingProcess`).
    Idempotent (the server is started once per process; a second call changes nothing).
    """
    CONTEXT.set_forkserver_preload(list(preload))
    multiprocessing.forkserver.ensure_running()


def vllm_context(original: Callable[[], Any]) -> Callable[[], Any]:
    """Wraps vLLM's ``get_mp_context``: :data:`CONTEXT` where vLLM chose ``spawn``, vLLM's own context otherwise.

    vLLM's function still runs first, for its side effects (``RAY_ADDRESS`` for the child, the visible
    devices' variables), which the child then receives with the environment.
    """

    def get_mp_context() -> Any:
        ctx = original()
        if ctx.get_start_method() == "spawn":
            return CONTEXT
        return ctx

    return get_mp_context


def install() -> bool:
    """Makes vLLM start engine cores from the fork server (see the module doc). Idempotent.

    Returns:
        False, changing nothing, when vLLM's engine-core launcher is not there (no vLLM).
    """
    try:
        import vllm.v1.engine.utils as launcher
    except ImportError:
        return False
    current = launcher.get_mp_context
    if getattr(current, "_cosmos_forkserver", False):
        return True
    wrapped = vllm_context(current)
    wrapped._cosmos_forkserver = True  # type: ignore[attr-defined]
    launcher.get_mp_context = wrapped
    return True
