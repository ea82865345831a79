"""The milestone DAG of one work item.

:class:`WorkGraph` keeps the milestones in a networkx ``DiGraph`` whose edges
point from a dependency to its dependent. Readiness is derived, never stored,
but it is derived incrementally: each milestone has a counter of its deps that
are not done, and ready milestones sit in a min-heap keyed by id. A status
change touches only the milestone and its direct dependents, so
:meth:`WorkGraph.next_ready` costs O(log n) amortised instead of a scan, which
keeps the drive loop fast on graphs of 100,000 milestones.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import networkx as nx

from milepost.errors import (
    BlockedError,
    BudgetSpentError,
    CycleError,
    DuplicateNameError,
    InvalidValueError,
    NotFoundError,
    SelfDependencyError,
    TransitionError,
    UnknownDependencyError,
)
from milepost.graph.models import (
    GateCommand,
    Milestone,
    check_command,
    check_delay,
    check_env,
    check_name,
    check_retries,
    check_text,
    check_timeout,
)
from milepost.graph.status import REASON_REQUIRED, Action, MilestoneStatus, transition

__all__ = ["Change", "NextPick", "WorkGraph", "validate_milestones"]

S = MilestoneStatus


@dataclass(frozen=True)
class Change:
    """One milestone moved by an action: what it was, what it is, and why."""

    before: Milestone
    after: Milestone
    action: Action
    reason: str | None = None


@dataclass(frozen=True)
class NextPick:
    """The answer of ``next``: the milestone to work on, or none and why."""

    milestone: Milestone | None
    reason: str


def _is_ready_status(m: Milestone) -> bool:
    return m.status is S.PENDING or (m.status is S.NEEDS_FIX and m.budget_left)


class WorkGraph:
    """A milestone DAG with O(log n) readiness. Milestones are immutable
    pydantic models; every change replaces one through :meth:`_put`."""

    def __init__(self, milestones: Iterable[Milestone] = ()) -> None:
        self._g: nx.DiGraph[str] = nx.DiGraph()
        self._ms: dict[str, Milestone] = {}
        self._undone: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []
        self._queued: set[str] = set()
        # Milestones a driver keeps out of the schedule for now (a retry delay).
        self._held: set[str] = set()
        items = sorted(milestones, key=lambda m: m.id)
        self._max_id = items[-1].id if items else 0
        validate_milestones(items)
        for m in items:
            self._ms[m.name] = m
            self._g.add_node(m.name)
        for m in items:
            for d in m.deps:
                self._g.add_edge(d, m.name)
        for m in items:
            self._undone[m.name] = sum(1 for d in m.deps if not self._ms[d].status.is_done)
        self._heap = [(m.id, m.name) for m in items if self._ready(m)]
        heapq.heapify(self._heap)
        self._queued = {name for _, name in self._heap}

    # -- reading ---------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ms)

    def __iter__(self) -> Iterator[Milestone]:
        """Milestones in id order."""
        return iter(sorted(self._ms.values(), key=lambda m: m.id))

    def __contains__(self, name: object) -> bool:
        return name in self._ms

    def get(self, name: str) -> Milestone:
        try:
            return self._ms[name]
        except KeyError:
            known = ", ".join(m.name for m in list(self)[:8]) or "none yet"
            raise NotFoundError(f"no milestone {name!r} in this work item; known: {known}", milestone=name) from None

    @property
    def digraph(self) -> nx.DiGraph[str]:
        """A copy of the DAG (edges dep -> dependent), for analysis by callers."""
        return self._g.copy()

    def dependents(self, name: str) -> list[str]:
        return sorted(self._g.successors(name), key=lambda n: self._ms[n].id)

    def ancestors(self, name: str) -> list[str]:
        """Every milestone ``name`` depends on, directly or not, by id."""
        self.get(name)
        return sorted(nx.ancestors(self._g, name), key=lambda n: self._ms[n].id)

    def descendants(self, name: str) -> list[str]:
        """Every milestone that depends on ``name``, directly or not, by id."""
        self.get(name)
        return sorted(nx.descendants(self._g, name), key=lambda n: self._ms[n].id)

    def undone_deps(self, name: str) -> list[Milestone]:
        return [self._ms[d] for d in self.get(name).deps if not self._ms[d].status.is_done]

    def _ready(self, m: Milestone) -> bool:
        return _is_ready_status(m) and self._undone[m.name] == 0 and m.name not in self._held

    def hold(self, name: str) -> None:
        """Keep a milestone out of :meth:`next_ready` until :meth:`unhold`
        (in memory only: a drive loop's retry delay)."""
        self.get(name)
        self._held.add(name)

    def unhold(self, name: str) -> None:
        self._held.discard(name)
        if name in self._ms:
            self._enqueue(self._ms[name])

    def is_ready(self, name: str) -> bool:
        return self._ready(self.get(name))

    def next_ready(self) -> Milestone | None:
        """The lowest-id ready milestone, or None. Amortised O(log n):
        entries that stopped being ready are dropped lazily from the heap."""
        heap = self._heap
        while heap:
            mid, name = heap[0]
            m = self._ms.get(name)
            if m is not None and m.id == mid and self._ready(m):
                return m
            heapq.heappop(heap)
            if m is not None and m.id == mid:
                self._queued.discard(name)
        return None

    def ready(self) -> list[Milestone]:
        """Every ready milestone, lowest id first."""
        return sorted((self._ms[n] for n in self._queued if self._ready(self._ms[n])), key=lambda m: m.id)

    def blocked(self) -> list[tuple[Milestone, list[Milestone]]]:
        """Pending milestones with deps not done, each with the deps it waits on."""
        return [(m, self.undone_deps(m.name)) for m in self if m.status is S.PENDING and self._undone[m.name] > 0]

    def all_done(self) -> bool:
        return all(m.status.is_done for m in self._ms.values())

    def pick(self) -> NextPick:
        """``next``: the lowest-id ready milestone, or none with the reason."""
        m = self.next_ready()
        if m is not None:
            return NextPick(m, f"{m.name} is ready (lowest id among {len(self.ready())} ready)")
        return NextPick(None, self.why_nothing_ready())

    def why_nothing_ready(self) -> str:
        if not self._ms:
            return "no milestones yet: add one with `milepost add NAME`"
        if self.all_done():
            return f"all {len(self._ms)} milestones are done"
        by: dict[S, list[str]] = {}
        review: list[str] = []
        held: list[str] = []
        for m in self:
            status = S.STUCK if m.is_stuck else m.status
            if m.awaiting_review:
                review.append(m.name)
                continue
            if m.name in self._held and _is_ready_status(m):
                held.append(m.name)
                continue
            by.setdefault(status, []).append(m.name)
        parts: list[str] = []
        if S.IN_PROGRESS in by:
            parts.append("waiting on " + ", ".join(by[S.IN_PROGRESS]) + " (in_progress)")
        if review:
            parts.append("waiting for review: " + ", ".join(review) + " (approve, or reject --reason)")
        if held:
            parts.append("retry delayed: " + ", ".join(held))
        if S.STUCK in by:
            parts.append("stuck: " + ", ".join(by[S.STUCK]) + " (reset with --reason)")
        if S.LOCKED in by:
            parts.append("locked: " + ", ".join(by[S.LOCKED]))
        if S.HYPOTHESIS in by:
            parts.append("unconfirmed: " + ", ".join(by[S.HYPOTHESIS]))
        return "nothing ready: " + "; ".join(parts) if parts else "nothing ready"

    # -- analysis ----------------------------------------------------------

    def _topo(self) -> list[str]:
        return list(nx.lexicographical_topological_sort(self._g, key=lambda n: self._ms[n].id))

    def layers(self) -> list[list[Milestone]]:
        """Topological layers: every milestone of a layer can run in parallel
        once the layers before it are done."""
        return [sorted((self._ms[n] for n in gen), key=lambda m: m.id) for gen in nx.topological_generations(self._g)]

    def bottlenecks(self, limit: int = 5) -> list[tuple[Milestone, int]]:
        """Milestones that most others depend on, directly or not, with that
        count; ties broken by id. Costs O(n * (n + e)) in the worst case: an
        analysis, not a hot path."""
        counts = [(len(nx.descendants(self._g, n)), self._ms[n]) for n in self._ms]
        counts.sort(key=lambda c: (-c[0], c[1].id))
        return [(m, c) for c, m in counts[:limit] if c > 0]

    def critical_path(self) -> list[Milestone]:
        """The longest chain of dependent milestones (by count), earliest ids first on ties."""
        if not self._ms:
            return []
        path = nx.dag_longest_path(self._g, topo_order=self._topo())
        return [self._ms[n] for n in path]

    # -- structure ---------------------------------------------------------

    def add(
        self,
        name: str,
        deps: Sequence[str] = (),
        *,
        acceptance: str = "",
        gate: Sequence[object] = (),
        retries: int = 2,
        timeout: float | None = None,
        review: bool = False,
        fix: str | None = None,
        retry_delay: float | None = None,
        hypothesis: bool = False,
    ) -> Milestone:
        """Add a milestone; its deps must exist already (so no cycle can form)."""
        check_name(name)
        owner = f"milestone {name!r}"
        check_retries(retries, owner)
        check_timeout(timeout, owner)
        check_delay(retry_delay, owner)
        check_text(acceptance, f"the acceptance text of {owner}")
        if fix is not None:
            check_command(fix, f"the fix command of {owner}")
        for g in gate:
            if isinstance(g, GateCommand):
                check_command(g.run, f"the gate of {owner}")
                check_env(g.env, f"the gate of {owner}")
                check_timeout(g.timeout, f"the gate of {owner}")
        if name in self._ms:
            raise DuplicateNameError(
                f"milestone {name!r} already exists (id {self._ms[name].id}); names are unique in a work item",
                milestone=name,
            )
        deps = list(dict.fromkeys(deps))
        if name in deps:
            raise SelfDependencyError(f"milestone {name!r} lists itself in its deps", milestone=name)
        for d in deps:
            if d not in self._ms:
                known = ", ".join(m.name for m in self) or "none yet"
                raise UnknownDependencyError(
                    f"milestone {name!r} depends on unknown milestone {d!r}; known: {known}", milestone=name, dep=d
                )
        self._max_id += 1
        new_id = self._max_id
        m = Milestone.model_validate(
            {
                "id": new_id,
                "name": name,
                "deps": deps,
                "acceptance": acceptance,
                "gate": list(gate),
                "retries": retries,
                "timeout": timeout,
                "review": review,
                "fix": fix,
                "retry_delay": retry_delay,
                "status": S.HYPOTHESIS if hypothesis else S.PENDING,
            }
        )
        self._ms[name] = m
        self._g.add_node(name)
        for d in deps:
            self._g.add_edge(d, name)
        self._undone[name] = sum(1 for d in deps if not self._ms[d].status.is_done)
        self._enqueue(m)
        return m

    def remove(self, name: str) -> Milestone:
        m = self.get(name)
        users = self.dependents(name)
        if users:
            raise TransitionError(
                f"cannot remove {name!r}: {', '.join(users)} depend on it; remove those first", milestone=name
            )
        if m.status is S.IN_PROGRESS:
            raise TransitionError(f"cannot remove {name!r}: status is in_progress; finish or fix it first")
        del self._ms[name]
        del self._undone[name]
        self._g.remove_node(name)
        self._queued.discard(name)  # its heap entry is skipped lazily
        if m.id == self._max_id:
            # Ids are max + 1, as a reload from the store would compute them.
            self._max_id = max((x.id for x in self._ms.values()), default=0)
        return m

    # -- state changes -----------------------------------------------------

    def _enqueue(self, m: Milestone) -> None:
        if m.name not in self._queued and self._ready(m):
            heapq.heappush(self._heap, (m.id, m.name))
            self._queued.add(m.name)

    def _put(self, new: Milestone) -> None:
        """Replace a milestone, keeping the not-done counters and the heap right."""
        old = self._ms[new.name]
        self._ms[new.name] = new
        was, now = old.status.is_done, new.status.is_done
        if was != now:
            delta = -1 if now else 1
            for succ in self._g.successors(new.name):
                self._undone[succ] += delta
                if now:
                    self._enqueue(self._ms[succ])
        self._enqueue(new)

    def apply(
        self,
        name: str,
        action: Action,
        *,
        reason: str | None = None,
    ) -> list[Change]:
        """Apply a user action to a milestone. Returns every milestone it moved
        (``needs_fix`` on a done milestone also reopens its done dependents)."""
        m = self.get(name)
        if action in (Action.FAIL, Action.EXHAUST, Action.AWAIT_REVIEW):
            raise InvalidValueError(f"{action.value} is the outcome of a gate run; use record_attempt()")
        if action in (Action.APPROVE, Action.REJECT):
            raise InvalidValueError(f"{action.value} is a review verdict; use review()")
        if action in REASON_REQUIRED and not (reason and reason.strip()):
            raise InvalidValueError(
                f"{action.command} {name!r} needs a reason: pass --reason TEXT", milestone=name, action=action.value
            )
        target = transition(name, m.status, action)
        update: dict[str, object] = {"status": target, "reason": reason}
        changes: list[Change] = []
        if action is Action.START:
            waiting = self.undone_deps(name)
            if waiting:
                listed = ", ".join(f"{d.name} ({d.status.value})" for d in waiting)
                raise BlockedError(
                    f"cannot start {name!r}: blocked by {listed}",
                    milestone=name,
                    waiting_on=[d.name for d in waiting],
                )
            update["retry_at"] = None
            if not m.budget_left:
                raise BudgetSpentError(
                    f"cannot start {name!r}: retry budget spent ({m.attempts} of {m.max_attempts} attempts);"
                    f" an operator can `milepost reset {name} --reason TEXT`",
                    milestone=name,
                )
        elif action is Action.DONE:
            if m.awaiting_review:
                raise TransitionError(
                    f"cannot done {name!r}: its gate passed and it waits for review; allowed: approve, reject --reason",
                    milestone=name,
                )
            if m.has_gate:
                raise InvalidValueError(f"{name!r} has a gate: its outcome is recorded with record_attempt()")
            if m.review:
                update["status"] = S.IN_PROGRESS
                update["awaiting_review"] = True
                action = Action.AWAIT_REVIEW
        elif action is Action.RELEASE:
            update["reason"] = reason or "released"
        elif action is Action.RESET:
            update["attempts"] = 0
        elif action is Action.NEEDS_FIX and m.status is S.DONE:
            changes = self._reopen_dependents(name, reason or "")
        if action in (Action.NEEDS_FIX, Action.RELEASE, Action.RESET):
            update["awaiting_review"] = False
        new = m.model_copy(update=update)
        self._put(new)
        return [Change(m, new, action, reason), *changes]

    def _reopen_dependents(self, name: str, reason: str) -> list[Change]:
        """A done milestone found faulty reopens everything done that was built
        on it: otherwise a done milestone would stand on an undone dep."""
        below = self.descendants(name)
        busy = [n for n in below if self._ms[n].status is S.IN_PROGRESS]
        if busy:
            raise TransitionError(
                f"cannot reopen {name!r}: dependents in progress: {', '.join(busy)}; finish or fix them first",
                milestone=name,
            )
        changes = []
        why = f"dep {name!r} reopened: {reason}"
        for n in below:
            old = self._ms[n]
            if old.status is S.DONE:
                # The failure is not theirs: a fresh budget for the rebuild.
                new = old.model_copy(update={"status": S.NEEDS_FIX, "reason": why, "attempts": 0})
                self._put(new)
                changes.append(Change(old, new, Action.NEEDS_FIX, why))
        return changes

    def record_attempt(
        self, name: str, passed: bool, reason: str | None = None, *, retry_at: datetime | None = None
    ) -> Change:
        """Record one finished gate attempt of an in-progress milestone:
        pass -> done (or waiting for review when it has a review gate);
        fail -> needs_fix while budget is left, else stuck."""
        m = self.get(name)
        if m.awaiting_review:
            raise TransitionError(f"{name!r} waits for review; its gate already passed", milestone=name)
        attempts = m.attempts + 1
        review = False
        if passed:
            review = m.review
            action = Action.AWAIT_REVIEW if review else Action.DONE
        else:
            action = Action.FAIL if attempts < m.max_attempts else Action.EXHAUST
        target = transition(name, m.status, action)
        new = m.model_copy(
            update={
                "status": target,
                "attempts": attempts,
                "reason": reason,
                "awaiting_review": review,
                "retry_at": retry_at,
            }
        )
        self._put(new)
        return Change(m, new, action, reason)

    def review(self, name: str, approve: bool, reason: str | None = None) -> Change:
        """An operator's verdict on a milestone whose gate passed: approve ->
        done; reject -> needs_fix, or stuck when the budget is spent."""
        m = self.get(name)
        action = Action.APPROVE if approve else Action.REJECT
        target = transition(name, m.status, action)
        if not m.awaiting_review:
            raise TransitionError(
                f"cannot {action.command} {name!r}: it is not waiting for review (status {m.status.value})",
                milestone=name,
            )
        if not approve and not (reason and reason.strip()):
            raise InvalidValueError(f"reject {name!r} needs a reason: pass --reason TEXT", milestone=name)
        if not approve and not m.budget_left:
            target = transition(name, m.status, Action.EXHAUST)
        new = m.model_copy(update={"status": target, "awaiting_review": False, "reason": reason})
        self._put(new)
        return Change(m, new, action, reason)


def _cycle_path(g: nx.DiGraph[str], order: dict[str, int]) -> str:
    """A cycle as ``a -> b -> a`` where each milestone needs the next,
    starting at the lowest id so the message is stable."""
    needs = g.reverse(copy=False)
    cycle = nx.find_cycle(needs)
    nodes = [u for u, _ in cycle]
    start = min(range(len(nodes)), key=lambda i: order[nodes[i]])
    nodes = nodes[start:] + nodes[:start]
    return " -> ".join([*nodes, nodes[0]])


def validate_milestones(items: Sequence[Milestone]) -> None:
    """Validate a whole set of milestones (a plan or a stored item): names,
    duplicates, self-deps, unknown deps and cycles, in that order."""
    seen: dict[str, int] = {}
    for m in items:
        check_name(m.name)
        if m.name in seen:
            raise DuplicateNameError(
                f"duplicate milestone name {m.name!r} (entries {seen[m.name]} and {m.id}); names must be unique",
                milestone=m.name,
            )
        seen[m.name] = m.id
    for m in items:
        if m.name in m.deps:
            raise SelfDependencyError(f"milestone {m.name!r} lists itself in its deps", milestone=m.name)
        for d in m.deps:
            if d not in seen:
                raise UnknownDependencyError(
                    f"milestone {m.name!r} depends on unknown milestone {d!r}; known: {', '.join(seen)}",
                    milestone=m.name,
                    dep=d,
                )
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_nodes_from(seen)
    g.add_edges_from((d, m.name) for m in items for d in m.deps)
    if not nx.is_directed_acyclic_graph(g):
        path = _cycle_path(g, seen)
        cycle = path.split(" -> ")
        raise CycleError(f"milestone deps form a cycle: {path} (each needs the next)", cycle=cycle, milestone=cycle[0])
