"""Splitting Cosmos-Reason1 output into reasoning and final answer.

The recipe's system prompt (:data:`serve_app.model_facts.COSMOS_SYSTEM_PROMPT`) asks for
``<think>\\n…\\n</think>\\n\\n<answer>\\n…\\n</answer>`` (tags in :mod:`serve_app.model_facts`).
:func:`split_reasoning` never guesses: when the text does not follow that
format it says so (``format_followed=False``) and returns the whole text as
``raw`` only.
"""

from __future__ import annotations

import dataclasses
import re

from serve_app.model_facts import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN

_THINK = re.compile(f"{re.escape(THINK_OPEN)}(.*?){re.escape(THINK_CLOSE)}", re.DOTALL)
_ANSWER = re.compile(f"{re.escape(ANSWER_OPEN)}(.*?){re.escape(ANSWER_CLOSE)}", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ReasonedAnswer:
    """A model output split into its parts.

    Attributes:
        reasoning: text inside ``<think>…</think>``, stripped; None if absent.
        answer: text inside ``<answer>…</answer>``, stripped; None if absent.
        format_followed: True only if both blocks are present and in order.
        raw: the full generated text.
    """

    reasoning: str | None
    answer: str | None
    format_followed: bool
    raw: str

    def note(self) -> str | None:
        """A sentence explaining a format violation, or None when the format was followed."""
        if self.format_followed:
            return None
        missing = [tag for tag, v in ((THINK_OPEN, self.reasoning), (ANSWER_OPEN, self.answer)) if v is None]
        if missing:
            return (
                f"the model did not follow the <think>/<answer> format (missing {', '.join(missing)}); "
                "the full output is in text"
            )
        return "the model did not follow the <think>/<answer> format (blocks out of order); the full output is in text"


def split_reasoning(text: str) -> ReasonedAnswer:
    """Splits generated text into reasoning and answer (first of each block)."""
    think = _THINK.search(text)
    answer = _ANSWER.search(text)
    ordered = bool(think and answer and think.end() <= answer.start())
    return ReasonedAnswer(
        reasoning=think.group(1).strip() if think else None,
        answer=answer.group(1).strip() if answer else None,
        format_followed=ordered,
        raw=text,
    )
