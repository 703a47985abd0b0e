"""Bench commands (``python -m benchmarks.<name>``); each writes a JSON result file.

Outside the runtime package and the images: the benches import :mod:`serve_app` and the load
tester (:mod:`loadtest`), never the reverse (``tests/unit/repo/test_import_layers.py`` checks it).
"""
