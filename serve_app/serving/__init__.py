"""The HTTP routes' work, one module per route, over the Ray-free :mod:`serve_app.pipeline`.

:mod:`.context` (request context, access log, error mapping), :mod:`.sse` (the one
server-sent-events loop), :mod:`.query`, :mod:`.chat`, :mod:`.models`, :mod:`.health`,
and :mod:`.request_id` (the middleware that gives every request its id). The ingress
deployment (:mod:`serve_app.deployments.ingress`) only declares the routes.
"""
