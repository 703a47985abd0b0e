"""Prompt building, reasoning/answer split, and the rebuilt Qwen tokenizer."""

import pytest

from serve_app.config import COSMOS_SYSTEM_PROMPT, DEFAULT_SYSTEM_PROMPT
from serve_app.prompt import VIDEO_PLACEHOLDER, build_messages, render_prompt
from serve_app.reasoning import split_reasoning

pytestmark = pytest.mark.unit


def test_prompt_has_one_video_placeholder_before_the_question():
    p = render_prompt("Is anyone in danger?", COSMOS_SYSTEM_PROMPT)
    assert p.count("<|video_pad|>") == 1
    assert p.index(VIDEO_PLACEHOLDER) < p.index("Is anyone in danger?")
    assert p.startswith("<|im_start|>system\nYou are a helpful assistant. Answer the question")
    assert p.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_prompt_equals_the_checkpoint_chat_template(tiny_checkpoint):
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(tiny_checkpoint)
    q = "Is anyone in this scene in danger? Answer with reasoning."
    rendered = proc.apply_chat_template(
        build_messages(q, DEFAULT_SYSTEM_PROMPT), add_generation_prompt=True, tokenize=False
    )
    assert rendered == render_prompt(q, DEFAULT_SYSTEM_PROMPT)


def test_split_follows_the_format():
    r = split_reasoning("<think>\nA car turns.\n</think>\n\n<answer>\nNo one is in danger.\n</answer>")
    assert (r.reasoning, r.answer, r.format_followed) == ("A car turns.", "No one is in danger.", True)
    assert r.note() is None


@pytest.mark.parametrize(
    "text,reasoning,answer",
    [
        ("just words", None, None),
        ("<think>only thinking</think>", "only thinking", None),
        ("<answer>yes</answer>", None, "yes"),
        ("<answer>yes</answer><think>late</think>", "late", "yes"),
        ("<think>unterminated", None, None),
    ],
)
def test_split_reports_format_violations_without_guessing(text, reasoning, answer):
    r = split_reasoning(text)
    assert (r.reasoning, r.answer) == (reasoning, answer)
    assert r.format_followed is False
    assert "did not follow" in r.note()
    assert r.raw == text


def test_tokenizer_reference_ids(tiny_checkpoint):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    assert tok("Hello, world!").input_ids == [9707, 11, 1879, 0]  # model-facts.md check
    assert tok.eos_token_id == 151645 and tok.pad_token_id == 151643
    assert tok.convert_tokens_to_ids("<|video_pad|>") == 151656


def test_tokenizer_matches_tiktoken_bpe(tiny_checkpoint):
    """The derived merges reproduce tiktoken's BPE on the same ranks and regex."""
    import tiktoken
    from tokenizers import Tokenizer

    from serve_app.qwen_tokenizer import PRETOKENIZE_REGEX, load_ranks, tiktoken_file

    enc = tiktoken.Encoding(
        "qwen", pat_str=PRETOKENIZE_REGEX, mergeable_ranks=load_ranks(tiktoken_file()), special_tokens={}
    )
    hf = Tokenizer.from_file(str(tiny_checkpoint / "tokenizer.json"))
    texts = [
        "A white sedan reverses into the parking bay while a pedestrian walks behind it.",
        "  leading spaces\tand\ttabs\n\nnew lines 1234567 numbers",
        "Unicode: café naïve 日本語のテキスト 🚗🚶 — “quotes”",
        "def f(x):\n    return x**2  # code\n",
    ]
    for t in texts:
        assert hf.encode(t, add_special_tokens=False).ids == enc.encode_ordinary(t)
