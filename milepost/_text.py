"""Text as a terminal shows it: control characters escaped.

An objective, a reason or a gate's failure line is whatever someone wrote;
printed raw, an escape sequence in it would move the cursor, recolour or
clear the screen, or rewrite what the line seems to say. Human output shows
such characters as ``\\x1b``-style escapes; JSON output keeps the text as it is
(JSON escapes it itself)."""

from __future__ import annotations

import re

__all__ = ["printable"]

# C0 controls except tab and newline, DEL, C1 controls, and the bidirectional
# overrides and isolates that reorder what a line appears to say.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    return _CONTROL.sub(_escape, text)
