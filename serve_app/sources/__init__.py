"""Where a clip comes from: the rules every source passes (:mod:`.rules`), downloads (:mod:`.fetch`),
camera bodies over pinned connections (:mod:`.http_source`, :mod:`.rtsp_relay`)."""
