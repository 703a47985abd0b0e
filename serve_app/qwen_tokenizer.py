"""The real Qwen2/Qwen2.5 tokenizer, rebuilt offline from ``qwen.tiktoken``.

No machine of this project reaches the model hub, so the checkpoint command
builds ``tokenizer.json`` itself. The BPE ranks come from the PyPI package
``dashscope==2.0.2`` (``dashscope/resources/qwen.tiktoken``: 151,643 ranks,
the same vocabulary as Qwen2.5's ``vocab.json``/``merges.txt``). Facts used
here (regex, special tokens, ids) are from ``shared/model-facts.md``, which
restates the Qwen2.5-VL tokenizer files on the hub.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

#: Qwen1/Qwen2 pre-tokenizer regex (model-facts.md).
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: (id, content, special) for every added token of Qwen2.5 (model-facts.md).
ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
)

#: The standard Qwen2-VL chat template (as in Qwen2.5-VL-7B-Instruct's
#: ``chat_template.json``): ``<|im_start|>role\n...<|im_end|>\n``, video as
#: ``<|vision_start|><|video_pad|><|vision_end|>``, default system prompt
#: "You are a helpful assistant.".
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


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
    """Reads a tiktoken rank file: one ``base64(token_bytes) rank`` per line."""
    ranks: dict[bytes, int] = {}
    for line in path.read_text().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable-character map used by byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _split_once(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """Runs tiktoken's BPE on ``token`` using only ranks below ``rank``.

    The merge loop ends with exactly two parts for every multi-byte token of a
    consistent BPE vocabulary; those two parts are the token's merge rule.
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


def build_tokenizer_json(ranks: dict[bytes, int]) -> dict:
    """Builds the HF ``tokenizers`` JSON (byte-level BPE) for the Qwen2 vocabulary.

    Args:
        ranks: token bytes → rank, 151,643 entries for Qwen2.

    Returns:
        The ``tokenizer.json`` document as a dict.
    """
    b2u = _bytes_to_unicode()

    def enc(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    vocab = {enc(tok): r for tok, r in ranks.items()}
    merges = []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) > 1:
            left, right = _split_once(tok, r, ranks)
            merges.append([enc(left), enc(right)])
    added = [
        {
            "id": i,
            "content": c,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": not special,
            "special": special,
        }
        for i, c, special in ADDED_TOKENS
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": PRETOKENIZE_REGEX},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": False,
                    "use_regex": False,
                },
            ],
        },
        "post_processor": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def tokenizer_config() -> dict:
    """``tokenizer_config.json`` for Qwen2.5-VL (eos ``<|im_end|>``, pad ``<|endoftext|>``).

    Without this file eos wrongly becomes 151643 (model-facts.md).
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
            for i, c, special in ADDED_TOKENS
        },
        "additional_special_tokens": [c for _, c, s in ADDED_TOKENS if s and c != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_tokenizer_files(out_dir: Path) -> None:
    """Writes ``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.json``.

    Raises:
        FileNotFoundError: ``qwen.tiktoken`` is not available (see :func:`tiktoken_file`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    ranks = load_ranks(tiktoken_file())
    logger.info("deriving %d BPE merges from qwen.tiktoken", len(ranks) - 256)
    (out_dir / "tokenizer.json").write_text(json.dumps(build_tokenizer_json(ranks), ensure_ascii=False))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2))
    (out_dir / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2))
