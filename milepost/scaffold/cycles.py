"""Import cycles: which are real, how each is named, shown, and cut.

An import closes a cycle *at import time* only when it runs as its module is
imported: at module level (class bodies, ``try`` blocks and ordinary ``if``
blocks too). An import under ``if TYPE_CHECKING:`` never runs, and one inside
a function runs when the function is called, after both modules are loaded.
So the import graph's cycles come in two kinds:

- an **import-time cycle** is a strongly connected component (two or more
  units) of the graph of the imports that run at import time (an import whose
  statements could not be read counts as one). It is real: its modules cannot
  be imported, nor refactored, one without the other;
- a **deferred cycle** is a strongly connected component of the whole import
  graph that is not one import-time cycle: it closes only through
  ``TYPE_CHECKING`` or function-level imports (besides any import-time cycles
  inside it). It is reported as "no import-time cycle" and gets no milestone.

Dependencies of the plan: every import between units gives one, except a
deferred import inside a component of the whole graph (one that would close a
cycle that does not exist at import time). Such a plan is a DAG apart from the
import-time cycles: a cycle of it would lie inside one component and use only
import-time imports.

Everything is decided by fixed rules, so the same code always gives the same
plan:

- a cycle's **head** is its most-imported member (the most importers in the
  whole package; ties by name): its milestone is named after it;
- its **path** is the shortest cycle through the head, neighbours visited in
  name order (for a deferred cycle, the shortest through a deferred import);
- an import-time cycle's **cut** is a small set of its import-time imports
  whose removal leaves no import-time cycle: units are placed one at a time,
  leaves first, taking each time the one with the fewest module-level import
  statements of units not yet placed, then by name; the imports it still has
  of unplaced units are cut. Then each cut import whose return would close no
  cycle is put back (the heaviest first), so every import left in the cut is
  needed. Only module-level statements are listed: deferred ones may stay.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from milepost.scaffold.render import count, shown
from milepost.scaffold.source import MODULE_LEVEL, Imports, Source, locate, read_imports, statement_kinds

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "Cycle",
    "Cycles",
    "DeferredCycle",
    "ImportLine",
    "PackageCycles",
    "find_cycles",
    "package_cycles",
    "unit_graph",
    "unit_of",
]

DEFERRED = "under TYPE_CHECKING or in a function"


@dataclass(frozen=True)
class ImportLine:
    """An import statement between two units, where it is and how it runs."""

    importer: str
    imported: str
    file: str  # as shown in the plan (relative to the workspace when inside it)
    line: int
    text: str
    kind: str  # MODULE_LEVEL, TYPE_CHECKING or IN_FUNCTION

    @property
    def deferred(self) -> bool:
        return self.kind != MODULE_LEVEL

    def shown(self) -> str:
        where = "" if not self.deferred else f" ({self.kind})"
        return f"{self.file}:{self.line} {self.text}{where}"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "import": self.text, "kind": self.kind}


@dataclass
class Cycle:
    """An import-time cycle: its modules import each other as they load."""

    members: list[str]  # units, sorted
    head: str
    path: list[str]  # head -> ... -> head, through import-time imports
    cut: list[tuple[str, str]]  # (importer unit, imported unit), sorted
    imports: list[ImportLine]  # the module-level statements of the cut, sorted by file and line
    import_time: bool = True

    @property
    def path_text(self) -> str:
        return " -> ".join(self.path)

    def summary(self) -> str:
        """``closed by 1 module-level import``."""
        return f"closed by {count(len(self.imports), 'module-level import')}"

    def as_dict(self) -> dict[str, Any]:
        """``cut``: the module-level imports to cut."""
        return {
            "modules": self.members,
            "head": self.head,
            "path": self.path_text,
            "import_time": True,
            "summary": self.summary(),
            "cut": [i.as_dict() for i in self.imports],
            "deferred": [],
        }


@dataclass
class DeferredCycle:
    """Units that import each other only through deferred imports (besides
    the import-time cycles inside them): no import-time cycle."""

    members: list[str]  # units, sorted
    head: str
    path: list[str]  # head -> ... -> head, through at least one deferred import
    imports: list[ImportLine]  # the deferred imports between its members, sorted by file and line
    inner: list[Cycle] = field(default_factory=list)  # the import-time cycles inside it
    import_time: bool = False

    @property
    def path_text(self) -> str:
        return " -> ".join(self.path)

    def summary(self) -> str:
        """``no import-time cycle among 11 modules around click.utils (a -> b -> a): it closes only
        through 31 imports under TYPE_CHECKING or in a function``."""
        beyond = "".join(f" beyond the import-time cycle at {c.head}" for c in self.inner)
        return (
            f"no import-time cycle{beyond} among {count(len(self.members), 'module')} around {self.head}"
            f" ({self.path_text}): it closes only through {count(len(self.imports), 'import')} {DEFERRED}"
        )

    def as_dict(self) -> dict[str, Any]:
        """``deferred``: the imports that close it, none of which runs at import time."""
        return {
            "modules": self.members,
            "head": self.head,
            "path": self.path_text,
            "import_time": False,
            "summary": self.summary(),
            "cut": [],
            "deferred": [i.as_dict() for i in self.imports],
        }


@dataclass
class Cycles:
    """The cycles of an import graph, and the imports that give no dependency."""

    real: list[Cycle]  # import-time cycles, by members
    deferred: list[DeferredCycle]  # by members
    no_dep: set[tuple[str, str]]  # deferred imports inside a component: they close no import-time cycle

    def deps(self, graph: nx.DiGraph[str]) -> list[tuple[str, str]]:
        """The imports that order the plan (importer, imported), sorted."""
        return sorted(e for e in graph.edges if e not in self.no_dep)

    def through(self, units: Iterable[str]) -> list[Cycle]:
        """The import-time cycles that hold any of ``units``."""
        wanted = set(units)
        return [c for c in self.real if wanted & set(c.members)]


def unit_of(files: Mapping[str, Path], level: str) -> Callable[[str], str]:
    """The unit a module belongs to: itself, or with ``level="package"`` its
    package (a package's ``__init__`` is its own unit)."""

    def unit(m: str) -> str:
        if level == "module" or files[m].name == "__init__.py":
            return m
        return m.rsplit(".", 1)[0]

    return unit


def unit_graph(
    imports: Imports, code: Iterable[str], unit: Callable[[str], str], package_imports: bool, base: Path
) -> tuple[nx.DiGraph[str], Callable[[str, str], list[ImportLine]]]:
    """The import graph between the units of the modules ``code`` (every
    import, deferred ones too; a module's import of an enclosing package only
    with ``package_imports``), and a function giving an edge's statements
    (files shown relative to ``base``)."""
    import networkx as nx

    keep = set(code)
    pairs: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for m in sorted(keep):
        for i in imports.imported_by[m]:
            if i not in keep or unit(i) == unit(m) or (not package_imports and m.startswith(i + ".")):
                continue
            pairs.setdefault((unit(m), unit(i)), []).append((m, i))
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_nodes_from(sorted({unit(m) for m in keep}))
    g.add_edges_from(sorted(pairs))
    kinds: dict[str, dict[int, str]] = {}

    def lines(u: str, v: str) -> list[ImportLine]:
        out = []
        for m, i in pairs[u, v]:
            if m not in kinds:
                kinds[m] = statement_kinds(imports.files[m])
            k = kinds[m]
            for st in imports.statements(m, i):
                file = shown(imports.files[m], base)
                out.append(ImportLine(u, v, file, st.line, st.text, k.get(st.line, MODULE_LEVEL)))
        return out

    return g, lines


@dataclass
class PackageCycles:
    """``milepost plan cycles``: a package's cycles, as the scaffold sees them."""

    source: Source
    units: list[str]
    found: Cycles


def package_cycles(
    package: str, paths: Sequence[Path], base: Path, level: str = "module", package_imports: bool = False
) -> PackageCycles:
    """The cycles of ``package`` (found as ``plan scaffold`` finds it) between
    its modules, or its packages with ``level="package"``."""
    source = locate(package, paths, base)
    imports = read_imports(source)
    g, lines = unit_graph(imports, imports.modules, unit_of(imports.files, level), package_imports, base)
    return PackageCycles(source=source, units=sorted(g), found=find_cycles(g, lines))


def find_cycles(graph: nx.DiGraph[str], lines: Callable[[str, str], list[ImportLine]]) -> Cycles:
    """The import-time and deferred cycles of ``graph`` (importer -> imported);
    ``lines`` gives an edge's statements (asked only for edges inside a
    strongly connected component)."""
    import networkx as nx

    importers = {u: graph.in_degree(u) for u in graph}
    real: list[Cycle] = []
    deferred: list[DeferredCycle] = []
    no_dep: set[tuple[str, str]] = set()
    for members in sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1):
        inside = set(members)
        edges = {(u, v): lines(u, v) for u in members for v in sorted(graph.successors(u)) if v in inside}
        timed = {e for e, ls in edges.items() if not ls or any(not ln.deferred for ln in ls)}
        late = set(edges) - timed
        no_dep |= late
        sub: nx.DiGraph[str] = nx.DiGraph()
        sub.add_nodes_from(members)
        sub.add_edges_from(sorted(timed))
        inner = [
            _real(sub, c, importers, edges)
            for c in sorted(sorted(c) for c in nx.strongly_connected_components(sub) if len(c) > 1)
        ]
        real += inner
        if len(inner) == 1 and inner[0].members == members:
            continue
        head = _head(members, importers)
        shown_lines = sorted((ln for e in late for ln in edges[e]), key=_where)
        path = _shortest_cycle(graph, head, inside, late)
        deferred.append(DeferredCycle(members=members, head=head, path=path, imports=shown_lines, inner=inner))
    real.sort(key=lambda c: c.members)
    return Cycles(real=real, deferred=deferred, no_dep=no_dep)


