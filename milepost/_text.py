"""Text as a terminal shows it: control characters escaped.

An objective, a reason or a gate's failure line is whatever someone wrote;
printed raw, an escape sequence in it would move the cursor, recolour or
clear the screen, or rewrite what the line seems to say. Human output shows
such characters as ``\\x1b``-style escapes; JSON output keeps the text as it is
(JSON escapes it itself)."""

from __future__ import annotations

import re

__all__ = ["holder", "last_lines", "printable"]

# C0 controls except tab and newline, DEL, C1 controls, and the bidirectional
# overrides and isolates that reorder what a line appears to say.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    return _CONTROL.sub(_escape, text)


def holder(owner: str) -> str:
    """A lease holder as a person reads it, ``pid 2809 on vm``: the stored
    owner (``vm:2809:139930013879168``, host, pid and thread; a drive's
    ``drive:vm:2809:1f0c9a2e``) stays as it is in the store and in JSON.
    An owner of another form is shown as it is."""
    host, _, rest = owner.removeprefix("drive:").partition(":")
    pid = rest.partition(":")[0]
    return f"pid {pid} on {host}" if host and pid.isdigit() else owner


def last_lines(text: str, n: int = 10) -> list[str]:
    """The last ``n`` lines of a gate's output, not opening on a line that
    only marks the one above it (a traceback's ``^^^^`` or ``~~~~``)."""
    lines = text.rstrip().splitlines()[-n:]
    while len(lines) > 1 and lines[0].strip() and not lines[0].strip().strip("^~"):
        lines = lines[1:]
    return lines
