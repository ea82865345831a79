"""The plain block form of YAML, read line by line: the fast path of a plan.

Most plan files, and every large one a program writes, use a small part of
YAML: block mappings and sequences indented with spaces, plain or simply
quoted scalars on one line, flow sequences of plain scalars (``[a, b]``) and
comments. :func:`read_plain` reads exactly that part, several times faster
than composing PyYAML's nodes and with a fraction of their memory, and gives
the data PyYAML's safe loader would give. Anything outside it (anchors,
tags, block scalars, multi-line scalars, escapes, tabs, non-ASCII text, a
duplicate key, an error of any kind) makes it answer ``None``, and the
caller reads the text with PyYAML, which also finds every line for an
error. A plain scalar's type is resolved by the same YAML 1.1 rules
(:func:`milepost.plandoc.plain_scalar`), so both paths give one meaning;
tests compare them on generated documents.
"""

from __future__ import annotations

import re
from typing import Any

from milepost.plandoc import TYPED_FIRST, plain_scalar

__all__ = ["read_plain"]


class _Outside(Exception):
    """The text leaves the plain block form: read it with PyYAML instead."""


# One line of the form, matched by one expression over the whole text (in C):
# its indent, a sequence dash, a key, and one value. A plain scalar is kept
# conservative: it starts with a letter, a digit or a mark that is no YAML
# indicator, and holds no '#' and no ': ' (trailing spaces are cut after).
_FIRST = r"[A-Za-z0-9_./(~$=+^]"
_PLAIN = _FIRST + r"[ -\"$-9;-~]*+(?::(?! |$)[ -\"$-9;-~]*+)*+"
_FLOW_ITEM = _FIRST + r"[ -\"$-+\--9;-Z\\^-z|~]*+"  # no , [ ] { } : #
_VALUE = (
    rf"{_PLAIN}"
    r"|'(?:[^'\n\\]|'')*'"  # single-quoted, one line ('' is a quote)
    r'|"[^"\n\\]*"'  # double-quoted, one line, no escapes
    rf"|\[ *(?:{_FLOW_ITEM}(?:, *{_FLOW_ITEM})*)?\]"
)
_LINE = re.compile(
    rf"^( *)(- +)?(?:([A-Za-z_][A-Za-z0-9_.-]*):(?: +|$))?({_VALUE})? *(?:(?<![^ \n])#.*)?$", re.MULTILINE
)


_PIECE = 1 << 18  # characters of the text matched at a time (then on to the end of a line)


def read_plain(text: str) -> Any | None:
    """The data of ``text`` when it is in the plain block form, else None."""
    if not text.isascii() or "\t" in text or "\r" in text or not text.replace("\n", "").isprintable():
        return None
    if text.startswith(("---", "...")) or "\n---" in text or "\n..." in text:
        return None  # document markers
    lines: list[tuple[int, str, str, str]] = []
    start = 0
    while start <= len(text):  # a piece at a time: the matches of the whole text at once were 10 times its size
        end = text.find("\n", start + _PIECE)
        end = len(text) if end < 0 else end
        piece = text[start:end]
        found = _LINE.findall(piece)
        if len(found) != piece.count("\n") + 1:
            return None  # a line outside the form
        lines += [(len(ind), dash, key, value) for ind, dash, key, value in found if dash or key or value]
        start = end + 1
    if not lines or lines[0][0]:
        return None
    reader = _Reader(lines)
    try:
        data = reader.block(0)
    except Exception:  # _Outside, or anything else (a scalar PyYAML cannot make, nesting too deep): PyYAML says
        return None
    return data if reader.i == len(lines) else None


class _Reader:
    def __init__(self, lines: list[tuple[int, str, str, str]]) -> None:
        self.lines = lines
        self.i = 0
        self.keys: dict[str, Any] = {}

    def block(self, indent: int) -> Any:
        return self.sequence(indent) if self.lines[self.i][1] else self.mapping(indent)

    def mapping(self, indent: int) -> dict[Any, Any]:
        lines, keys, out = self.lines, self.keys, {}
        n, i = len(lines), self.i  # the index in a local (written back before a nested block and at the end)
        while i < n:
            at, dash, key, value = lines[i]
            if at != indent or dash:
                break
            if not key:
                raise _Outside
            name = keys.get(key)
            if name is None:
                name = keys[key] = plain_scalar(key)
            if name in out:
                raise _Outside  # PyYAML's path refuses it, with both lines
            i += 1
            if value:
                # _value(value) inlined for the common case, a plain string: a call per line was a fifth of this
                out[name] = value if value[0] in _STRING_FIRST and value[-1] != " " else _value(value)
            elif i < n and (lines[i][0] > indent or (lines[i][0] == indent and lines[i][1])):
                self.i = i
                out[name] = self.block(lines[i][0])
                i = self.i
            else:
                out[name] = None  # nothing: null
        self.i = i
        return out

    def sequence(self, indent: int) -> list[Any]:
        lines, out = self.lines, []
        n = len(lines)
        while self.i < n:
            at, dash, key, value = lines[self.i]
            if at != indent or not dash:
                break
            if key:  # a mapping begins on the dash's line
                column = at + len(dash)
                lines[self.i] = (column, "", key, value)
                out.append(self.mapping(column))
            elif value:
                self.i += 1
                out.append(_value(value))
                if self.i < n and lines[self.i][0] > indent:
                    raise _Outside  # a scalar going on over lines
            else:
                raise _Outside  # a dash alone: its item is below
        return out


# First characters of a plain scalar that is a string whatever follows (not
# a quote, not a flow sequence, no YAML 1.1 type starts with it).
_STRING_FIRST = frozenset(chr(c) for c in range(128) if re.fullmatch(_FIRST, chr(c))) - TYPED_FIRST - {"'", '"', "["}


def _value(value: str) -> Any:
    """A scalar or a flow sequence of them, as matched by the line's expression."""
    if value[-1] == " ":
        value = value.rstrip(" ")
    first = value[0]
    if first not in TYPED_FIRST:
        if first == "'":
            return value[1:-1].replace("''", "'")
        if first == '"':
            return value[1:-1]
        if first == "[":
            inner = value[1:-1].strip(" ")
            return [_plain(item.strip(" ")) for item in inner.split(",")] if inner else []
        return value
    return plain_scalar(value)


def _plain(value: str) -> Any:
    return value if value[0] not in TYPED_FIRST else plain_scalar(value)
