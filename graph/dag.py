"""The milestone DAG of one work item.

:class:`WorkGraph` keeps the milestones in a dict by name; each milestone's
``deps`` are its edges, and the reverse edges (dep -> dependents) are plain
lists built on first use. No networkx here: it is imported only to name a
plan's cycle (:mod:`milepost.graph.validate`). Readiness is derived, never
stored, but it is derived incrementally: each milestone has a counter of its
deps that are not done, and ready milestones sit in a min-heap keyed by id
(entries that stopped being ready are dropped lazily). A status change
touches only the milestone and its direct dependents, so
:meth:`WorkGraph.next_ready` costs O(log n) amortised instead of a scan, which
keeps the drive loop fast on graphs of 100,000 milestones. Whole-graph
analyses (layers, critical path, topological order) are plain Python too.
"""

from __future__ import annotations

import heapq
import itertools
import statistics
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from milepost.graph import steps
from milepost.graph.errors import (
    NotFoundError,
    TransitionError,
)
from milepost.graph.hints import known_names
from milepost.graph.models import Milestone
from milepost.graph.status import Action, DisplayStatus, MilestoneStatus
from milepost.graph.steps import Change, is_ready_status, nothing_ready_reason
from milepost.graph.validate import check_removable, validate_milestones

__all__ = ["Change", "NextPick", "WorkGraph", "display_status"]

S = MilestoneStatus


@dataclass(frozen=True)
class NextPick:
    """The answer of ``next``: the milestone to work on, or none and why."""

    milestone: Milestone | None
    reason: str


