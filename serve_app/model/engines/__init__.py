"""Generation engines behind one interface (:mod:`serve_app.model.engines.base`)."""
