"""Import cycles: how each is named, shown, and cut.

A cycle is a strongly connected component of the import graph (two or more
units). Everything here is decided by fixed rules, so the same code always
gives the same plan:

- its **head** is its most-imported member (the most importers in the whole
  package; ties by name): the milestone is named after it;
- its **path** is the shortest cycle through the head, neighbours visited in
  name order;
- its **cut** is a small set of imports whose removal leaves no cycle:
  modules are placed one at a time, leaves first, taking each time the one
  with the fewest module-level import statements of modules not yet placed,
  then the fewest deferred ones (under ``TYPE_CHECKING`` or in a function),
  then by name; the imports it still has of unplaced modules are cut. Then
  each cut import whose return would close no cycle is put back
  (module-level ones first), so every import left in the cut is needed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from milepost.scaffold.source import MODULE_LEVEL

__all__ = ["Cycle", "ImportLine", "analyse"]


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


@dataclass
class Cycle:
    members: list[str]  # units, sorted
    head: str
    path: list[str]  # head -> ... -> head
    cut: list[tuple[str, str]]  # (importer unit, imported unit), sorted
    imports: list[ImportLine]  # the statements of the cut edges, sorted by file and line
    import_time: bool  # a cycle among module-level imports (not only deferred ones)

    @property
    def path_text(self) -> str:
        return " -> ".join(self.path)

    def summary(self) -> str:
        """How the cut splits: ``7 imports, all deferred (no import-time cycle)``."""
        n = len(self.imports)
        deferred = sum(1 for i in self.imports if i.deferred)
        word = "import" if n == 1 else "imports"
        if deferred == n:
            return f"closed by {n} {word}, all under TYPE_CHECKING or in a function (no import-time cycle)"
        if deferred == 0:
            return f"closed by {n} module-level {word}"
        return f"closed by {n} {word}: {n - deferred} at module level, {deferred} under TYPE_CHECKING or in a function"


def analyse(
    graph: Any, members: list[str], importers: Mapping[str, int], lines: Callable[[str, str], list[ImportLine]]
) -> Cycle:
    """The head, path and cut of one strongly connected component of ``graph``
    (a networkx DiGraph, importer -> imported); ``importers`` counts each
    unit's importers in the whole package; ``lines`` gives an edge's statements."""
    inside = set(members)
    edges = {(u, v): lines(u, v) for u in members for v in graph.successors(u) if v in inside and v != u}
    weight = {e: _weight(ls) for e, ls in edges.items()}
    head = min(members, key=lambda n: (-importers.get(n, 0), n))
    path = _shortest_cycle(graph, head, inside)
    cut = _cut(members, weight)
    import_time = _has_cycle(members, [e for e, (rt, _) in weight.items() if rt > 0])
    shown = sorted((ln for e in cut for ln in edges[e]), key=lambda ln: (ln.file, ln.line, ln.imported))
    return Cycle(members=members, head=head, path=path, cut=sorted(cut), imports=shown, import_time=import_time)


def _weight(lines: list[ImportLine]) -> tuple[int, int]:
    """(module-level statements, deferred statements) of an edge; an edge
    whose statements could not be read counts as one module-level import."""
    if not lines:
        return (1, 0)
    deferred = sum(1 for ln in lines if ln.deferred)
    return (len(lines) - deferred, deferred)


def _shortest_cycle(graph: Any, head: str, inside: set[str]) -> list[str]:
    parent: dict[str, str] = {}
    queue = deque([head])
    seen = {head}
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph.successors(node)):
            if nxt not in inside:
                continue
            if nxt == head:
                path = [node]
                while path[-1] != head:
                    path.append(parent[path[-1]])
                return [*reversed(path), head]
            if nxt not in seen:
                seen.add(nxt)
                parent[nxt] = node
                queue.append(nxt)
    return [head, head]  # pragma: no cover - a component of two or more always has a cycle through each member


def _cut(members: list[str], weight: Mapping[tuple[str, str], tuple[int, int]]) -> list[tuple[str, str]]:
    succ: dict[str, list[str]] = {m: [] for m in members}
    pred: dict[str, list[str]] = {m: [] for m in members}
    for u, v in sorted(weight):
        succ[u].append(v)
        pred[v].append(u)
    left = {m: [sum(weight[m, v][0] for v in succ[m]), sum(weight[m, v][1] for v in succ[m])] for m in members}
    unplaced = set(members)
    cut: list[tuple[str, str]] = []
    while unplaced:
        x = min(unplaced, key=lambda n: (left[n][0], left[n][1], n))
        cut += [(x, v) for v in succ[x] if v in unplaced]
        unplaced.discard(x)
        for p in pred[x]:
            if p in unplaced:
                rt, df = weight[p, x]
                left[p][0] -= rt
                left[p][1] -= df
    # Put back what is not needed: the heaviest first, so the cut keeps the light ones.
    kept = set(weight) - set(cut)
    needed: list[tuple[str, str]] = []
    for e in sorted(cut, key=lambda e: (-weight[e][0], -weight[e][1], e)):
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


def _has_cycle(members: list[str], edges: list[tuple[str, str]]) -> bool:
    import networkx as nx

    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_nodes_from(members)
    g.add_edges_from(edges)
    return not nx.is_directed_acyclic_graph(g)
