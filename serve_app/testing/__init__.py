"""Fault-injection support for tests and drills (engines loaded through ``model.backend: module:factory``).

Kept inside the package, not under ``tests/``, so every Ray worker process can
import it without shipping the test tree in a ``runtime_env``.
"""
