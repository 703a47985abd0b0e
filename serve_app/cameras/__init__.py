"""Live cameras: the streams API's values (:mod:`.protocol`), windows, reader (with :mod:`.opening` and
:mod:`.held`), registry, store, rules, alert webhooks, the routes (:mod:`.routes`) and the dashboard (``static/``)."""
