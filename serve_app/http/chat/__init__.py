"""``POST /v1/chat/completions`` (OpenAI-compatible): its shapes (:mod:`.protocol`) and its work (:mod:`.serving`)."""
