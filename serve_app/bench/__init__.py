"""Bench commands (``python -m serve_app.bench.<name>``); each writes a JSON result file."""
