"""Bench commands (``python -m benchmarks.<name>``); each writes a JSON result file."""
