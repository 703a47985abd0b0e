"""Per-request stage timings of the vLLM engine (off in production): preprocessing wait and run,
engine queue, prefill, decode, as rows of a JSON-lines file named by :data:`TIMINGS_ENV`."""

from __future__ import annotations

from typing import Any

#: Environment variable naming a JSON-lines file: when set, every request's stage timings
#: (preprocessing wait and run, engine queue, prefill, decode) are appended there. Used by
#: ``python -m benchmarks.gpu`` for the per-clip breakdown; off in production.
TIMINGS_ENV = "COSMOS_SERVE_ENGINE_TIMINGS"


def engine_ts(m: Any, name: str) -> float:
    """Timestamp ``name`` (seconds) of vLLM's ``RequestStateStats`` ``m``; 0.0 when unset or absent."""
    return float(getattr(m, name, 0.0) or 0.0) if m is not None else 0.0


def timings_row(
    request_id: str,
    t_submit: float,
    t_engine: float,
    stage: dict[str, float],
    m: Any,
    n_out: int,
    prompt_tokens: int | None,
    cached_tokens: int | None = None,
    received: list[float] | None = None,
) -> dict[str, Any]:
    """One request's stage timings in milliseconds (a row of the :data:`TIMINGS_ENV` file).

    ``t_submit`` / ``t_engine``: ``time.perf_counter()`` seconds when the request arrived and when it
    was handed to ``AsyncLLM``; ``stage``: what the preprocessing thread recorded (empty without one:
    ``thread_start``, ``prompt_built`` (the prompt and its clip ready; with ``patchify: table``, the patches
    made), ``processed`` (vLLM's input processing done), ``thread_end``, ``patchify_reused`` (1.0: the clip's
    patches came from another question of it)) and ``gate_start`` (when the request
    reached the prefill gate, :class:`serve_app.model.engines.prefill_gate.PrefillGate`); ``m``: vLLM's
    ``RequestStateStats`` of the last output (engine timestamps in seconds), or None;
    ``cached_tokens``: the prompt tokens vLLM's prefix cache served (``RequestOutput.num_cached_tokens``);
    ``received``: ``time.perf_counter()`` seconds when the replica's generator got the request's first and last
    output (empty or None: none came). ``received_first_ms`` / ``received_last_ms`` count from ``t_engine``:
    ``received_last_ms - received_first_ms`` is the decode as the replica saw it, ``decode_ms`` as vLLM's engine
    core stamped it (``results/gpu/fleet-lease17/``: 2 ms apart on average at 64 windows in flight).
    """
    row: dict[str, Any] = {"request_id": request_id, "completion_tokens": n_out, "prompt_tokens": prompt_tokens}
    if cached_tokens is not None:
        row["cached_tokens"] = cached_tokens
    if "thread_start" in stage:
        row["preprocess_wait_ms"] = (stage["thread_start"] - t_submit) * 1000
        row["processor_ms"] = (stage["processed"] - stage["thread_start"]) * 1000
        row["handoff_prep_ms"] = (stage["thread_end"] - stage["processed"]) * 1000
        # processor_ms in two: the prompt (with the table patchify), then vLLM's input processing
        row["prompt_build_ms"] = (stage["prompt_built"] - stage["thread_start"]) * 1000
        row["vllm_inputs_ms"] = (stage["processed"] - stage["prompt_built"]) * 1000
        row["pixel_bytes"] = stage.get("pixel_bytes")
        if "patchify_reused" in stage:  # the table patchify came from another question of the clip
            row["patchify_reused"] = bool(stage["patchify_reused"])
    if "gate_start" in stage:  # a later question of its clip waited this long for the first one's prefill
        row["prefill_gate_ms"] = (t_engine - stage["gate_start"]) * 1000
    row["frontend_ms"] = (t_engine - t_submit) * 1000
    if received:
        row["received_first_ms"] = (received[0] - t_engine) * 1000
        row["received_last_ms"] = (received[-1] - t_engine) * 1000
    if engine_ts(m, "queued_ts"):
        row["engine_queue_ms"] = (m.scheduled_ts - m.queued_ts) * 1000
        if m.first_token_ts:
            row["prefill_ms"] = (m.first_token_ts - m.scheduled_ts) * 1000
            row["first_token_latency_ms"] = m.first_token_latency * 1000
        if m.last_token_ts and m.first_token_ts:
            row["decode_ms"] = (m.last_token_ts - m.first_token_ts) * 1000
    return row
