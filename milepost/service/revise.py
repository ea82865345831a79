"""A living plan: an existing work item refined in place by a whole plan
(``plan apply FILE --item N``) or by one milestone's edit (``edit NAME``),
as one :func:`~milepost.service._tx.write` guarded by the item's revision.

What changes and what is proven again is worked out by
:func:`milepost.graph.revise.revise` (no I/O); here it is written: new
milestones inserted, changed definitions and deps rewritten, the state moves
saved, removed milestones deleted after their runs are kept as work refs
(their logs stay readable), the item's own fields set, and one ``revise``
event naming what changed. A dry run, or a plan equal to the item, writes
nothing (no revision, no event).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, delete, func, insert, select, update

from milepost._schema import DO_RUNS, utcnow
from milepost.errors import InputError, InvalidValueError, MilepostError, StaleRevisionError
from milepost.graph.dag import WorkGraph
from milepost.graph.models import DoerSettings, ItemDefaults, Milestone
from milepost.graph.plan import Plan, plan_from_item
from milepost.graph.revise import FieldChange, PlanRevision, Revised, refuse, revise, running_problems
from milepost.graph.status import MilestoneStatus, PlanStatus
from milepost.graph.words import count
from milepost.retry import retried
from milepost.service import _rows as rows
from milepost.service._find import head
from milepost.service._rows import DEPS, ITEMS, MILESTONES, REFS, RUNS
from milepost.service._tx import Context, ItemEvent, Tx, change_result, write
from milepost.service.items import graph_of, insert_milestones, read, resolve

__all__ = ["edit_milestone", "revise_item", "revise_text"]


def revise_item(
    ctx: Context, plan: Plan, *, item: int | None = None, expect_revision: int | None = None, dry_run: bool = False
) -> PlanRevision:
    """Refine ``item`` to ``plan`` (validated whole): one transaction, or
    nothing written (``dry_run``, no change, or a refusal naming every problem)."""
    new = plan.take_milestones()
    from milepost.service.proofs import check_module_entries

    check_module_entries(ctx.store.root, new)
    item_id = resolve(ctx, item)

    def fn(tx: Tx) -> PlanRevision:
        tx.check_open()
        loaded = tx.graph()
        leases = _leases(tx.conn, tx.id)
        out = revise(loaded.graph, new, leases)
        if out.problems:
            raise refuse(out.problems, tx.id)
        answer = _answer(tx, out, _item_fields(tx, plan), dry_run, loaded.pks)
        if dry_run or not answer.changed_anything:
            return answer
        _write(tx, out, answer, dict(loaded.pks))
        answer.revision = tx.next_revision
        tx.emit(ItemEvent.REVISE, reason=answer.summary())
        # The graph changed shape: the one kept between transactions is read again.
        tx.forget_graph()
        return answer

    return write(ctx, item_id, fn, expect_revision)


def revise_text(
    ctx: Context,
    text: str,
    source: str,
    *,
    item: int | None = None,
    expect_revision: int | None = None,
    dry_run: bool = False,
) -> PlanRevision:
    """:func:`revise_item` with the plan in ``text`` (YAML or JSON; ``source``
    names it in errors): ``plan apply FILE --item N`` and the MCP ``revise``.
    A plan that is not sound on its own (an unknown dep, a cycle) is refused
    with what it would do to running attempts in the same error: one refusal
    names every problem, not one kind a try."""
    from milepost.planfile import parse_plan

    try:
        plan = parse_plan(text, source)
    except InputError as e:
        raise _with_running(ctx, item, text, source, e) from None
    return revise_item(ctx, plan, item=item, expect_revision=expect_revision, dry_run=dry_run)


def _with_running(ctx: Context, item: int | None, text: str, source: str, error: InputError) -> InputError:
    """``error`` (a plan refused on its own) with the running attempts of
    ``item`` that the plan would remove or change added; ``error`` as it was
    when there are none, when the plan's fields are not sound (what it would
    change is not known) or when the item cannot be read (its own error first)."""
    from milepost.planfile import unchecked_plan

    plan = unchecked_plan(text, source)
    try:
        new = plan.each_milestone() if plan is not None else None
    except (InputError, ValidationError):
        new = None
    if not new:
        return error
    try:
        old, leases = _running_now(ctx, resolve(ctx, item))
    except MilepostError:
        return error
    problems = running_problems(old, new, leases)
    if not problems:
        return error
    details = dict(error.details)
    shown = details.get("problems")
    if isinstance(shown, list):
        details["problems"] = shown + [{"line": None, "milestone": None, "field": None, "message": p} for p in problems]
    return type(error)(f"{error.message}; {'; '.join(problems)}", **details)


@retried
def _running_now(ctx: Context, item_id: int) -> tuple[WorkGraph, dict[str, str | None]]:
    """The item's graph and who runs each of its running attempts, read together."""
    with ctx.store.read() as conn:
        graph = graph_of(conn, head(conn, item_id), ctx.cache).graph
        return graph, _leases(conn, item_id)


