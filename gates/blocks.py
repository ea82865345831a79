"""Blocks of Python source, fingerprinted from the syntax tree: what a unit
of proof executed (see :mod:`.unit_blocks`).

A module's **blocks** are its module-level code and the body of each
function, method and class, named by where they sit (``<module>``, ``f``,
``Store``, ``Store.get``, ``f.inner``; a name defined twice gets ``#2``).
A block's fingerprint is a digest of its statements' syntax trees, the
bodies of the functions and classes it defines left out (each is a block of
its own; their headers, decorators, arguments and defaults, stay in the
block that runs them). Comments, blank lines and formatting are not in the
tree, so they change no fingerprint; a docstring is a statement of its
block, so it does (doctests read it).

A block's **lines** are those of its own statements (a one-line ``def``'s
line is both its own and its enclosing block's), so the lines a run
executed (coverage.py's) name the blocks it executed.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from milepost.gates.imports import parse_lock

__all__ = ["FORMAT", "MODULE", "Block", "blocks_from_json", "blocks_of", "blocks_to_json", "executed"]

MODULE = "<module>"
# The blocks of a file are kept on disk by content (gates/unit_blocks.py): a change to how blocks are named,
# fingerprinted or lined must change FORMAT, so no drive reads blocks found the old way.
FORMAT = "milepost-blocks-1"
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class Block:
    name: str
    fingerprint: str
    lines: frozenset[int]


def _tree(node: object) -> object:
    """A plain value of ``node``'s syntax tree without positions, the bodies of nested definitions elided."""
    if isinstance(node, ast.AST):
        fields: dict[str, object] = {}
        for key, value in ast.iter_fields(node):
            if key == "type_comment":
                continue
            fields[key] = "<block>" if key == "body" and isinstance(node, _DEFS) else _tree(value)
        return [type(node).__name__, fields]
    if isinstance(node, list):
        return [_tree(v) for v in node]
    return repr(node)


def _fingerprint(body: Sequence[ast.stmt]) -> str:
    text = json.dumps([_tree(s) for s in body], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _span(node: ast.stmt) -> range:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return range(first, (node.end_lineno or node.lineno) + 1)


def _nested(body: Sequence[ast.stmt]) -> list[_Def]:
    """The definitions directly in ``body`` (inside ``if``, ``try``, ``with``... too, not inside other definitions)."""
    out: list[_Def] = []
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, _DEFS):
            out.append(node)
        elif isinstance(node, ast.stmt):
            todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt))
    return out


def _own_lines(body: Sequence[ast.stmt], nested: Sequence[_Def]) -> frozenset[int]:
    lines = {n for s in body for n in _span(s)}
    for d in nested:
        header = d.lineno
        inner = range(d.body[0].lineno, (d.body[-1].end_lineno or d.body[-1].lineno) + 1)
        lines.difference_update(n for n in inner if n != header)
    return frozenset(lines)


def blocks_of(source: bytes) -> list[Block] | None:
    """The blocks of a module's source; None when it does not parse."""
    try:
        with parse_lock():
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    out: list[Block] = []
    seen: dict[str, int] = {}

    def add(name: str, body: Sequence[ast.stmt]) -> None:
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}#{seen[name]}"
        nested = _nested(body)
        out.append(Block(name, _fingerprint(body), _own_lines(body, nested)))
        prefix = "" if name == MODULE else f"{name}."
        for d in nested:
            add(f"{prefix}{d.name}", d.body)

    add(MODULE, tree.body)
    return out


def executed(blocks: Iterable[Block], lines: Iterable[int]) -> dict[str, str]:
    """name -> fingerprint of the blocks one of ``lines`` belongs to."""
    ran = set(lines)
    return {b.name: b.fingerprint for b in blocks if not b.lines.isdisjoint(ran)}


def blocks_to_json(blocks: Sequence[Block]) -> str:
    """``blocks`` as kept on disk (their lines as ranges)."""
    out = []
    for b in blocks:
        ranges: list[list[int]] = []
        for n in sorted(b.lines):
            if ranges and ranges[-1][1] == n - 1:
                ranges[-1][1] = n
            else:
                ranges.append([n, n])
        out.append([b.name, b.fingerprint, ranges])
    return json.dumps({"format": FORMAT, "blocks": out}, separators=(",", ":"))


def blocks_from_json(text: str) -> list[Block] | None:
    """What :func:`blocks_to_json` wrote; None when it is not that (damaged, another format)."""
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            return None
        return [
            Block(str(name), str(fp), frozenset(n for a, b in ranges for n in range(int(a), int(b) + 1)))
            for name, fp, ranges in data["blocks"]
        ]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
