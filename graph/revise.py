"""A plan revision of an existing work item, worked out without I/O: which
milestones a new plan adds, removes and changes (matched by name), what
has to be proven again, and what may not change now.

The rules (docs/plan-files.md, "How a plan changes"):

- A milestone the new plan keeps with the same definition keeps its status,
  attempts and proof.
- A milestone whose gate, inputs or deps changed is proven again: done goes
  back to pending (and the done milestones built on it wait behind it, as a
  failed re-proof would leave them); needs_fix or stuck gets a fresh budget
  (its failures were of another gate). Other fields (acceptance, retries,
  timeout, do: ...) change in place, the status stays.
- A milestone with a running attempt (in progress) is neither changed nor
  removed, and neither is one a change would reopen: the revision is refused
  whole, naming each, until the attempt ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from milepost.graph import steps
from milepost.graph.dag import WorkGraph
from milepost.graph.errors import TransitionError
from milepost.graph.models import Milestone
from milepost.graph.status import Action, MilestoneStatus
from milepost.graph.steps import Change
from milepost.graph.validate import running_attempt

__all__ = [
    "DEFINITION",
    "REPROVE",
    "FieldChange",
    "MilestoneEdit",
    "PlanRevision",
    "Revised",
    "refuse",
    "revise",
    "running_problems",
]

S = MilestoneStatus
# What a plan file defines of a milestone (its state is the store's).
DEFINITION = (
    "deps",
    "acceptance",
    "gate",
    "retries",
    "timeout",
    "review",
    "fix",
    "retry_delay",
    "inputs",
    "cache",
    "flaky",
    "do",
    "do_timeout",
    "do_budget_usd",
    "do_usage",
)
# A change of these proves the milestone again.
REPROVE = frozenset({"gate", "inputs", "deps"})


class FieldChange(BaseModel):
    """One field of a milestone or of the item, before and after."""

    field: str
    before: Any = None
    after: Any = None


class MilestoneEdit(BaseModel):
    """A milestone the revision changes: its fields, and whether it is proven again."""

    name: str
    fields: list[FieldChange]
    reprove: bool = False


class PlanRevision(BaseModel):
    """What a plan revision changes (``plan apply --item``, ``edit``): the
    answer of ``--dry-run`` and of the write."""

    item: int
    revision: int = Field(description="the item's revision after the change (unchanged by a dry run or no change)")
    dry_run: bool = False
    changed_anything: bool = False
    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    changed: list[MilestoneEdit] = Field(default_factory=list)
    item_fields: list[FieldChange] = Field(default_factory=list, description="objective, plan_status, defaults, doer")
    stale: dict[str, str] = Field(
        default_factory=dict, description="milestones proven again, each with its status move and why"
    )
    kept_evidence: dict[str, int] = Field(
        default_factory=dict, description="removed milestones' runs kept as work refs, by milestone"
    )

    def summary(self) -> str:
        """One line naming what changed (the history event's reason; the
        first names of a long list, then how many more)."""
        parts = []
        if self.added:
            parts.append(f"added {_names(self.added)}")
        if self.removed:
            parts.append(f"removed {_names(self.removed)}")
        changed = [f"{e.name} ({', '.join(f.field for f in e.fields)})" for e in self.changed]
        if changed:
            parts.append(f"changed {_names(changed)}")
        if self.item_fields:
            parts.append(f"item {', '.join(f.field for f in self.item_fields)}")
        if self.stale:
            parts.append(f"to re-prove: {_names(list(self.stale))}")
        return "; ".join(parts) or "no change"


# Names a summary shows of each list.
SHOWN = 20


def _names(names: Sequence[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


@dataclass
class Revised:
    """A revision worked out: the new graph (state kept, moves applied), the
    milestones to insert, to update (definition) and the state moves."""

    graph: WorkGraph
    added: list[Milestone] = field(default_factory=list)
    edits: list[MilestoneEdit] = field(default_factory=list)
    removed: list[Milestone] = field(default_factory=list)
    moves: list[Change] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def definition(self, name: str) -> Milestone:
        return self.graph.get(name)


def _value(m: Milestone, name: str) -> Any:
    v = getattr(m, name)
    if name == "gate":
        from milepost.graph.plan import gate_entry

        return gate_entry(m)  # as a plan file writes it
    return list(v) if isinstance(v, list) else v


def _edit(old: Milestone, new: Milestone) -> MilestoneEdit | None:
    fields = [
        FieldChange(field=f, before=_value(old, f), after=_value(new, f))
        for f in DEFINITION
        if _value(old, f) != _value(new, f)
    ]
    if not fields:
        return None
    changed = {f.field for f in fields}
    deps_moved = "deps" in changed and set(old.deps) != set(new.deps)
    return MilestoneEdit(name=old.name, fields=fields, reprove=bool(changed & (REPROVE - {"deps"})) or deps_moved)


def revise(old: WorkGraph, new: Sequence[Milestone], leases: Mapping[str, str | None] | None = None) -> Revised:
    """The revision of ``old`` to the plan's milestones ``new`` (validated
    whole, ids in file order): matched by name. ``leases``: who runs each
    in-progress milestone's attempt, to name it in a refusal."""
    leases = leases or {}
    names = {m.name for m in new}
    removed = [m for m in old if m.name not in names]
    next_id = old.max_id
    merged: list[Milestone] = []
    added: list[Milestone] = []
    edits: list[MilestoneEdit] = []
    for m in new:
        if m.name in old:
            before = old.get(m.name)
            edit = _edit(before, m)
            if edit is None:
                merged.append(before)
                continue
            edits.append(edit)
            merged.append(before.model_copy(update={f: getattr(m, f) for f in DEFINITION}))
        else:
            next_id += 1
            fresh = m.model_copy(update={"id": next_id})
            added.append(fresh)
            merged.append(fresh)
    graph = WorkGraph(merged, validate=False)  # the plan was validated whole; ids of kept ones stay
    out = Revised(graph, added, edits, removed)
    out.problems = _running(old, removed, edits, leases)
    why = {e.name: [f.field for f in e.fields if f.field in REPROVE] for e in edits if e.reprove}
    out.moves = _reprove(graph, why, out.problems, leases)
    return out


