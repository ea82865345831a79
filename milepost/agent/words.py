"""A refusal in the tools' own words: the service speaks the CLI's."""

from __future__ import annotations

import re
from typing import Any

from milepost.errors import MilepostError

__all__ = ["error_payload", "tool_words"]

# The service speaks the CLI's words in its refusals; through the tools they
# name the tools' own arguments instead (most specific first).
_TOOL_WORDS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"`milepost reset (\S+) --reason TEXT`"), r"milestone action=reset name=\1 with a reason"),
    (re.compile(r"`milepost item create OBJECTIVE`"), "work_item action=create (objective or plan)"),
    (re.compile(r"`milepost item pick ID`"), "work_item action=pick id=ID"),
    (re.compile(r"`milepost item list`"), "work_item action=list"),
    (re.compile(r"`milepost add NAME`"), "milestone action=add name=NAME"),
    (re.compile(r"start it first: milepost start (\S+)\)"), r"start it first: milestone action=start name=\1)"),
    (re.compile(r"`milepost verify`"), "milestone action=verify"),
    (
        re.compile(r"\(milepost item update (\d+) --plan-status draft\)"),
        r"(work_item action=update id=\1 plan_status=draft)",
    ),
    (
        re.compile(r"act as that agent \(--agent (\S+)\) or as an operator \(--operator\)"),
        r"serve the tools as that agent (milepost --agent \1 mcp, or MILEPOST_AGENT=\1)"
        r" or as an operator (milepost --operator mcp)",
    ),
    (re.compile(r"pass --item (?:ID|N)"), "pass item=ID"),
    (re.compile(r"pass --item (\d+)"), r"pass item=\1"),
    (re.compile(r"(?:pass )?--reason TEXT"), "pass reason"),
    (re.compile(r"reject --reason"), "reject with a reason"),
    (re.compile(r"reset with --reason"), "reset with a reason"),
    (re.compile(r"--until TIME"), "until=TIME"),
    (re.compile(r"needs --resource"), "needs resource"),
    (re.compile(r"--expect-revision"), "expect_revision"),
]


def tool_words(text: str) -> str:
    """A refusal's CLI words (`--item ID`, `milepost item create ...`) in the tools' own arguments."""
    for pattern, words in _TOOL_WORDS:
        text = pattern.sub(words, text)
    return text


def error_payload(e: MilepostError) -> dict[str, Any]:
    return {"type": e.kind, "message": tool_words(e.message), "exit_code": e.exit_code}
