"""``python -m serve_app.preflight CONFIG``: the entry point kept at its old place.

The checks are :mod:`serve_app.model.preflight`, the command line :mod:`serve_app.model.preflight_cli`.
"""

if __name__ == "__main__":
    from serve_app.model.preflight_cli import main

    raise SystemExit(main())
