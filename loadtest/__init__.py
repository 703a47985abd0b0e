"""The bundled camera-fleet load tester (``python -m loadtest``)."""
