"""Text that is safe to log and to store: control characters found and escaped (pure).

The one escaping helper for every client-chosen value in a log line (:func:`log_safe`), and the
control-character check of request fields and stored stream text (:func:`has_control_chars`).
"""

from __future__ import annotations

#: Characters that can end, split or rewrite a log line: C0 controls (tab, newline, ESC, NUL …), DEL, C1
#: controls (NEL U+0085 among them) and Unicode's line and paragraph separators.
CONTROL_CHARS = frozenset([*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029])
_CONTROL = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in CONTROL_CHARS}
_CONTROL.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"})
#: What :func:`has_control_chars` lets through when ``allow`` is ``"text"``: the layout of free text.
TEXT_LAYOUT = "\t\n\r"


def log_safe(value: object, limit: int = 200) -> str:
    """``value`` for one log line: control characters escaped (``\\n``, ``\\x1b``, ``\\u2028``), cut to
    ``limit`` characters.

    A logged field (camera id, request id, stream name, file name, URL, a message quoting one) can
    then neither end the line and forge another one nor move the terminal's cursor. The one helper
    for every client-chosen value in a log line.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[:limit] + f"…(+{len(text) - limit} chars)"
    return text.translate(_CONTROL)


def has_control_chars(text: str, allow: str = "") -> bool:
    """True if ``text`` holds a character of :data:`CONTROL_CHARS` other than those in ``allow``
    (e.g. :data:`TEXT_LAYOUT` for questions, which may have lines)."""
    return any(ord(c) in CONTROL_CHARS and c not in allow for c in text)
