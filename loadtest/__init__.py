"""The bundled camera-fleet load tester (``python -m loadtest``).

Modules: ``settings`` (typed run options), ``camera`` (windows cut from a clip), ``schedule``
(arrival times), ``client`` (requests and SSE), ``runner`` (drives a run), ``records`` (one per
request), ``statistics`` (percentiles, verdicts, timelines), ``sweep`` (camera-count sweeps),
``report`` and ``plots`` (output), ``double`` (a fast test server) and ``traffic`` (the API the
benches use: one clip or body per request, any schedule, typed records back).
"""
