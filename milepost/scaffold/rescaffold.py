"""A package scaffolded again for the work item it planned (``plan scaffold
... --item N``): the new scaffold merged with the item's plan as it is now,
so that what the user changed by hand stays (docs/scaffold.md, "Scaffold
again").

The rule, field by field of each milestone (and of the item: objective,
plan_status, defaults, doer), three-way against the plan the scaffold last
wrote for the item (its *base*, kept when a scaffold is applied):

- the item's value equals the base's (nobody changed it): the new scaffold's;
- else (the user edited it): the item's.

A milestone the new scaffold writes and the item lacks is added; one the
base had and the new scaffold does not (its module was deleted) is removed
(its runs stay readable as work refs); one the item has and neither wrote
(the user added it) stays. Without a base (the item was made by ``plan
apply`` of a scaffold's file, or by hand) the item's values are taken as the
user's, except ``deps`` and ``inputs``, which follow the import graph, and
every milestone of the item the scaffold does not write stays (said in a
note: remove it by hand if its module is gone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Merged", "merge"]

# What the import graph decides of a milestone: the scaffold's, when no base says otherwise.
DERIVED = ("deps", "inputs")
ITEM_FIELDS = ("objective", "plan_status", "defaults", "doer")
_MISSING = object()


@dataclass
class Merged:
    """The merged plan, and what the merge kept of the user's and why."""

    plan: dict[str, Any]
    kept_edits: dict[str, list[str]] = field(default_factory=dict)  # milestone -> fields kept as the user left them
    kept_milestones: list[str] = field(default_factory=list)  # milestones the scaffold does not write, kept
    notes: list[str] = field(default_factory=list)


def _pick(key: str, base: dict[str, Any] | None, cur: dict[str, Any], new: dict[str, Any]) -> Any:
    """One field: the new scaffold's unless the user changed it (see the module's docstring)."""
    c, n = cur.get(key, _MISSING), new.get(key, _MISSING)
    if base is not None:
        return n if c == base.get(key, _MISSING) else c
    return n if key in DERIVED else c


def _entry(base: dict[str, Any] | None, cur: dict[str, Any], new: dict[str, Any], out: Merged) -> dict[str, Any]:
    name = new["name"]
    entry: dict[str, Any] = {"name": name}
    keys = [k for k in dict.fromkeys([*new, *cur, *(base or {})]) if k != "name"]
    for key in keys:
        value = _pick(key, base, cur, new)
        if value is not _MISSING:
            entry[key] = value
        if value != new.get(key, _MISSING):
            out.kept_edits.setdefault(name, []).append(key)
    return entry


def merge(base: dict[str, Any] | None, current: dict[str, Any], new: dict[str, Any]) -> Merged:
    """``new`` (a scaffold's plan) merged with ``current`` (the item's plan, as
    ``plan export`` writes it), against ``base`` (what the scaffold last wrote
    for the item, or None)."""
    out = Merged(plan={})
    for key in ITEM_FIELDS:
        value = _pick(key, base, current, new) if base is not None else current.get(key, _MISSING)
        if value is _MISSING:
            value = new.get(key, _MISSING)
        if value is not _MISSING:
            out.plan[key] = value
    cur = {m["name"]: m for m in current.get("milestones", [])}
    was = {m["name"]: m for m in base.get("milestones", [])} if base is not None else {}
    milestones = []
    written = set()
    for n in new.get("milestones", []):
        written.add(n["name"])
        c = cur.get(n["name"])
        milestones.append(dict(n) if c is None else _entry(was.get(n["name"]), c, n, out))
    for name, c in cur.items():
        if name in written or (base is not None and name in was):
            continue  # written again, or its module is gone: removed
        milestones.append(c)
        out.kept_milestones.append(name)
    if base is None and out.kept_milestones:
        out.notes.append(
            f"kept {', '.join(out.kept_milestones)}: the item has them, this scaffold does not write them, and no"
            " earlier scaffold of the item is recorded; remove them by hand (milepost remove NAME) if their modules"
            " are gone"
        )
    out.plan["milestones"] = milestones
    return out
