"""serve_app.text.log_safe: a client's value written into a log line."""


import pytest

from serve_app.text import has_control_chars, log_safe


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("cam-1", "cam-1"),
        ("cam\n2026-01-01 INFO request forged -> 200", "cam\\n2026-01-01 INFO request forged -> 200"),
        ("a\r\x1b[2Jb\x00\x7f", "a\\r\\x1b[2Jb\\x00\\x7f"),
    ],
)
def test_log_safe_escapes_control_characters(value, shown):
    assert log_safe(value) == shown
    assert "\n" not in log_safe(value) and has_control_chars(value) == (value != "cam-1")


def test_log_safe_cuts_long_values():
    out = log_safe("x" * 10_000, limit=50)
    assert out.startswith("x" * 50) and len(out) < 80