def edit_milestone(
    ctx: Context,
    name: str,
    changes: dict[str, Any],
    *,
    item: int | None = None,
    expect_revision: int | None = None,
    dry_run: bool = False,
) -> PlanRevision:
    """``edit NAME``: the item's plan with one milestone's fields replaced
    (``changes``, as a plan file spells them; None drops a field), applied as
    a revision (:func:`revise_item`) at the revision it was read at."""
    item_id = resolve(ctx, item)
    for _ in range(EDIT_TRIES - 1 if expect_revision is None else 0):
        try:
            return _edit_once(ctx, item_id, name, changes, expect_revision, dry_run)
        except StaleRevisionError:
            continue  # another write came between the read and this edit: read again
    return _edit_once(ctx, item_id, name, changes, expect_revision, dry_run)


# Reads of the item an edit makes when other writes keep coming between its read and its write.
EDIT_TRIES = 5


def _edit_once(
    ctx: Context, item_id: int, name: str, changes: dict[str, Any], expect_revision: int | None, dry_run: bool
) -> PlanRevision:
    it, g = read(ctx, item_id)
    g.get(name)  # an unknown milestone is refused, naming the closest
    data = plan_from_item(it)
    for entry in data["milestones"]:
        if entry["name"] == name:
            for key, value in changes.items():
                if value is None:
                    entry.pop(key, None)
                elif key == "gate" and isinstance(value, str) and "{file}" in value:
                    entry[key] = _units_run(name, entry.get("gate"), value)
                else:
                    entry[key] = value
    plan = Plan.model_validate(data)
    plan.check()
    at = it.revision if expect_revision is None else expect_revision
    return revise_item(ctx, plan, item=item_id, expect_revision=at, dry_run=dry_run)


def _units_run(name: str, gate: Any, run: str) -> list[dict[str, Any]]:
    """A gate of units (a command run once per file of its ``each:``, as a
    scaffold writes it) given a new command with ``{file}``: the same units
    run by the new command (a tightened ``pytest -W error {file}`` keeps its
    files and stays units). Refused when there is no such command, or more
    than one to choose from."""
    units = [c for c in gate if isinstance(c, dict) and c.get("each")] if isinstance(gate, list) else []
    if len(units) != 1 or len(gate) != 1:
        found = "no command with each: files" if not units else f"{len(gate)} commands"
        raise InvalidValueError(
            f"the gate {run!r} names {{file}}, filled from a gate command's each: files, and milestone {name!r}'s"
            f" gate has {found}: give the command without {{file}} (with its files), or change the gate in a plan"
            " file (`plan export --item N -o p.yaml`, edit, `plan apply p.yaml --item N`)",
            milestone=name,
        )
    return [{**units[0], "run": run}]


def _leases(conn: Connection, item_id: int) -> dict[str, str | None]:
    """Who runs each in-progress milestone's attempt (a drive's lease owner)."""
    query = select(MILESTONES.c.name, MILESTONES.c.lease_owner).where(
        MILESTONES.c.item_id == item_id, MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value
    )
    return {n: o for n, o in conn.execute(query)}


def _item_fields(tx: Tx, plan: Plan) -> list[FieldChange]:
    row = tx.row
    before: dict[str, Any] = {
        "objective": row.objective,
        "plan_status": row.plan_status,
        "defaults": ItemDefaults.model_validate(row.defaults or {}).model_dump(mode="json"),
        "doer": DoerSettings.model_validate(row.doer or {}).model_dump(mode="json"),
    }
    doer = DoerSettings.model_validate(plan.doer.model_dump()) if plan.doer is not None else DoerSettings()
    after: dict[str, Any] = {
        "objective": plan.objective.strip(),
        "plan_status": plan.plan_status.value,
        "defaults": ItemDefaults.model_validate(plan.defaults.model_dump()).model_dump(mode="json"),
        "doer": doer.model_dump(mode="json"),
    }
    return [FieldChange(field=k, before=before[k], after=after[k]) for k in before if before[k] != after[k]]


