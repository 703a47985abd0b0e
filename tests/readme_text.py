"""The README cut into what the README tests read: sections, code blocks, shell commands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(text: str, title: str) -> str:
    """The body of the ``## title…`` section of ``text`` (up to the next ``## ``)."""
    m = re.search(rf"^## {re.escape(title)}.*?$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"README has no section {title!r}"
    return m.group(1)


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def commands(block: str) -> list[str]:
    """Shell commands of a block: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if line:
            out.append(line)
    return out


def programs(command: str) -> list[str]:
    """The program of each simple command in ``command`` (split on ``&&``, ``;``, ``|``)."""
    out = []
    for part in re.split(r"&&|\|\||;|\|", command):
        words = part.split()
        while words and ("=" in words[0] and not words[0].startswith("-")):  # VAR=value prefixes
            words = words[1:]
        if words:
            out.append(words[0])
    return out