def _head(members: list[str], importers: Mapping[str, int]) -> str:
    return min(members, key=lambda n: (-importers.get(n, 0), n))


def _where(ln: ImportLine) -> tuple[str, int, str]:
    return (ln.file, ln.line, ln.imported)


def _real(
    sub: nx.DiGraph[str],
    members: list[str],
    importers: Mapping[str, int],
    edges: Mapping[tuple[str, str], list[ImportLine]],
) -> Cycle:
    """The head, path and cut of one import-time cycle (a component of ``sub``)."""
    inside = set(members)
    weight = {
        (u, v): max(1, sum(1 for ln in edges[u, v] if not ln.deferred))
        for u in members
        for v in sub.successors(u)
        if v in inside
    }
    head = _head(members, importers)
    path = _shortest_cycle(sub, head, inside, None)
    cut = _cut(members, weight)
    shown_lines = sorted((ln for e in cut for ln in edges[e] if not ln.deferred), key=_where)
    return Cycle(members=members, head=head, path=path, cut=sorted(cut), imports=shown_lines)


def _shortest_cycle(graph: Any, head: str, inside: set[str], through: set[tuple[str, str]] | None) -> list[str]:
    """The shortest cycle through ``head`` inside ``inside``; with ``through``,
    the shortest that takes at least one of those edges."""
    start = (head, through is None)
    parent: dict[tuple[str, bool], tuple[str, bool]] = {}
    queue = deque([start])
    seen = {start}
    while queue:
        state = queue.popleft()
        node, used = state
        for nxt in sorted(graph.successors(node)):
            if nxt not in inside:
                continue
            after = (nxt, used or (through is not None and (node, nxt) in through))
            if nxt == head and after[1]:
                path = [node]
                at = state
                while at != start:
                    at = parent[at]
                    path.append(at[0])
                return [*reversed(path), head]
            if after not in seen:
                seen.add(after)
                parent[after] = state
                queue.append(after)
    return [head, head]  # pragma: no cover - a component of two or more always has a cycle through each member


