"""One change to vLLM 0.24's behaviour, applied in the model replica and in its engine-core process.

:func:`share_tokenizer_pools`: ``copy.deepcopy`` of vLLM's thread-safe tokenizer pool returns the pool.

vLLM's renderer wraps the tokenizer in a pool of deep copies (``maybe_make_thread_pool`` in
``vllm/tokenizers/hf.py``: a class made per call that mixes in ``ThreadSafeHFTokenizerMixin``), and its
``__reduce__`` deep-copies the tokenizer again. transformers' ``ProcessorMixin.from_pretrained`` deep-copies
its kwargs, the tokenizer included, so every HF processor vLLM builds copied the whole Qwen tokenizer
several times over: on the H200 the first clip of each of 4 preprocessing threads took 66 s
(py-spy stacks in ``results/gpu/lifecycle/``; 1.3-2.4 s once shared). The pool is thread-safe by design and
nothing mutates it, so sharing it is what the copy was for. The pool's own copies of the plain tokenizer
(``maybe_make_thread_pool`` deep-copies a non-pool tokenizer) are untouched.
"""

from __future__ import annotations

from typing import Any


def _share(self: Any, memo: dict[int, Any]) -> Any:
    """``__deepcopy__`` of a tokenizer pool: the pool itself."""
    return self


def share_tokenizer_pools() -> bool:
    """Makes every vLLM tokenizer pool of this process (made before or after) deep-copy to itself.

    Idempotent. Returns False, changing nothing, when vLLM (or that mixin) is not there.
    """
    try:
        from vllm.tokenizers.hf import ThreadSafeHFTokenizerMixin
    except ImportError:
        return False
    ThreadSafeHFTokenizerMixin.__deepcopy__ = _share
    return True
