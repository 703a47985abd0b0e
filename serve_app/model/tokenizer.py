"""The real Qwen2/Qwen2.5 tokenizer, rebuilt offline from ``qwen.tiktoken`` with transformers' converter.

No machine of this project reaches the model hub, so the checkpoint command builds
``tokenizer.json`` itself. The BPE ranks come from the PyPI package ``dashscope==2.0.2``
(``dashscope/resources/qwen.tiktoken``: 151,643 ranks, the same vocabulary as Qwen2.5's
``vocab.json``/``merges.txt``). The conversion is transformers'
:class:`~transformers.convert_slow_tokenizer.TikTokenConverter` (tiktoken's reader, GPT-2's
byte-to-unicode map, the split + byte-level pre-tokenizer, decoder and post-processor), with the
three things Qwen's published ``tokenizer.json`` does differently (see :class:`QwenTikTokenConverter`).
The regex, the added tokens and the chat template are in :mod:`serve_app.model_facts`.

Qwen3 / Qwen3-VL use the same ranks and pre-tokenizer (NFC + the same split regex; their added
tokens start at the same id 151643, see :mod:`serve_app.model_facts_qwen3_vl`) and add four
non-special tokens (151665–151668, ``<think>`` among them), so the added tokens, the chat template,
``model_max_length`` and eos/pad are parameters here; their defaults are Qwen2.5's.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, normalizers
from transformers.convert_slow_tokenizer import TikTokenConverter, bytes_to_unicode

from serve_app.log_limit import get_logger
from serve_app.model_facts import ADDED_TOKENS, CHAT_TEMPLATE, MODEL_MAX_LENGTH, PRETOKENIZE_REGEX

logger = get_logger(__name__)

#: One added token: (id, content, special).
AddedTokenSpec = tuple[int, str, bool]

#: SHA-256 of ``qwen.tiktoken`` in ``dashscope==2.0.2`` (checked when read).
QWEN_TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"


def tiktoken_file() -> Path:
    """Path of ``qwen.tiktoken`` inside the installed ``dashscope`` package.

    The package is located without importing it (its import pulls in an SDK
    this project does not use).

    Raises:
        FileNotFoundError: ``dashscope==2.0.2`` is not installed.
    """
    spec = importlib.util.find_spec("dashscope")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("qwen.tiktoken not found: pip install dashscope==2.0.2")
    path = Path(spec.origin).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: pip install dashscope==2.0.2")
    return path


def load_ranks(path: Path) -> dict[bytes, int]:
    """Reads a tiktoken rank file (``base64(token_bytes) rank`` per line) with tiktoken's reader.

    Returns:
        token bytes → rank (151,643 entries for ``qwen.tiktoken``).

    Raises:
        ValueError: the file is not ``dashscope==2.0.2``'s ``qwen.tiktoken`` (hash mismatch) or is malformed.
    """
    from tiktoken.load import load_tiktoken_bpe

    return load_tiktoken_bpe(str(path), expected_hash=QWEN_TIKTOKEN_SHA256)


def _split_once(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The merge rule of ``token``: tiktoken's BPE run on its bytes with only ranks below ``rank``.

    The merge loop ends with exactly two parts for every multi-byte token of a
    consistent BPE vocabulary; those two parts are the token's merge rule.

    Raises:
        ValueError: the token does not reduce to two parts (not a consistent BPE vocabulary).
    """
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_i, best_rank = -1, rank
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best_i, best_rank = i, r
        if best_i < 0:
            break
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} (rank {rank}) does not reduce to one merge")
    return parts[0], parts[1]


