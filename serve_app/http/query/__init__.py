"""``POST /v1/video/query``: its shapes (:mod:`.protocol`) and its work (:mod:`.serving`)."""
