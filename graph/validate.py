"""What a set of milestones must satisfy before it is a DAG: valid and
unique names, no self-deps, no unknown deps, no cycle (reported as a path
``a -> b -> a``); and what a removal must respect."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from milepost.graph.errors import (
    CycleError,
    DuplicateNameError,
    InputError,
    InvalidNameError,
    SelfDependencyError,
    TransitionError,
    UnknownDependencyError,
)
from milepost.graph.hints import known_names
from milepost.graph.models import NAME_PATTERN, Milestone, check_name
from milepost.graph.status import MilestoneStatus

__all__ = ["check_removable", "milestone_problems", "running_attempt", "validate_milestones"]

S = MilestoneStatus


def check_removable(m: Milestone, dependents: Sequence[str], owner: str | None = None) -> None:
    """Refuse the removal of ``m`` while a milestone depends on it or an
    attempt of it runs (``owner``: who runs it, to name them)."""
    if dependents:
        one = len(dependents) == 1
        raise TransitionError(
            f"cannot remove {m.name!r}: {', '.join(dependents)} {'depends' if one else 'depend'} on it;"
            f" remove {'it' if one else 'those'} first",
            milestone=m.name,
        )
    if m.status is S.IN_PROGRESS:
        raise TransitionError(
            f"cannot remove {running_attempt(m, owner)}: wait until it ends (or stop its drive), then remove it",
            milestone=m.name,
            owner=owner,
        )


def running_attempt(m: Milestone, owner: str | None = None) -> str:
    """An in-progress milestone's attempt as a refusal names it: ``'b' runs
    attempt 2 by driver@host`` (or ``waits for review of attempt 2``)."""
    by = f" by {owner}" if owner else ""
    kind = "waits for review of" if m.awaiting_review else "runs"
    return f"{m.name!r} {kind} attempt {max(m.attempts, 1)}{by}"


def _cycle_path(edges: dict[str, list[str]], order: dict[str, int]) -> str:
    """A cycle as ``a -> b -> a`` where each milestone needs the next,
    starting at the lowest id so the message is stable."""
    import networkx as nx

    needs: nx.DiGraph[str] = nx.DiGraph()
    needs.add_nodes_from(order)
    needs.add_edges_from((n, d) for n, ds in edges.items() for d in ds)
    cycle = nx.find_cycle(needs)
    nodes = [u for u, _ in cycle]
    start = min(range(len(nodes)), key=lambda i: order[nodes[i]])
    nodes = nodes[start:] + nodes[:start]
    return " -> ".join([*nodes, nodes[0]])


def milestone_problems(items: Sequence[Milestone]) -> Iterator[tuple[Milestone, InputError]]:
    """Every problem of a set of milestones that one look at each finds:
    invalid names, duplicate names, self-deps and unknown deps, in that order
    (cycles need the whole set to be sound; see :func:`validate_milestones`)."""
    seen: dict[str, int] = {}
    for m in items:
        try:
            check_name(m.name)
        except InvalidNameError as e:
            yield m, e
        if m.name in seen:
            yield (
                m,
                DuplicateNameError(
                    f"duplicate milestone name {m.name!r} (entries {seen[m.name]} and {m.id}); names must be unique",
                    milestone=m.name,
                ),
            )
        else:
            seen[m.name] = m.id
    names, unknown = list(seen), 0
    for m in items:
        if m.name in m.deps:
            yield m, SelfDependencyError(f"milestone {m.name!r} lists itself in its deps", milestone=m.name)
        for d in m.deps:
            if d not in seen:
                unknown += 1
                # The closest name for as many as a report shows; past them the list alone (each look costs).
                hint = known_names(d, names, _KNOWN_SHOWN, suggest=unknown <= _SUGGESTED)
                yield (
                    m,
                    UnknownDependencyError(
                        f"milestone {m.name!r} depends on unknown milestone {d!r}; {hint}", milestone=m.name, dep=d
                    ),
                )


_KNOWN_SHOWN = 20  # names listed after an unknown dep (a plan may hold 100,000)
_SUGGESTED = 50  # unknown deps given the closest known name (a plan's report shows 50 problems)


def validate_milestones(items: Sequence[Milestone]) -> None:
    """Validate a whole set of milestones (a plan or a stored item): names,
    duplicates, self-deps, unknown deps and cycles, in that order.

    Most sets list every milestone after its deps (plans are written so,
    scaffolded plans are, and ids follow creation): then one look at each
    name and dep proves the set sound and acyclic, since every edge points
    back. Anything else (a problem, or a dep listed later) takes the full
    checks: :func:`milestone_problems` for the first problem in its order,
    then Kahn's algorithm for a cycle."""
    if _deps_point_back(items):
        return
    for _, problem in milestone_problems(items):
        raise problem
    _check_acyclic(items)


def _deps_point_back(items: Sequence[Milestone]) -> bool:
    """Whether every name is valid and unique and every dep names a milestone listed before it (the set is sound)."""
    at: dict[str, int] = {}
    name_ok = NAME_PATTERN.fullmatch
    for i, m in enumerate(items):
        name = m.name
        if name in at or not isinstance(name, str) or not name_ok(name):
            return False
        at[name] = i
    get = at.get
    for i, m in enumerate(items):
        for d in m.deps:
            j = get(d)
            if j is None or j >= i:
                return False
    return True


def _check_acyclic(items: Sequence[Milestone]) -> None:
    """Raise CycleError, naming one cycle, when the (otherwise sound) milestones' deps form one."""
    # Kahn's algorithm: whatever is never freed lies on or behind a cycle.
    indeg: dict[str, int] = {}
    succ: dict[str, list[str]] = {m.name: [] for m in items}
    for m in items:
        deps = m.deps if len(m.deps) < 2 else set(m.deps)  # each dep once
        indeg[m.name] = len(deps)
        for d in deps:
            succ[d].append(m.name)
    free = [n for n, k in indeg.items() if k == 0]
    left = len(indeg)
    while free:
        n = free.pop()
        left -= 1
        for s in succ[n]:
            indeg[s] -= 1
            if indeg[s] == 0:
                free.append(s)
    if left:
        path = _cycle_path({m.name: m.deps for m in items}, {m.name: m.id for m in items})
        cycle = path.split(" -> ")
        raise CycleError(f"milestone deps form a cycle: {path} (each needs the next)", cycle=cycle, milestone=cycle[0])