class QwenTikTokenConverter(TikTokenConverter):
    """transformers' tiktoken converter, set up the way Qwen2.5's published ``tokenizer.json`` is.

    Differences from the generic converter, each needed for identical token ids:

    * **One merge per token** (:func:`_split_once`), as in Qwen's ``merges.txt`` (151,387 merges).
      The generic converter emits every split of a token whose halves are in the vocabulary.
    * **Merges not skipped** (``ignore_merges=False``, as Qwen's file): the generic converter
      looks a whole pre-token up in the vocabulary first.
    * **NFC normalisation** and the added tokens of :data:`~serve_app.model_facts.ADDED_TOKENS`
      with their ids and ``special`` flags (the generic converter marks every extra token special).

    The result was checked against the former hand-written ``tokenizer.json``: the same vocabulary,
    merges, ids, offsets and decoded text; only ByteLevel flags that ``tokenizers`` ignores in the
    decoder (and ``trim_offsets`` of the pre-tokenizer) are written differently.

    Args:
        vocab_file: path of ``qwen.tiktoken`` (default: :func:`tiktoken_file`).
        added_tokens: (id, content, special) of the tokens after the BPE ranks, in id order
            (default: Qwen2.5's :data:`~serve_app.model_facts.ADDED_TOKENS`; Qwen3's are in
            :data:`serve_app.model_facts_qwen3_vl.ADDED_TOKENS`).

    Raises:
        FileNotFoundError: no ``vocab_file`` given and ``dashscope`` is not installed.
    """

    def __init__(self, vocab_file: str | Path | None = None, added_tokens: Sequence[AddedTokenSpec] = ADDED_TOKENS):
        self.added_tokens = tuple(added_tokens)
        # transformers' TikTokenConverter and bytes_to_unicode (below) are unannotated
        super().__init__(vocab_file=str(vocab_file or tiktoken_file()), pattern=PRETOKENIZE_REGEX)  # type: ignore[no-untyped-call]

    @staticmethod
    def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:
        """tiktoken's reader, with the file's hash checked (see :func:`load_ranks`)."""
        return load_ranks(Path(tiktoken_url))

    def extract_vocab_merges_from_model(self, tiktoken_url: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
        """Vocabulary (byte-level strings → ids) and one merge per multi-byte token, in rank order."""
        ranks = self.load_tiktoken_bpe(tiktoken_url)
        byte_encoder: dict[int, str] = bytes_to_unicode()  # type: ignore[no-untyped-call]  # unannotated upstream

        def to_str(b: bytes) -> str:
            return "".join(byte_encoder[x] for x in b)

        vocab = {to_str(tok): rank for tok, rank in ranks.items()}
        merges = []
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            if len(tok) > 1:
                left, right = _split_once(tok, rank, ranks)
                merges.append((to_str(left), to_str(right)))
        return vocab, merges

    def converted(self) -> Tokenizer:
        """The Qwen tokenizer: the generic one plus NFC, ``ignore_merges=False`` and :attr:`added_tokens`.

        Raises:
            ValueError: an added token does not get its id (the ids must follow the ranks without gaps).
        """
        tokenizer = super().converted()
        tokenizer.model.ignore_merges = False
        tokenizer.normalizer = normalizers.NFC()
        added = [
            AddedToken(content, special=special, normalized=not special, single_word=False, lstrip=False, rstrip=False)
            for _, content, special in self.added_tokens
        ]
        tokenizer.add_tokens(added)
        for token_id, content, _ in self.added_tokens:
            if tokenizer.token_to_id(content) != token_id:
                raise ValueError(f"{content} got id {tokenizer.token_to_id(content)}, expected {token_id}")
        return tokenizer


def tokenizer_config(
    *,
    added_tokens: Sequence[AddedTokenSpec] = ADDED_TOKENS,
    chat_template: str = CHAT_TEMPLATE,
    model_max_length: int = MODEL_MAX_LENGTH,
    eos_token: str = "<|im_end|>",
    pad_token: str = "<|endoftext|>",
) -> dict[str, Any]:
    """``tokenizer_config.json`` (defaults: Qwen2.5-VL's, eos ``<|im_end|>``, pad ``<|endoftext|>``).

    Without this file eos wrongly becomes 151643 (model-facts.md).

    Args:
        added_tokens: (id, content, special) of the added tokens (``added_tokens_decoder``).
        chat_template: the jinja chat template.
        model_max_length: longest sequence, tokens.
        eos_token, pad_token: contents of two of ``added_tokens``.
    """
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": c,
                "lstrip": False,
                "normalized": not special,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for i, c, special in added_tokens
        },
        "additional_special_tokens": [c for _, c, s in added_tokens if s and c != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": eos_token,
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": pad_token,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_tokenizer_files(
    out_dir: Path,
    *,
    added_tokens: Sequence[AddedTokenSpec] = ADDED_TOKENS,
    chat_template: str = CHAT_TEMPLATE,
    model_max_length: int = MODEL_MAX_LENGTH,
    eos_token: str = "<|im_end|>",
    pad_token: str = "<|endoftext|>",
) -> None:
    """Writes ``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.json`` into ``out_dir``.

    The keyword arguments are those of :func:`tokenizer_config` (defaults: Qwen2.5-VL's); the same
    ``added_tokens`` go into ``tokenizer.json``.

    Raises:
        FileNotFoundError: ``qwen.tiktoken`` is not available (see :func:`tiktoken_file`).
        ValueError: an added token does not get its id.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    logger.info("converting qwen.tiktoken (one merge per token)")
    QwenTikTokenConverter(added_tokens=added_tokens).converted().save(str(out_dir / "tokenizer.json"))
    config = tokenizer_config(
        added_tokens=added_tokens,
        chat_template=chat_template,
        model_max_length=model_max_length,
        eos_token=eos_token,
        pad_token=pad_token,
    )
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "chat_template.json").write_text(json.dumps({"chat_template": chat_template}, indent=2))
