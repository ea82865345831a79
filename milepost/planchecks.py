"""The problems of a plan across its milestones, for :mod:`milepost.planfile`:
each milestone on its own (name, gate commands), names and deps across
milestones, and cycles on the edges that are known, each at its line.

Run on a validated plan (:func:`plan_problems`) and on a plan whose fields
have errors (:func:`raw_problems`, over the raw document's sound parts), so
that one ``plan apply`` reports field errors, unknown deps, duplicate names
and cycles together instead of in rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from milepost.errors import InputError
from milepost.graph.plan import Plan, PlanDefaults, PlanMilestone
from milepost.plandoc import Loc, Problem

__all__ = ["at_line", "cycle_problems", "plan_problems", "raw_problems"]


def at_line(lines: dict[Loc, int], path: Loc) -> int | None:
    """The line of ``path``, or of the nearest enclosing thing that has one."""
    for cut in range(len(path), -1, -1):
        line = lines.get(path[:cut])
        if line is not None:
            return line
    return None


def _field(*path: str | int | None) -> str | None:
    return None if None in path else ".".join(str(p) for p in path)


def _alone(
    i: int, pm: PlanMilestone, defaults: PlanDefaults, lines: dict[Loc, int]
) -> tuple[Problem, InputError] | None:
    """The problem of milestone ``i`` on its own (its name, its gate's
    command names, inputs without a gate), or None."""
    alone = Plan(objective="-", defaults=defaults, milestones=[pm.model_copy(update={"deps": []})])
    try:
        alone.to_milestones()
    except InputError as e:
        bad = e.details.get("name")
        commands = pm.gate if isinstance(pm.gate, list) else []
        j = next((j for j, c in enumerate(commands) if bad is not None and c.name == bad), None)
        if bad == pm.name:
            path: tuple[str | int, ...] = ("name",)
        elif j is not None:
            path = ("gate", j, "name")
        else:
            path = ("gate",) if "gate command" in e.message else ()
        full = ("milestones", i, *path)
        return Problem(at_line(lines, full), e.message, _field(*full), pm.name), e
    return None


def _across(
    entries: Sequence[tuple[int, str, list[str]]], lines: dict[Loc, int], *, names_checked: set[int]
) -> list[tuple[Problem, InputError]]:
    """Duplicate names, self-deps and unknown deps of ``(index, name, deps)``
    entries; invalid names only of entries not in ``names_checked``."""
    from milepost.graph.errors import InvalidNameError
    from milepost.graph.models import Milestone
    from milepost.graph.validate import milestone_problems

    deps_of = {i: deps for i, _, deps in entries}
    light = [Milestone(id=i + 1, name=name, deps=list(dict.fromkeys(deps))) for i, name, deps in entries]
    out: list[tuple[Problem, InputError]] = []
    for m, problem in milestone_problems(light):
        i = m.id - 1
        path: tuple[str | int, ...] = ("milestones", i, "name")
        if isinstance(problem, InvalidNameError):
            if i in names_checked:
                continue  # reported with the milestone alone
        elif "dep" in problem.details or "itself" in problem.message:
            path = ("milestones", i, "deps", deps_of[i].index(problem.details.get("dep", m.name)))
        out.append((Problem(at_line(lines, path), problem.message, _field(*path), m.name), problem))
    return out


def cycle_problems(
    entries: Sequence[tuple[str | None, Sequence[str]]], lines: dict[Loc, int]
) -> list[tuple[Problem, InputError]]:
    """One cycle per knot of milestones that need each other, on the edges
    between known names (a name's first entry), as ``a -> b -> a`` starting
    at the lowest entry, at the line of its dep on the next."""
    import networkx as nx

    from milepost.graph.errors import CycleError

    first: dict[str, int] = {}
    for i, (name, _) in enumerate(entries):
        if name is not None:
            first.setdefault(name, i)
    needs: nx.DiGraph[str] = nx.DiGraph()
    for name, i in first.items():
        needs.add_edges_from((name, d) for d in entries[i][1] if d in first and d != name)
    out: list[tuple[Problem, InputError]] = []
    knots = [k for k in nx.strongly_connected_components(needs) if len(k) > 1]
    for knot in sorted(knots, key=lambda k: min(first[n] for n in k)):
        nodes = [u for u, _ in nx.find_cycle(needs.subgraph(knot))]
        start = min(range(len(nodes)), key=lambda j: first[nodes[j]])
        nodes = nodes[start:] + nodes[:start]
        path = " -> ".join([*nodes, nodes[0]])
        i = first[nodes[0]]
        loc = ("milestones", i, "deps", list(entries[i][1]).index(nodes[1 % len(nodes)]))
        e = CycleError(
            f"milestone deps form a cycle: {path} (each needs the next)", cycle=[*nodes, nodes[0]], milestone=nodes[0]
        )
        out.append((Problem(at_line(lines, loc), e.message, _field(*loc), nodes[0]), e))
    return out


def plan_problems(plan: Plan, lines: dict[Loc, int]) -> list[tuple[Problem, InputError]]:
    """Every problem of a plan whose fields are sound: each milestone on its
    own (name, gate commands, ...), then names and deps across milestones,
    then cycles among the known names."""
    out = [p for i, pm in enumerate(plan.milestones) if (p := _alone(i, pm, plan.defaults, lines)) is not None]
    entries = [(i, pm.name, pm.deps) for i, pm in enumerate(plan.milestones)]
    out += _across(entries, lines, names_checked={e[0] for e in entries})
    out += cycle_problems([(pm.name, pm.deps) for pm in plan.milestones], lines)
    return out


def raw_problems(data: Any, lines: dict[Loc, int]) -> list[Problem]:
    """The problems beyond field errors of a plan document whose fields have
    errors: each sound milestone entry on its own, then names, deps and
    cycles over every entry with a text name (its text deps)."""
    milestones = data.get("milestones") if isinstance(data, dict) else None
    if not isinstance(milestones, list):
        return []
    try:
        defaults = PlanDefaults.model_validate(data.get("defaults") or {})
    except ValidationError:
        defaults = PlanDefaults()
    out: list[tuple[Problem, InputError]] = []
    entries: list[tuple[int, str, list[str]]] = []
    sound: set[int] = set()
    for i, entry in enumerate(milestones):
        try:
            pm = PlanMilestone.model_validate(entry)
        except ValidationError:
            pass
        else:
            sound.add(i)
            if (p := _alone(i, pm, defaults, lines)) is not None:
                out.append(p)
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str):
            deps = entry.get("deps")
            entries.append((i, name, [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else []))
    out += _across(entries, lines, names_checked=sound)
    by_index: list[tuple[str | None, Sequence[str]]] = [(None, [])] * len(milestones)
    for i, name, deps in entries:
        by_index[i] = (name, deps)
    out += cycle_problems(by_index, lines)
    return [p for p, _ in out]
