"""What tests, benches and drills share (kept in the package so Ray workers can import it).

* :mod:`~serve_app.testing.local_serve`: a local Ray + Serve (start, deploy, stop; the CPU graph's args;
  ``python -m serve_app.testing.local_serve`` serves a Serve config on a chosen port).
* :mod:`~serve_app.testing.replicas`: memory of the Serve processes; find, kill and count replicas.
* :mod:`~serve_app.testing.engines`: the scripted, fault-injecting engine (``model.backend: module:factory``).
* :mod:`~serve_app.testing.clock`: virtual time for asyncio unit tests.

Kept inside the package, not under ``tests/``, so every Ray worker process can
import it without shipping the test tree in a ``runtime_env``.
"""
