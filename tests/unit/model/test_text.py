"""Prompt building, reasoning/answer split, and the rebuilt Qwen tokenizer."""

import pytest

from serve_app.model.prompt import build_messages, render_prompt
from serve_app.model.reasoning import split_reasoning
from serve_app.model_facts import COSMOS_SYSTEM_PROMPT, DEFAULT_SYSTEM_PROMPT, VIDEO_PLACEHOLDER


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

    from serve_app.model.tokenizer import PRETOKENIZE_REGEX, load_ranks, tiktoken_file

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


def test_tokenizer_added_tokens_have_qwen_ids_and_flags(tiny_checkpoint):
    """Every added token of Qwen2.5 (model_facts.ADDED_TOKENS) has its id; special ones are skipped on decode."""
    from tokenizers import Tokenizer

    from serve_app.model_facts import ADDED_TOKENS

    hf = Tokenizer.from_file(str(tiny_checkpoint / "tokenizer.json"))
    for token_id, content, _ in ADDED_TOKENS:
        assert hf.token_to_id(content) == token_id
        assert hf.encode(f"a{content}b", add_special_tokens=False).ids[1] == token_id  # one token inside text
    assert [t.content for t in hf.get_added_tokens_decoder().values() if t.special] == [
        c for _, c, special in ADDED_TOKENS if special
    ]
    ids = hf.encode("<|im_start|>user<tool_call>x</tool_call><|im_end|>", add_special_tokens=False).ids
    assert ids[0] == 151644 and ids[-1] == 151645
    assert hf.decode(ids, skip_special_tokens=True) == "user<tool_call>x</tool_call>"  # 151657/8 are not special


def test_tokenizer_pre_tokenizer_is_qwens_regex_with_nfc(tiny_checkpoint):
    import json

    from tokenizers import Tokenizer

    from serve_app.model_facts import PRETOKENIZE_REGEX

    doc = json.loads((tiny_checkpoint / "tokenizer.json").read_text())
    assert doc["normalizer"] == {"type": "NFC"}
    assert doc["pre_tokenizer"]["pretokenizers"][0]["pattern"] == {"Regex": PRETOKENIZE_REGEX}
    assert doc["model"]["ignore_merges"] is False
    assert len(doc["model"]["merges"]) == 151_643 - 256  # one merge per multi-byte token, as Qwen's merges.txt
    hf = Tokenizer.from_file(str(tiny_checkpoint / "tokenizer.json"))
    assert hf.encode("e\u0301t\u00e9").ids == hf.encode("\u00e9t\u00e9").ids  # NFC: decomposed é == composed é
    assert len(hf.encode("2026").ids) == 4  # \p{N}: one digit per pre-token (cl100k's regex takes three)
    assert hf.encode(" world").offsets == [(0, 6)]  # byte-level, offsets not trimmed (trim_offsets false)


def test_checkpoint_carries_the_one_chat_template(tiny_checkpoint):
    import json

    from serve_app.model_facts import CHAT_TEMPLATE

    assert json.loads((tiny_checkpoint / "chat_template.json").read_text())["chat_template"] == CHAT_TEMPLATE
    assert json.loads((tiny_checkpoint / "tokenizer_config.json").read_text())["chat_template"] == CHAT_TEMPLATE


@pytest.mark.parametrize(
    ("text", "reasoning", "answer", "followed"),
    [
        # Cosmos-Reason2 asked to reason (its recipe's add-on): <think> block, the answer after it
        ("<think>\nA car turns left.\n</think>\n\nYes, it turns.", "A car turns left.", "Yes, it turns.", True),
        # the Qwen3 template may have opened <think> in the prompt: only the closing tag is generated
        ("The lane is clear.\n</think>\n\nNo hazard.", "The lane is clear.", "No hazard.", True),
        # not asked to reason: the whole text is the answer
        ("A forklift crosses the aisle.", None, "A forklift crosses the aisle.", True),
        # reasoning and then nothing: no answer, said so
        ("<think>hmm</think>  ", "hmm", None, False),
        ("", None, None, False),
    ],
)
def test_qwen3_vl_output_splits_at_the_end_of_its_think_block(text, reasoning, answer, followed):
    parsed = split_reasoning(text, "think_then_answer")
    assert (parsed.reasoning, parsed.answer, parsed.format_followed) == (reasoning, answer, followed)
    assert parsed.raw == text
    assert (parsed.note() is None) == followed


def test_qwen3_vl_answer_tags_are_not_required_but_cosmos_reason1_still_needs_them():
    text = "<think>x</think>\n\nThe answer."
    assert split_reasoning(text, "think_then_answer").answer == "The answer."
    r1 = split_reasoning(text)  # Cosmos-Reason1's format: <answer> missing
    assert r1.answer is None and not r1.format_followed and "<answer>" in (r1.note() or "")
