"""The model side: engines, one question through an engine (:mod:`.generation`), prompts, reasoning,
stop strings, token coalescing, the context budget, the tokenizer, checkpoints and preflight checks."""
