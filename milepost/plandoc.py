"""A plan file's text as Python data, with the line of every place in it.

YAML is read with PyYAML's libyaml parser when it is there (``CSafeLoader``,
several times faster), and built into Python data here: each node once (an
alias shares what its anchor built, so an alias bomb never expands), a key
given twice in one mapping refused with its line, a node inside itself
refused, and aliases may add at most :data:`MAX_ALIAS_NODES` nodes to what
the document holds. JSON is read by ``json`` with duplicate keys refused;
its lines, wanted only for an error, come from reading it again as YAML.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "MAX_ALIAS_NODES",
    "TYPED_FIRST",
    "DuplicateKey",
    "Loc",
    "Problem",
    "build",
    "compose",
    "duplicate_line",
    "json_lines",
    "line_map",
    "no_duplicates",
    "plain_scalar",
    "yaml_problem",
]

# Aliases may add at most this many nodes to a document (a shared gate list
# in each of 100,000 milestones fits; a "billion laughs" does not).
MAX_ALIAS_NODES = 1_000_000

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# The safe loader's implicit resolvers (YAML 1.1) by a plain scalar's first
# character, the wildcard ones appended: what PyYAML's resolve() looks up per scalar.
_WILD = tuple(_Base.yaml_implicit_resolvers.get(None, []))
_BY_FIRST = {k: (*v, *_WILD) for k, v in _Base.yaml_implicit_resolvers.items() if k is not None}
# First characters of a plain scalar that may make it other than a string.
TYPED_FIRST = frozenset(k for k in _BY_FIRST if k) if not _WILD else frozenset(map(chr, range(128)))
assert not _Base.yaml_path_resolvers, "the loader below resolves no paths"


class _Loader(_Base):  # type: ignore[valid-type,misc]
    """The safe loader with PyYAML's tag resolution (the same tags) done
    without the list it builds per scalar, and without the bookkeeping of
    path resolvers, which the safe loader has none of: libyaml asks for both
    once for each of a plan's million nodes."""

    def descend_resolver(self, current_node: Node | None, current_index: Any) -> None:
        pass  # no path resolvers (the safe loader has none), so no path to keep

    def ascend_resolver(self) -> None:
        pass

    def resolve(self, kind: type[Node], value: str | None, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode:
            if implicit[0]:
                for tag, regexp in _BY_FIRST.get(value[:1], _WILD):  # type: ignore[index]
                    if regexp.match(value):
                        return str(tag)
            return _STR
        return _SEQ if kind is SequenceNode else _MAP


def plain_scalar(value: str) -> Any:
    """A plain (unquoted) scalar's value, typed as the safe loader types it
    (YAML 1.1: ``yes`` is true, ``010`` is 8, ``~`` and nothing are null)."""
    for tag, regexp in _BY_FIRST.get(value[:1], _WILD):
        if regexp.match(value):
            if tag == _STR:
                break
            loader = _Loader("")
            return loader.yaml_constructors[tag](loader, ScalarNode(tag, value))
    return value


Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a plan file: where it starts and what it is."""

    line: int | None
    message: str  # without the file and line
    field: str | None = None  # the path in the document, as pydantic writes it: milestones.3.retries
    milestone: str | None = None

    def segment(self, source: str) -> str:
        return f"{source}:{self.line}: {self.message}" if self.line else f"{source}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "milestone": self.milestone, "field": self.field, "message": self.message}


def yaml_problem(e: yaml.YAMLError) -> Problem:
    """A YAML error at the line where the broken thing starts: an unclosed
    quote or bracket where it opened (the parser's context), anything else
    where the parser found it."""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    pmark, cmark = getattr(e, "problem_mark", None), getattr(e, "context_mark", None)
    pline = pmark.line + 1 if pmark is not None else None
    cline = cmark.line + 1 if cmark is not None else None
    if "maximum nesting depth" in problem:
        return Problem(cline or pline, "the document is nested too deeply (at most 1000 levels)")
    if problem.startswith("could not determine a constructor for the tag"):
        tag = problem.rsplit(" ", 1)[-1]
        if tag == "'tag:yaml.org,2002:value'":  # what YAML 1.1 makes of a bare '='
            return Problem(pline, "invalid YAML: a bare = is YAML 1.1's 'value' mark, not text: write it quoted ('=')")
        return Problem(
            pline,
            f"invalid YAML: the tag {tag} is not plain data (a plan holds text, numbers, true/false, lists and"
            " mappings): remove the tag, or quote the value",
        )
    opened = context is not None and (context.startswith("while scanning") or "flow" in context)
    if opened and cline is not None:
        found = f"{problem} on line {pline}" if pline and pline != cline else problem
        return Problem(cline, f"invalid YAML: {context} that starts here: {found}")
    where = f" ({context} on line {cline})" if context and cline and cline != pline else ""
    return Problem(pline, f"invalid YAML: {problem}{where}")


def compose(text: str) -> Node | None:
    loader = _Loader(text)
    try:
        node: Node | None = loader.get_single_node()
        return node
    finally:
        loader.dispose()


def build(root: Node) -> Any:
    """Python data from composed YAML nodes, each node built once (see the
    module's text for what is refused)."""
    return _Builder().build(root)[0]


class _Builder:
    """Builds one document's nodes (one Python frame per level of nesting,
    as deep as the parser goes)."""

    def __init__(self) -> None:
        self.loader = _Loader("")
        self.constructors = self.loader.yaml_constructors
        self.built: dict[int, tuple[Any, int]] = {}  # collections: id -> (value, nodes it expands to)
        self.open: set[int] = set()
        self.added = 0  # nodes that aliases add to the document

    def scalar(self, node: Node) -> Any:
        """A scalar's value, by its tag."""
        if node.tag == _STR:
            return node.value
        value = (self.constructors.get(node.tag) or self.constructors[None])(self.loader, node)
        if isinstance(value, types.GeneratorType):  # a collection's tag on a scalar
            return self.loader.construct_object(node, deep=True)
        return value

    def build(self, node: Node) -> tuple[Any, int]:
        """A node's value and the number of nodes it expands to."""
        key = id(node)
        if key in self.built:  # reached again: through an alias
            return self._again(key, node)
        if isinstance(node, ScalarNode):
            return self.scalar(node), 1
        self._enter(key, node)
        size = 1
        out: Any
        # (A string scalar, most of a plan's nodes, is its own value: built inline.)
        if isinstance(node, SequenceNode):
            out = []
            for child in node.value:
                if type(child) is ScalarNode and child.tag == _STR:
                    out.append(child.value)
                    size += 1
                    continue
                value, n = self.build(child)
                out.append(value)
                size += n
        else:
            assert isinstance(node, MappingNode)
            out = {}
            names, merging = self._keys(node)
            if merging:
                self.loader.flatten_mapping(node)
                for k, v in node.value:
                    name, n1 = self.build(k)
                    value, n2 = self.build(v)
                    out[name] = value  # a key written here wins over a merged one
                    size += n1 + n2
            else:
                for name, (_, v) in zip(names, node.value, strict=True):
                    if type(v) is ScalarNode and v.tag == _STR:
                        out[name] = v.value
                        size += 2
                        continue
                    value, n2 = self.build(v)
                    out[name] = value
                    size += 1 + n2
        self.open.discard(key)
        self.built[key] = (out, size)
        return out, size

    def _again(self, key: int, node: Node) -> tuple[Any, int]:
        """A collection reached again through an alias: what it built, counted against the limit."""
        value, size = self.built[key]
        self.added += size
        if self.added > MAX_ALIAS_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"aliases expand the document by more than {MAX_ALIAS_NODES:,} nodes (an alias bomb?)",
                node.start_mark,
            )
        return value, size

    def _enter(self, key: int, node: Node) -> None:
        """A collection about to be built: refused inside itself, or with a tag other than a map's or a list's."""
        if key in self.open:
            raise yaml.composer.ComposerError(
                None, None, "recursive alias: a node that contains itself", node.start_mark
            )
        if node.tag not in (_MAP, _SEQ):
            raise yaml.constructor.ConstructorError(
                None, None, f"a plan file has no use for the tag {node.tag!r}", node.start_mark
            )
        self.open.add(key)

    def _keys(self, node: MappingNode) -> tuple[list[Any], bool]:
        """The keys written in a mapping, before merges (`<<: *base`) are folded in,
        each once; and whether it merges any."""
        first: dict[Any, int] = {}
        names = []
        merging = False
        for k, _ in node.value:
            if k.tag == _MERGE:
                merging = True
                continue
            if not isinstance(k, ScalarNode):
                raise yaml.constructor.ConstructorError(
                    "while building a mapping", node.start_mark, "found an unhashable key", k.start_mark
                )
            name = self.scalar(k)
            line = first.get(name)
            if line is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {name!r} (first on line {line})", k.start_mark
                )
            first[name] = k.start_mark.line + 1
            names.append(name)
        return names, merging


def line_map(root: Node | None) -> dict[Loc, int]:
    """Every path in the document (keys and list indexes) to its 1-based line."""
    out: dict[Loc, int] = {}
    stack: list[tuple[Loc, Node]] = [((), root)] if root is not None else []
    seen: set[int] = set()
    while stack:
        path, node = stack.pop()
        out.setdefault(path, node.start_mark.line + 1)
        if id(node) in seen:
            continue
        if isinstance(node, MappingNode):
            seen.add(id(node))
            for k, v in node.value:
                if isinstance(k, ScalarNode):
                    out[(*path, k.value)] = k.start_mark.line + 1
                    stack.append(((*path, k.value), v))
        elif isinstance(node, SequenceNode):
            seen.add(id(node))
            stack.extend(((*path, i), v) for i, v in enumerate(node.value))
    return out


class DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen.add(key)
    return dict(pairs)


def json_lines(text: str) -> dict[Loc, int]:
    """Lines of a JSON document's paths (JSON is YAML): only for errors."""
    try:
        return line_map(compose(text))
    except (yaml.YAMLError, RecursionError):
        return {}


def duplicate_line(text: str) -> int | None:
    """The line of a JSON document's second key (read again as YAML)."""
    try:
        build(compose(text) or ScalarNode(_STR, ""))
    except yaml.MarkedYAMLError as ye:
        return ye.problem_mark.line + 1 if ye.problem_mark is not None else None
    except (yaml.YAMLError, RecursionError):
        pass
    return None