def _cut(members: list[str], weight: Mapping[tuple[str, str], int]) -> list[tuple[str, str]]:
    succ: dict[str, list[str]] = {m: [] for m in members}
    pred: dict[str, list[str]] = {m: [] for m in members}
    for u, v in sorted(weight):
        succ[u].append(v)
        pred[v].append(u)
    left = {m: sum(weight[m, v] for v in succ[m]) for m in members}
    unplaced = set(members)
    cut: list[tuple[str, str]] = []
    while unplaced:
        x = min(unplaced, key=lambda n: (left[n], n))
        cut += [(x, v) for v in succ[x] if v in unplaced]
        unplaced.discard(x)
        for p in pred[x]:
            if p in unplaced:
                left[p] -= weight[p, x]
    # Put back what is not needed: the heaviest first, so the cut keeps the light ones.
    kept = set(weight) - set(cut)
    needed: list[tuple[str, str]] = []
    for e in sorted(cut, key=lambda e: (-weight[e], e)):
        if _reaches(e[1], e[0], kept):
            needed.append(e)
        else:
            kept.add(e)
    return needed


def _reaches(start: str, goal: str, edges: set[tuple[str, str]]) -> bool:
    succ: dict[str, list[str]] = {}
    for u, v in edges:
        succ.setdefault(u, []).append(v)
    stack, seen = [start], {start}
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        for nxt in succ.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False