class WorkGraph:
    """A milestone DAG with O(log n) readiness. Milestones are immutable
    pydantic models; every change replaces one through :meth:`put`.

    The edges live in plain dicts (dep -> dependents): building a graph and
    every state change and the analyses stay free of networkx, which is
    imported only to name the cycle of a plan that has one."""

    def __init__(self, milestones: Iterable[Milestone] = (), *, validate: bool = True) -> None:
        self._ms: dict[str, Milestone] = {}
        # dep -> dependents, made on first use (see _succ): a graph built to
        # be read once (``plan apply``'s answer, a list) never needs them.
        self._succ_lists: dict[str, list[str]] | None = None
        self._undone: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []
        self._queued: set[str] = set()
        # Milestones a driver keeps out of the schedule for now (a retry delay).
        self._held: set[str] = set()
        # Done milestones whose inputs changed since their proof (found by the
        # service, which reads the files: this module does no I/O).
        self._stale: set[str] = set()
        items = list(milestones)
        if any(a.id >= b.id for a, b in itertools.pairwise(items)):
            items.sort(key=lambda m: m.id)
        self._max_id = items[-1].id if items else 0
        if validate:
            validate_milestones(items)
        self._ms = ms = {m.name: m for m in items}
        done = S.DONE
        if any(m.status is done for m in items):
            undone = self._undone
            for m in items:
                left = 0
                for d in m.deps:
                    if ms[d].status is not done:
                        left += 1
                undone[m.name] = left
        else:  # nothing done yet (a new plan): every dep counts
            self._undone = undone = {m.name: len(m.deps) for m in items}
        # self._ready(m) inlined (nothing is held yet), for large plans: docs/benchmarks.md
        ready = (S.PENDING, S.NEEDS_FIX)
        self._heap = [
            (m.id, m.name)
            for m in items
            if m.status in ready and not undone[m.name] and (m.status is S.PENDING or m.budget_left)
        ]
        heapq.heapify(self._heap)
        self._queued = {name for _, name in self._heap}

    @property
    def _succ(self) -> dict[str, list[str]]:
        """Each milestone's dependents, in the order they were taken in."""
        succ = self._succ_lists
        if succ is None:
            succ = {n: [] for n in self._ms}
            for m in self._ms.values():
                for d in m.deps:
                    succ[d].append(m.name)
            self._succ_lists = succ  # only once whole
        return succ

    # -- reading ---------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ms)

    def __iter__(self) -> Iterator[Milestone]:
        """Milestones in id order."""
        return iter(sorted(self._ms.values(), key=lambda m: m.id))

    def __contains__(self, name: object) -> bool:
        return name in self._ms

    @property
    def max_id(self) -> int:
        return self._max_id

    def get(self, name: str) -> Milestone:
        try:
            return self._ms[name]
        except KeyError:
            known = known_names(name, [m.name for m in self])
            raise NotFoundError(f"no milestone {name!r} in this work item; {known}", milestone=name) from None

    def _by_id(self, names: Iterable[str]) -> list[str]:
        return sorted(names, key=lambda n: self._ms[n].id)

    def dependents(self, name: str) -> list[str]:
        return self._by_id(self._succ[name])

    def _reach(self, name: str, step: dict[str, list[str]] | None) -> list[str]:
        self.get(name)
        nxt = step if step is not None else {n: m.deps for n, m in self._ms.items()}
        seen: set[str] = set()
        todo = deque([name])
        while todo:
            for n in nxt[todo.popleft()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return self._by_id(seen)

    def ancestors(self, name: str) -> list[str]:
        """Every milestone ``name`` depends on, directly or not, by id."""
        return self._reach(name, None)

    def descendants(self, name: str) -> list[str]:
        """Every milestone that depends on ``name``, directly or not, by id."""
        return self._reach(name, self._succ)

    def undone_deps(self, name: str) -> list[Milestone]:
        return [self._ms[d] for d in self.get(name).deps if self._ms[d].status is not S.DONE]

    def _ready(self, m: Milestone) -> bool:
        return is_ready_status(m) and self._undone[m.name] == 0 and m.name not in self._held

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

    def mark_stale(self, names: Iterable[str]) -> None:
        """Say which done milestones are stale (their inputs changed since
        they were proven); the view shows them so. Replaces earlier marks."""
        self._stale = {n for n in names if n in self._ms}

    def stale(self) -> list[str]:
        """The done milestones marked stale, by id."""
        return self._by_id(n for n in self._stale if self._ms[n].status is S.DONE)

    def is_stale(self, name: str) -> bool:
        return name in self._stale and self.get(name).status is S.DONE

    def view(self, name: str) -> DisplayStatus:
        """What a person sees for ``name`` (see :func:`display_status`)."""
        m = self.get(name)
        return steps.display_status(
            m, deps_done=self._undone[name] == 0, held=name in self._held, stale=name in self._stale
        )

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
        return all(m.status is S.DONE for m in self._ms.values())

    def pick(self) -> NextPick:
        """``next``: the lowest-id ready milestone, or none with the reason."""
        m = self.next_ready()
        if m is not None:
            return NextPick(m, f"{m.name} is ready (lowest id among {len(self.ready())} ready)")
        return NextPick(None, self.why_nothing_ready())

    def why_nothing_ready(self) -> str:
        return nothing_ready_reason(
            len(self._ms), sum(1 for m in self._ms.values() if m.status is S.DONE), self, self._held
        )

    # -- analysis ----------------------------------------------------------

    def layers(self) -> list[list[Milestone]]:
        """Topological layers: every milestone of a layer can run in parallel
        once the layers before it are done."""
        indeg = {n: len(m.deps) for n, m in self._ms.items()}
        layer = [n for n, k in indeg.items() if k == 0]
        out = []
        while layer:
            out.append(sorted((self._ms[n] for n in layer), key=lambda m: m.id))
            nxt = []
            for n in layer:
                for s in self._succ[n]:
                    indeg[s] -= 1
                    if indeg[s] == 0:
                        nxt.append(s)
            layer = nxt
        return out

    def bottlenecks(self, limit: int = 5) -> list[tuple[Milestone, int]]:
        """Milestones that most others depend on, directly or not, with that
        count; ties broken by id. Costs O(n * (n + e)) in the worst case: an
        analysis, not a hot path."""
        counts = [(len(self.descendants(n)), self._ms[n]) for n in self._ms]
        counts.sort(key=lambda c: (-c[0], c[1].id))
        return [(m, c) for c, m in counts[:limit] if c > 0]

    def critical_path(self, durations: Mapping[str, float] | None = None) -> list[Milestone]:
        """The longest chain of dependent milestones, earliest ids first on
        ties: by time when any of ``durations`` is known (seconds per
        milestone, e.g. its gate's last run; see :meth:`path_weights`), else
        by count. O(n + e) in plain Python: drawn at the end of every drive,
        it must not import networkx."""
        weights = self.path_weights(durations) or dict.fromkeys(self._ms, 1.0)
        # The heaviest chain ending at each milestone (on equal time the longer one).
        best: dict[str, tuple[float, int, str | None]] = {}

        def rank(n: str) -> tuple[float, int, int]:
            return best[n][0], best[n][1], -self._ms[n].id

        for n in self.topological_order():
            prev = max(self._ms[n].deps, key=rank, default=None)
            time, count = (best[prev][0], best[prev][1]) if prev is not None else (0.0, 0)
            best[n] = (time + weights[n], count + 1, prev)
        end: str | None = max(best, key=rank, default=None)
        path = []
        while end is not None:
            path.append(self._ms[end])
            end = best[end][2]
        return path[::-1]

    def topological_order(self) -> list[str]:
        """Every milestone after its deps; the lowest id first among those free to go."""
        indeg = {n: len(m.deps) for n, m in self._ms.items()}
        heap = [(self._ms[n].id, n) for n, k in indeg.items() if k == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            _, n = heapq.heappop(heap)
            order.append(n)
            for s in self._succ[n]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, (self._ms[s].id, s))
        return order

    def path_weights(self, durations: Mapping[str, float] | None) -> dict[str, float] | None:
        """Seconds per milestone for a critical path by time: its duration when
        known, the median of the known ones for a gated milestone that has
        none (not run yet), 0 without a gate; None when none is known."""
        known = {n: float(s) for n, s in (durations or {}).items() if n in self._ms}
        if not known:
            return None
        typical = statistics.median(known.values())
        return {n: known.get(n, typical if m.gate else 0.0) for n, m in self._ms.items()}

    # -- structure ---------------------------------------------------------

    def add(self, name: str, deps: Sequence[str] = (), **fields: Any) -> Milestone:
        """Add a milestone (fields as :func:`~milepost.graph.steps.new_milestone`);
        its deps must exist already (so no cycle can form)."""
        m = steps.new_milestone(
            self._max_id + 1,
            name,
            deps,
            lookup=lambda n: self._ms[n].id if n in self._ms else None,
            known=lambda: [m.name for m in self],
            **fields,
        )
        self.insert(m)
        return m

    def insert(self, m: Milestone) -> None:
        """Take in a milestone validated elsewhere (its deps are in the graph)."""
        succ = self._succ  # (made from the milestones as they were: before this one is in)
        self._max_id = max(self._max_id, m.id)
        self._ms[m.name] = m
        succ[m.name] = []
        for d in m.deps:
            succ[d].append(m.name)
        self._undone[m.name] = sum(1 for d in m.deps if self._ms[d].status is not S.DONE)
        self._enqueue(m)

    def remove(self, name: str) -> Milestone:
        m = self.get(name)
        succ = self._succ  # (made from the milestones as they were: with this one)
        check_removable(m, self.dependents(name))
        del self._ms[name]
        del self._undone[name]
        del succ[name]
        for d in m.deps:
            succ[d].remove(name)
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

    def put(self, new: Milestone) -> None:
        """Replace a milestone (a changed status, attempts...), keeping the
        not-done counters and the heap right. Its deps do not change."""
        old = self._ms[new.name]
        self._ms[new.name] = new
        was, now = old.status is S.DONE, new.status is S.DONE
        if was != now:
            delta = -1 if now else 1
            for succ in self._succ[new.name]:
                self._undone[succ] += delta
                if now:
                    self._enqueue(self._ms[succ])
        self._enqueue(new)

    def apply(self, name: str, action: Action, *, reason: str | None = None) -> list[Change]:
        """Apply a user action to a milestone. Returns every milestone it moved
        (``needs_fix`` on a done milestone also reopens its done dependents)."""
        m = self.get(name)
        change = steps.act(m, action, undone_deps=self.undone_deps(name), reason=reason)
        reopened: list[Change] = []
        if action is Action.NEEDS_FIX and m.status is S.DONE:
            reopened = self.reopen_dependents(name, reason or "", strict=True)
        self.put(change.after)
        if action is Action.REPROVE:
            self._stale.discard(name)
        return [change, *reopened]

    def reopen_dependents(self, name: str, reason: str, *, strict: bool = False) -> list[Change]:
        """A done milestone found faulty (``needs-fix`` by hand, or a failed
        re-proof) reopens everything done that was built on it, directly or
        not: they become pending behind it (blocked, with a fresh budget),
        since a done milestone must not stand on an undone dep. ``strict``
        (an operator's action) refuses while one of them is in progress; a
        failed gate is a fact, so there those are left to finish."""
        below = self.descendants(name)
        busy = [n for n in below if self._ms[n].status is S.IN_PROGRESS]
        if busy and strict:
            raise TransitionError(
                f"cannot reopen {name!r}: dependents in progress: {', '.join(busy)}; finish or fix them first",
                milestone=name,
            )
        changes = []
        why = f"dep {name!r} reopened: {reason}"
        for n in below:
            old = self._ms[n]
            if old.status is S.DONE:
                change = steps.act(old, Action.REOPEN, reason=why)
                self.put(change.after)
                self._stale.discard(n)
                changes.append(change)
        return changes

    def record_attempt(
        self,
        name: str,
        passed: bool,
        reason: str | None = None,
        *,
        at: datetime | None = None,
        free: bool = False,
        fingerprint: str | None = None,
    ) -> Change:
        """Record one finished gate attempt (see :func:`~milepost.graph.steps.record_attempt`)."""
        change = steps.record_attempt(self.get(name), passed, reason, at=at, free=free, fingerprint=fingerprint)
        self.put(change.after)
        return change

    def review(self, name: str, approve: bool, reason: str | None = None) -> Change:
        """An operator's verdict (see :func:`~milepost.graph.steps.review`)."""
        change = steps.review(self.get(name), approve, reason)
        self.put(change.after)
        return change


def display_status(g: WorkGraph, m: Milestone) -> DisplayStatus:
    """What a person sees for milestone ``m`` of ``g``: the stored status with
    the derived views folded in (a ready milestone shows ``ready``, a pending
    one waiting on deps ``blocked``)."""
    return g.view(m.name)
