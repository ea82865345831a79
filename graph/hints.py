"""What follows the refusal of a name nobody has: the closest known name,
when one is close (``did you mean 'analyze-a'?``), then the known names, the
first few and how many there are in all (an item may hold 100,000)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = ["known_names"]

SHOWN = 8  # names listed
CLOSE = 0.6  # how alike a name must be to be suggested (difflib's ratio, its default)
LOOKED_AT = 20_000  # names compared for a suggestion (an error's message must not take seconds)


def known_names(wanted: str, names: Sequence[str], shown: int = SHOWN, *, suggest: bool = True) -> str:
    """``did you mean 'b'? known: a, b, ... (40 in all)``; ``known: none yet`` when there are none."""
    if not names:
        return "known: none yet"
    close = difflib.get_close_matches(wanted, names[:LOOKED_AT], n=1, cutoff=CLOSE) if suggest else []
    suggestion = f"did you mean {close[0]!r}? " if close and close[0] != wanted else ""
    listed = ", ".join(names[:shown]) + (f", ... ({len(names)} in all)" if len(names) > shown else "")
    return f"{suggestion}known: {listed}"
