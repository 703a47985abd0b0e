"""``POST /v1/chat/completions`` (OpenAI-compatible): its shapes (:mod:`.protocol`), its body read (:mod:`.parsing`,
with :mod:`.video_url`: the clip source) and its work (:mod:`.serving`)."""
