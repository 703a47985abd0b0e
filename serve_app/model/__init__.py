"""The model side: engines, one question through an engine (:mod:`.generation`), prompts, reasoning,
stop strings, token coalescing, the context budget, the tokenizer, checkpoints and preflight checks; and
the caller's side of a model call: reading its chunk stream (:mod:`.chunk_reading`) and its sampling
settings from the configured defaults (:mod:`.sampling_options`)."""
