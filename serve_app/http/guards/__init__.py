"""Request-level defences of the ingress: pure ASGI middlewares and helpers (Ray-free).

Each middleware answers a hostile or overloading request itself, in the
project's error shape, through a ``reject(scope, receive, send, error)``
callback (the ingress's, which counts and logs it; :data:`.request.Reject`):

* :class:`.disconnect.DisconnectAsEnd`: a client that went away reaches the routes as an
  ``http.disconnect`` message (Ray's replica raised ``TaskCancelledError`` from ``receive``).
* :class:`.headers.ControlHeaderGuard`: Ray Serve's per-request control headers
  (``x-request-disconnect-disabled`` turns off cancellation on disconnect,
  ``x-request-timeout-seconds`` …) are the operator's, not the client's: 400
  naming the header, on every route.
* :class:`.headers.CrossSiteGuard`: a state-changing request (POST, PUT, PATCH, DELETE) that a
  web page of another site sent (``Origin`` / ``Sec-Fetch-Site``) is refused with 403,
  unless its origin is in ``security.allowed_origins``; requests without these browser
  headers (curl, SDKs) pass.
* :class:`.admission.AdmissionGuard`: every route but the health checks and the event
  subscriptions is admitted up to a number of requests per ingress replica
  (``ingress.max_ongoing_requests``), those with a body also per client
  (``security.max_requests_per_client``: 429), before the body is read; Ray
  Serve's slot count is that plus the subscriber slots plus
  ``security.reserved_slots``, so ``/healthz`` and ``/readyz`` never queue behind
  uploads, slow bodies or subscribers. It also refuses a clip request before its
  body when the pipeline behind is known to be full: the last clip request to
  end was refused by a full decoder or model queue (:func:`.admission.mark_pipeline_full`)
  less than ``retry_after_s`` ago.
* :class:`.body.BodyGuard`: wraps ``receive``: a body must arrive within
  ``body_timeout_s + received / body_min_rate_bytes_s`` seconds (408), is counted
  as it streams and cut off at its route's limit (413, nothing more read, chunked
  or not), and large bodies (``security.large_body_bytes``) are limited in
  number (503).

What the guards read of a request, and :func:`.request.client_key` (the identity of
per-client limits): :mod:`.request`. Escaping logged fields: :mod:`serve_app.text`.

Errors raised inside ``receive`` reach the route handler, which maps them as
every other :class:`serve_app.errors.ServeAppError`; if one escapes a handler
before the response starts, the middleware sends it.
"""
