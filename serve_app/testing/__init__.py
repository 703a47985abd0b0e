"""Test helpers that must live in the runtime package: what Ray workers import, and the local-Serve CLI.

* :mod:`~serve_app.testing.engines`: the scripted, fault-injecting engine and the recording engine
  (``model.backend: module:factory``; a model replica imports them).
* :mod:`~serve_app.testing.handles`: the one set of fake Serve handles (pickling, like Ray) and a scripted
  decoder + model behind them (the pipeline tests, the in-process graph of ``tests/inprocess.py``).
* :mod:`~serve_app.testing.fake_camera`: a fake RTSP camera on loopback (the camera benches, the
  load tester's ``--streams`` and the camera tests).
* :mod:`~serve_app.testing.local_serve`: a local Ray + Serve (start, deploy, stop; the CPU graph's args;
  ``python -m serve_app.testing.local_serve`` serves a Serve config on a chosen port).
* :mod:`~serve_app.testing.polling`: the one polling helper (``wait_for``, ``wait_for_async``) of the
  tests and benches.
* :mod:`~serve_app.testing.ports`: a free loopback port, a UDP port probe.

Kept inside the package, not under ``tests/``, so every Ray worker process can
import it without shipping the test tree in a ``runtime_env``. Nothing here imports
the benches (``benchmarks/``) or the load tester (``loadtest/``); what only the tests
use lives under ``tests/``, what only the benches use under ``benchmarks/``.
"""