def _attempt(m: Milestone, leases: Mapping[str, str | None]) -> str:
    return running_attempt(m, leases.get(m.name))


def running_problems(old: WorkGraph, new: Sequence[Milestone], leases: Mapping[str, str | None]) -> list[str]:
    """What :func:`revise` would refuse of ``new`` for the running attempts
    of ``old`` (removed, changed, or reopened under them), for a plan whose
    milestones are not sound as a set (an unknown dep, a cycle: no graph can
    be made of them), so that one refusal names every problem of a revision.
    A reopen follows the new plan's deps that name milestones it has."""
    names = {m.name for m in new}
    removed = [m for m in old if m.name not in names]
    edits = [e for m in new if m.name in old and (e := _edit(old.get(m.name), m)) is not None]
    problems = _running(old, removed, edits, leases)
    below: dict[str, list[str]] = {}
    for m in new:
        for d in m.deps:
            below.setdefault(d, []).append(m.name)
    for e in edits:
        if not e.reprove or old.get(e.name).status is not S.DONE:
            continue
        seen: set[str] = set()
        todo = list(below.get(e.name, ()))
        while todo:  # (the deps may form a cycle: each milestone once)
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += below.get(n, ())
        busy = [n for n in sorted(seen, key=lambda n: old.get(n).id if n in old else 0) if n in old]
        problems += [_reopens(e.name, old.get(n), leases) for n in busy if old.get(n).status is S.IN_PROGRESS]
    return list(dict.fromkeys(problems))  # (a name written twice in the plan is named once)


def _reopens(name: str, busy: Milestone, leases: Mapping[str, str | None]) -> str:
    return f"cannot re-prove {name!r}: it would reopen {_attempt(busy, leases)}; wait until it ends, then apply again"


def _running(
    old: WorkGraph, removed: Iterable[Milestone], edits: Iterable[MilestoneEdit], leases: Mapping[str, str | None]
) -> list[str]:
    out = [
        f"cannot remove {_attempt(m, leases)}: wait until it ends (or stop its drive), then apply again"
        for m in removed
        if m.status is S.IN_PROGRESS
    ]
    for e in edits:
        m = old.get(e.name)
        if m.status is S.IN_PROGRESS:
            what = ", ".join(f.field for f in e.fields)
            out.append(f"cannot change {what} of {_attempt(m, leases)}: wait until it ends, then apply again")
    return out


def _reprove(
    g: WorkGraph, fields: Mapping[str, list[str]], problems: list[str], leases: Mapping[str, str | None]
) -> list[Change]:
    """Move each milestone to be proven again (by id), and the done ones built on a reopened one."""
    moves: list[Change] = []
    for name in sorted(fields, key=lambda n: g.get(n).id):
        m = g.get(name)
        why = "the plan changed its " + ", ".join(fields[name])
        if m.status is S.DONE:
            busy = [n for n in g.descendants(name) if g.get(n).status is S.IN_PROGRESS]
            problems += [_reopens(name, g.get(n), leases) for n in busy]
            if busy:
                continue
            change = steps.act(m, Action.REOPEN, reason=f"{why}: proven again")
            g.put(change.after)
            moves.append(change)
            moves += g.reopen_dependents(name, why)
        elif m.status in (S.NEEDS_FIX, S.STUCK) and m.attempts:
            change = steps.act(m, Action.RESET, reason=f"{why}: a fresh budget")
            g.put(change.after)
            moves.append(change)
    return moves


def refuse(problems: Sequence[str], item: int) -> TransitionError:
    """Every problem of a revision in one refusal (exit 2)."""
    return TransitionError(
        f"work item {item}: revision refused, nothing changed: " + "; ".join(problems),
        item=item,
        problems=list(problems),
    )
