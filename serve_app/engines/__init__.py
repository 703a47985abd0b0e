"""Generation engines behind one interface (:mod:`serve_app.engines.base`)."""
