"""Counts in words, in agreement: ``1 milestone``, ``2 milestones``,
``1 milestone depends on it``, ``2 depend on it``.

The one place a count chooses its word's number: every message that shows a
count goes through :func:`count` (or :func:`plural` for the word alone), so
``1 milestones`` and ``2 milestone`` cannot be written by one forgotten
branch. Nouns whose plural is not ``+s`` give it (``count(n, "entry",
"entries")``); a verb is chosen the same way (``plural(n, "depends",
"depend")``)."""

from __future__ import annotations

__all__ = ["count", "plural"]


def plural(n: int, one: str, many: str | None = None) -> str:
    """``one`` when ``n`` is 1, else ``many`` (default: ``one + "s"``)."""
    return one if n == 1 else (many if many is not None else one + "s")


def count(n: int, one: str, many: str | None = None) -> str:
    """``n`` and its noun in agreement: ``1 file``, ``0 files``, ``3 entries``."""
    return f"{n} {plural(n, one, many)}"