def _answer(tx: Tx, out: Revised, item_fields: list[FieldChange], dry_run: bool, pks: dict[str, int]) -> PlanRevision:
    stale = {
        c.after.name: f"{c.before.status.value} -> {c.after.status.value}: {c.reason}"
        for c in out.moves
        if c.before.status is not c.after.status or c.after.attempts != c.before.attempts
    }
    kept = _run_counts(tx, {m.name: pks[m.name] for m in out.removed}) if out.removed else {}
    answer = PlanRevision(
        item=tx.id,
        revision=tx.revision,
        dry_run=dry_run,
        added=[m.name for m in out.added],
        removed=[m.name for m in out.removed],
        changed=out.edits,
        item_fields=item_fields,
        stale=stale,
        kept_evidence={n: k for n, k in kept.items() if k},
    )
    answer.changed_anything = bool(answer.added or answer.removed or answer.changed or answer.item_fields)
    return answer


def _run_counts(tx: Tx, pks: dict[str, int]) -> dict[str, int]:
    """How many gate and do runs each milestone (by its row's key) has."""
    counts = dict.fromkeys(pks, 0)
    by_pk = {pk: n for n, pk in pks.items()}
    keys = list(by_pk)
    for table in (RUNS, DO_RUNS):
        for i in range(0, len(keys), 1000):  # (a statement's bound values are limited: SQLite's to 32,766)
            query = select(table.c.milestone_id, func.count()).where(table.c.milestone_id.in_(keys[i : i + 1000]))
            for mid, n in tx.conn.execute(query.group_by(table.c.milestone_id)):
                counts[by_pk[mid]] += int(n)
    return counts


def _write(tx: Tx, out: Revised, answer: PlanRevision, pks: dict[str, int]) -> None:
    """Write a worked-out revision (see the module's docstring); ``pks``: the rows' keys by name."""
    now = utcnow()
    conn = tx.conn
    pks = insert_milestones(conn, tx.id, out.added, now, pks)
    for m in out.added:
        tx.emit(ItemEvent.ADD, m.name, after=m.status.value, reason="plan revision")
    for e in out.edits:
        m = out.graph.get(e.name)
        values = rows.plain(m.model_dump(include={f.field for f in e.fields} - {"deps"}))
        if values:
            conn.execute(update(MILESTONES).where(MILESTONES.c.id == pks[e.name]).values(updated_at=now, **values))
        if any(f.field == "deps" for f in e.fields):
            conn.execute(delete(DEPS).where(DEPS.c.milestone_id == pks[e.name]))
            dep_rows = [(pks[e.name], pks[d], tx.id, i) for i, d in enumerate(m.deps)]
            if dep_rows:
                rows.ADD_DEPS.run_many(conn, rows.DEP_FIELDS, dep_rows)
        tx.emit(ItemEvent.EDIT, e.name, reason=", ".join(f.field for f in e.fields))
    for c in out.moves:
        rows.SAVE_STATE.run(conn, pk=pks[c.after.name], now=now, **rows.milestone_state(c.after))
        r = change_result(c)
        tx.emit(c.action, r.milestone, r.from_status.value, r.to_status.value, c.reason)
    for m in out.removed:
        kept = keep_evidence(tx, m, pks[m.name])
        conn.execute(delete(MILESTONES).where(MILESTONES.c.id == pks[m.name]))
        why = f"plan revision; {count(kept, 'run')} kept as work refs" if kept else "plan revision"
        tx.emit(ItemEvent.REMOVE, m.name, before=m.status.value, reason=why)
    _write_item(tx, answer)


def keep_evidence(tx: Tx, m: Milestone, pk: int) -> int:
    """A milestone about to be removed: its runs stay readable when its rows
    are gone. Every gate run is a work ref already (its log, attempt,
    outcome); each do run becomes one here (its log, outcome and commits).
    Returns how many runs the work refs keep."""
    gate_runs = tx.conn.execute(select(func.count()).where(RUNS.c.milestone_id == pk)).scalar() or 0
    found = tx.conn.execute(select(DO_RUNS).where(DO_RUNS.c.milestone_id == pk).order_by(DO_RUNS.c.attempt)).all()
    refs = []
    for r in found:
        commits = f"; from {r.base_commit} to {r.result_commit}" if r.result_commit else ""
        why = f"{m.name} do attempt {r.attempt}: {r.outcome} ({r.reason}){commits}; the milestone was removed"
        refs.append({"item_id": tx.id, "kind": "do_run", "ref": r.log_path or "", "reason": why, "at": r.finished_at})
    if refs:
        tx.conn.execute(insert(REFS), refs)
    return int(gate_runs) + len(refs)


def _write_item(tx: Tx, answer: PlanRevision) -> None:
    values: dict[str, Any] = {}
    for f in answer.item_fields:
        values[f.field] = None if f.field == "doer" and f.after == DoerSettings().model_dump(mode="json") else f.after
    if "plan_status" in values:
        values["plan_status"] = PlanStatus(values["plan_status"]).value
    if values:
        tx.conn.execute(update(ITEMS).where(ITEMS.c.id == tx.id).values(**values))
