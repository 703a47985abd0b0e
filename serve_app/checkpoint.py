"""``python -m serve_app.checkpoint VARIANT OUT_DIR``: the entry point kept at its old place.

The checkpoint writer is :mod:`serve_app.model.checkpoint`.
"""

if __name__ == "__main__":
    from serve_app.model.checkpoint import main

    raise SystemExit(main())
