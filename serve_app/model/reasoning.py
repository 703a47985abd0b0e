"""Splitting a Cosmos reasoner's output into reasoning and final answer, per model family.

* ``think_answer`` (Cosmos-Reason1): the recipe's system prompt
  (:data:`serve_app.model_facts.COSMOS_SYSTEM_PROMPT`) asks for
  ``<think>\\n…\\n</think>\\n\\n<answer>\\n…\\n</answer>`` (tags in :mod:`serve_app.model_facts`).
* ``think_then_answer`` (Qwen3-VL: Cosmos-Reason2, the Cosmos 3 reasoners): reasoning, when asked
  for, is ``<think>…</think>`` and the answer is the text after ``</think>`` (vLLM's ``qwen3`` reasoning
  parser splits the same way); without ``</think>`` the whole text is the answer.

:func:`split_reasoning` never guesses: when the text does not follow the format it says so
(``format_followed=False``) and returns the whole text as ``raw`` only.
"""

from __future__ import annotations

import dataclasses
import re

from serve_app.model_facts import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN
from serve_app.protocol import ReasoningFormat

_THINK = re.compile(f"{re.escape(THINK_OPEN)}(.*?){re.escape(THINK_CLOSE)}", re.DOTALL)
_ANSWER = re.compile(f"{re.escape(ANSWER_OPEN)}(.*?){re.escape(ANSWER_CLOSE)}", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ReasonedAnswer:
    """A model output split into its parts.

    Attributes:
        reasoning: text inside ``<think>…</think>``, stripped; None if absent.
        answer: the answer part, stripped (``<answer>…</answer>``, or the text after ``</think>``);
            None if absent.
        format_followed: True only if the text has the family's format.
        raw: the full generated text.
        reasoning_format: the format the text was split by.
    """

    reasoning: str | None
    answer: str | None
    format_followed: bool
    raw: str
    reasoning_format: ReasoningFormat = "think_answer"

    def note(self) -> str | None:
        """A sentence explaining a format violation, or None when the format was followed."""
        if self.format_followed:
            return None
        if self.reasoning_format == "think_then_answer":
            return "the model wrote nothing after its </think> reasoning; the full output is in text"
        missing = [tag for tag, v in ((THINK_OPEN, self.reasoning), (ANSWER_OPEN, self.answer)) if v is None]
        if missing:
            return (
                f"the model did not follow the <think>/<answer> format (missing {', '.join(missing)}); "
                "the full output is in text"
            )
        return "the model did not follow the <think>/<answer> format (blocks out of order); the full output is in text"


def split_reasoning(text: str, reasoning_format: ReasoningFormat = "think_answer") -> ReasonedAnswer:
    """Splits generated text into reasoning and answer (see the module docstring for the formats)."""
    if reasoning_format == "think_then_answer":
        head, closed, tail = text.partition(THINK_CLOSE)
        if not closed:  # no reasoning block: the text is the answer
            answer = text.strip()
            return ReasonedAnswer(None, answer or None, bool(answer), text, reasoning_format)
        reasoning = head.split(THINK_OPEN, 1)[-1].strip()
        answer = tail.strip()
        return ReasonedAnswer(reasoning, answer or None, bool(answer), text, reasoning_format)
    think = _THINK.search(text)
    answer_m = _ANSWER.search(text)
    ordered = bool(think and answer_m and think.end() <= answer_m.start())
    return ReasonedAnswer(
        reasoning=think.group(1).strip() if think else None,
        answer=answer_m.group(1).strip() if answer_m else None,
        format_followed=ordered,
        raw=text,
    )
