"""The HTTP side of the ingress: one folder per pipeline route, the shared request path, the defences.

* :mod:`.query` and :mod:`.chat`: ``POST /v1/video/query`` and the OpenAI-compatible
  ``POST /v1/chat/completions``, each a ``protocol`` (request and response shapes), a ``parsing`` (the
  body read into validated fields) and a ``serving`` (the route's work) module; chat's ``video_url``
  turns a ``video_url`` into a clip source;
* :mod:`.json_body` (JSON request bodies: size-limited reads, content type, JSON objects, validation 400s);
* :mod:`.context` (request context, access log, one error mapping), :mod:`.pipeline` (decode, hand-off
  to the model, errors; Ray-free), :mod:`.sse` (the one server-sent-events loop),
  :mod:`.request_id` (the middleware that gives every request its id), :mod:`.error_handlers`;
* :mod:`.auth` (the API key), :mod:`.guards` (the ASGI defences: :mod:`~.guards.disconnect`, :mod:`~.guards.headers`,
  :mod:`~.guards.admission`, :mod:`~.guards.body`, and :mod:`~.guards.request`, what they read of a request),
  :mod:`.health` (with :mod:`.shared_result`, one controller round trip shared by pollers), :mod:`.models`.

The ingress deployment (:mod:`serve_app.deployments.ingress`) only declares the routes; the guard stack
in route order is :mod:`serve_app.deployments.ingress_guards`.
"""
