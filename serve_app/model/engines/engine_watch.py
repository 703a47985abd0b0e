"""The vLLM engine-core process ends when the model replica that started it dies.

vLLM 0.24's ``AsyncLLM`` runs its engine core in a child process (``VLLM::EngineCore``) that
holds the GPU. It watches nothing: when its parent goes without a clean shutdown (``ray stop
--force``, a node agent killed, an OOM kill of the replica), the child is re-parented and keeps
the whole GPU (129 GB on an H200, ``../shared/gpu/baseline``: the next start then fails with
vLLM's not-enough-free-memory error). Ray's own child-process cleanup covers only a worker that
exits while its raylet lives.

:func:`install` (called in the replica before the engine starts) makes every engine core that this
process spawns run :func:`run_engine_core` first: it records the parent's pid and starts a daemon
thread that ends the engine core with ``SIGKILL`` within :data:`POLL_S` of the parent's death
(the kernel frees its GPU memory then). Polling ``os.getppid()`` is used rather than
``PR_SET_PDEATHSIG``, which fires when the *thread* that spawned the child ends, not the process.

How it gets into the child: vLLM starts the engine core with ``context.Process(target=
EngineCoreProc.run_engine_core, ...)`` under the ``spawn`` method (``vllm/v1/engine/utils.py``),
which pickles the target by its qualified name; :func:`install` points that attribute at
:func:`run_engine_core` here, so the spawned child imports this module and calls it, and it calls
vLLM's original function. Under ``model.engine_process: forkserver``
(:mod:`serve_app.model.engines.engine_process`) the child's parent is the fork server, which exits with
the replica; :data:`PARENT_ENV` then names the fork server. Checked against vLLM 0.24.0.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from serve_app.log_limit import get_logger

logger = get_logger(__name__)

#: Seconds between two looks at the parent's pid in the engine core.
POLL_S = 0.5
#: Environment variable through which the replica passes its pid to the engine cores it spawns.
PARENT_ENV = "COSMOS_SERVE_ENGINE_PARENT_PID"
#: "1": the engine core runs per-window cascade attention (:mod:`serve_app.model.engines.vllm_window_attention`).
WINDOW_ATTENTION_ENV = "COSMOS_SERVE_WINDOW_ATTENTION"


def parent_gone(expected_ppid: int, current_ppid: int) -> bool:
    """True when a process whose parent was ``expected_ppid`` now has another parent (re-parented:
    the parent died). A non-positive ``expected_ppid`` means unknown: never gone."""
    return expected_ppid > 0 and current_ppid != expected_ppid


def watch_parent(
    expected_ppid: int,
    on_gone: Callable[[], None],
    poll_s: float = POLL_S,
    getppid: Callable[[], int] = os.getppid,
    stop: threading.Event | None = None,
) -> threading.Thread:
    """Starts a daemon thread that calls ``on_gone`` once the parent is no longer ``expected_ppid``.

    Args:
        expected_ppid: the parent's pid when the process started.
        on_gone: called once, from the thread, when the parent is gone (then the thread ends).
        poll_s: seconds between two looks.
        getppid: the parent-pid source (tests pass their own).
        stop: when set, the thread ends without calling ``on_gone``.

    Returns:
        The started thread.
    """
    stop = stop or threading.Event()

    def loop() -> None:
        while not stop.wait(poll_s):
            if parent_gone(expected_ppid, getppid()):
                on_gone()
                return

    thread = threading.Thread(target=loop, name="cosmos-parent-watch", daemon=True)
    thread.start()
    return thread


def _kill_self() -> None:
    """Ends this process at once (the engine core's parent is gone; nobody will ever read its output)."""
    logger.error("engine core %d: its model replica (parent) is gone; exiting to free the GPU", os.getpid())
    time.sleep(0.05)  # let the line reach the log
    os.kill(os.getpid(), signal.SIGKILL)


def run_engine_core(*args: Any, **kwargs: Any) -> Any:
    """The engine core's entry point under :func:`install`: watch the parent, share tokenizer pools on
    deepcopy (:mod:`serve_app.model.engines.vllm_patches`), then run vLLM's.

    Runs in the spawned engine-core process. If the parent is already gone when it starts (the
    replica died while the child was importing), it exits at once.
    """
    from vllm.v1.engine.core import EngineCoreProc

    from serve_app.model.engines.vllm_patches import share_tokenizer_pools

    share_tokenizer_pools()  # the engine core builds an HF processor too
    if os.environ.get(WINDOW_ATTENTION_ENV) == "1":
        from serve_app.model.engines.vllm_window_attention import install_window_attention

        install_window_attention()
    expected = int(os.environ.get(PARENT_ENV, "0") or 0)
    if parent_gone(expected, os.getppid()):
        _kill_self()
    watch_parent(expected, _kill_self)
    original = getattr(EngineCoreProc, "_cosmos_original_run_engine_core", EngineCoreProc.run_engine_core)
    return original(*args, **kwargs)


def install(window_attention: bool = False) -> None:
    """Makes the engine cores this process spawns from now on end with it (see the module doc), and with
    ``window_attention`` run per-window cascade attention (:data:`WINDOW_ATTENTION_ENV`).

    Idempotent. Sets :data:`PARENT_ENV` to this process's pid and :data:`WINDOW_ATTENTION_ENV` (children inherit
    both) before vLLM's import.

    Raises:
        ImportError: vLLM is not installed.
    """
    os.environ[PARENT_ENV] = str(os.getpid())
    os.environ[WINDOW_ATTENTION_ENV] = "1" if window_attention else "0"
    from vllm.v1.engine.core import EngineCoreProc

    if getattr(EngineCoreProc, "_cosmos_original_run_engine_core", None) is None:
        EngineCoreProc._cosmos_original_run_engine_core = staticmethod(EngineCoreProc.run_engine_core)
        EngineCoreProc.run_engine_core = staticmethod(run_engine_core)
