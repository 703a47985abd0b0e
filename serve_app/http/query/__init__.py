"""``POST /v1/video/query``: its shapes (:mod:`.protocol`), its body read (:mod:`.parsing`) and its work
(:mod:`.serving`)."""
