"""The one way to build a call's :class:`~serve_app.protocol.SamplingOptions` from the configured defaults.

The default numbers have one definition, :mod:`serve_app.model_facts` (``COSMOS_TEMPERATURE``,
``COSMOS_TOP_P``, ``COSMOS_REPETITION_PENALTY``, ``COSMOS_MAX_TOKENS``: the Cosmos-Reason1 model card's
inference recipe), which ``model.sampling`` (:class:`serve_app.config.SamplingDefaults`) takes as its
defaults; every caller (the HTTP routes, the camera windows, the replica's warm-up) fills what its request
leaves out from ``model.sampling`` here.
"""

from __future__ import annotations

from serve_app.config import SamplingDefaults
from serve_app.protocol import SamplingOptions


def sampling_options(
    defaults: SamplingDefaults,
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    seed: int | None = None,
    ignore_eos: bool = False,
) -> SamplingOptions:
    """``defaults`` (``model.sampling``) with a request's settings over them; None: the default
    (``top_k`` and ``presence_penalty`` are the configured ones: no route takes them per request).

    Args:
        defaults: the configured defaults.
        max_tokens: output budget in tokens.
        temperature: sampling temperature (0 … 2; 0 is greedy, so only None takes the default).
        top_p: nucleus sampling mass (0 … 1].
        repetition_penalty: repetition penalty.
        seed: RNG seed, or None (engine-chosen).
        ignore_eos: decode all ``max_tokens`` (benchmarks and warm-up).
    """
    return SamplingOptions(
        max_tokens=defaults.max_tokens if max_tokens is None else max_tokens,
        temperature=defaults.temperature if temperature is None else temperature,
        top_p=defaults.top_p if top_p is None else top_p,
        repetition_penalty=defaults.repetition_penalty if repetition_penalty is None else repetition_penalty,
        seed=seed,
        ignore_eos=ignore_eos,
        top_k=defaults.top_k,
        presence_penalty=defaults.presence_penalty,
    )
