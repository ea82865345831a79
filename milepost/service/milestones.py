"""Milestones: add and remove them, the user actions (start, needs_fix,
reset, lock, unlock, confirm), review verdicts, and the reads (next, the
graph, views, gate runs, plans).

A transition reads the milestone's row and its deps' statuses, writes the
one row, and logs one event (see :mod:`milepost.service._tx`); only
``needs_fix`` of a done milestone reads the whole graph, because it reopens
every done milestone built on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select, update

from milepost._schema import utcnow
from milepost.errors import InputError, InvalidValueError, NotFoundError, TransitionError
from milepost.graph import steps
from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.models import DoerSettings, GateCommand, ItemDefaults, Milestone, WorkItem, check_text
from milepost.graph.status import Action, MilestoneStatus
from milepost.graph.steps import nothing_ready_reason
from milepost.graph.validate import check_removable
from milepost.graph.words import count
from milepost.results import ActionResult, DryRun, GateRun, MilestoneView, NextResult
from milepost.retry import retried
from milepost.service._find import milestone_pk, of_attempt
from milepost.service._rows import DEPS, EVENTS, MILESTONES, RUNS
from milepost.service._rows import gate_run as gate_run_of
from milepost.service._tx import Context, ItemEvent, Tx, write
from milepost.service.items import create_item, head, insert_milestones, read, read_checked, resolve

if TYPE_CHECKING:
    from milepost.graph.plan import Plan

__all__ = [
    "act",
    "add_milestone",
    "apply_plan",
    "export_plan",
    "export_plan_at",
    "milestone_views",
    "next_milestone",
    "plan_order",
    "remove_milestone",
    "review",
    "run",
    "runs",
]


def add_milestone(
    ctx: Context,
    name: str,
    deps: list[str] | None = None,
    *,
    acceptance: str = "",
    gate: str | list[GateCommand] | None = None,
    retries: int | None = None,
    timeout: float | None = None,
    review: bool = False,
    fix: str | None = None,
    retry_delay: float | None = None,
    hypothesis: bool = False,
    inputs: list[str] | None = None,
    cache: bool = True,
    flaky: bool = False,
    do: tuple[str | None, float | None, float | None, str | None] = (None, None, None, None),
    item: int | None = None,
    expect_revision: int | None = None,
) -> ActionResult:
    """Add a milestone to an open item (at any plan status). Reads only the rows it names (itself
    and its deps) and the highest id, so adding one by one stays O(1) each.
    ``inputs`` None takes the item's default inputs (for a milestone with a gate)."""
    commands = [GateCommand(name="gate", run=gate)] if isinstance(gate, str) else list(gate or [])
    if isinstance(gate, str) and not gate.strip():
        raise InvalidValueError(f"empty gate for milestone {name!r}: give a shell command, or no --gate")
    if isinstance(acceptance, str):
        check_text(acceptance, f"the acceptance text of milestone {name!r}")

    def fn(tx: Tx) -> ActionResult:
        tx.check_open()  # at any plan status: a structure edit is a revision in the history
        d = ItemDefaults.model_validate(tx.row.defaults or {})
        wanted = {name, *(deps or [])}
        found = {
            r.name: (r.id, r.seq)
            for r in tx.conn.execute(
                select(MILESTONES.c.name, MILESTONES.c.id, MILESTONES.c.seq).where(
                    MILESTONES.c.item_id == tx.id, MILESTONES.c.name.in_(wanted)
                )
            )
        }
        last = tx.conn.execute(select(func.max(MILESTONES.c.seq)).where(MILESTONES.c.item_id == tx.id)).scalar()

        def known() -> list[str]:
            return list(
                tx.conn.execute(
                    select(MILESTONES.c.name).where(MILESTONES.c.item_id == tx.id).order_by(MILESTONES.c.seq)
                ).scalars()
            )

        m = steps.new_milestone(
            (last or 0) + 1,
            name,
            deps or [],
            lookup=lambda n: found[n][1] if n in found else None,
            known=known,
            acceptance=acceptance,
            gate=commands,
            retries=d.retries if retries is None else retries,
            timeout=d.timeout if timeout is None else timeout,
            review=review,
            fix=d.fix if fix is None else fix,
            retry_delay=d.retry_delay if retry_delay is None else retry_delay,
            hypothesis=hypothesis,
            inputs=(d.inputs if commands else []) if inputs is None else inputs,
            cache=cache,
            flaky=flaky,
            do=do[0],
            do_timeout=do[1],
            do_budget_usd=do[2],
            do_usage=do[3],
        )
        if m.inputs:
            from milepost.service.proofs import check_module_entries

            check_module_entries(ctx.store.root, [m])
        pks = insert_milestones(tx.conn, tx.id, [m], utcnow(), {n: pk for n, (pk, _) in found.items()})
        held = tx.at_hand()
        if held is not None:  # keep the graph at hand in step
            held.graph.insert(m)
            held.pks[m.name] = pks[m.name]
        tx.emit(ItemEvent.ADD, name, after=m.status.value)
        return ActionResult(item=tx.id, revision=tx.next_revision, milestone=m)

    return write(ctx, resolve(ctx, item), fn, expect_revision)


def remove_milestone(
    ctx: Context, name: str, *, item: int | None = None, expect_revision: int | None = None
) -> ActionResult:
    def fn(tx: Tx) -> ActionResult:
        tx.check_open()
        pk, m = tx.find(name)
        dependents = (
            tx.conn.execute(
                select(MILESTONES.c.name)
                .join(DEPS, DEPS.c.milestone_id == MILESTONES.c.id)
                .where(DEPS.c.dep_id == pk)
                .order_by(MILESTONES.c.seq)
            )
            .scalars()
            .all()
        )
        owner = tx.conn.execute(select(MILESTONES.c.lease_owner).where(MILESTONES.c.id == pk)).scalar()
        check_removable(m, dependents, owner)
        from milepost.service.revise import keep_evidence

        kept = keep_evidence(tx, m, pk)  # its runs stay readable as work refs
        tx.conn.execute(delete(MILESTONES).where(MILESTONES.c.id == pk))
        held = tx.at_hand()
        if held is not None:
            held.graph.remove(name)
            del held.pks[name]
        tx.emit(
            ItemEvent.REMOVE,
            name,
            before=m.status.value,
            reason=f"{count(kept, 'run')} kept as work refs" if kept else None,
        )
        return ActionResult(item=tx.id, revision=tx.next_revision, milestone=m)

    return write(ctx, resolve(ctx, item), fn, expect_revision)


def act(
    ctx: Context,
    name: str,
    action: Action,
    *,
    reason: str | None = None,
    item: int | None = None,
    expect_revision: int | None = None,
) -> ActionResult:
    """Apply one user action (start, needs_fix, reset, lock, unlock, confirm)."""
    if action is Action.DONE:
        raise InputError("use Service.done() for done: it runs the gate")
    if reason is not None:
        check_text(reason, "the reason")

    def fn(tx: Tx) -> ActionResult:
        tx.check_open()
        pk, m = tx.find(name)
        if action is Action.NEEDS_FIX and m.status is MilestoneStatus.DONE:
            # Reopens every done milestone built on it: the one write that needs the whole graph.
            changes = tx.graph().graph.apply(name, action, reason=reason)
            out = tx.save(pk, changes, applied=True)
        else:
            try:
                change = steps.act(m, action, undone_deps=tx.undone_deps(pk, m), reason=reason)
            except TransitionError as e:
                if action is Action.START:
                    raise held_by(tx, pk, m, e) from None
                raise
            changes = [change]
            out = tx.save(pk, changes)
            if action is Action.RESET:  # a reset milestone's next doer starts a new agent session
                tx.conn.execute(update(MILESTONES).where(MILESTONES.c.id == pk).values(doer_session=None))
        return ActionResult(item=tx.id, revision=tx.next_revision, milestone=changes[0].after, changes=out)

    return write(ctx, resolve(ctx, item), fn, expect_revision)


def held_by(tx: Tx, pk: int, m: Milestone, e: TransitionError) -> TransitionError:
    """A refused ``start`` of a milestone someone already works on says who
    (the agent that started it, when, and the driver running its gate)."""
    if m.status is not MilestoneStatus.IN_PROGRESS:
        return e
    started = tx.conn.execute(
        select(EVENTS.c.agent, EVENTS.c.at, EVENTS.c.revision)
        .where(EVENTS.c.item_id == tx.id, EVENTS.c.milestone == m.name, EVENTS.c.action == Action.START.value)
        .order_by(EVENTS.c.id.desc())
        .limit(1)
    ).first()
    lease = tx.conn.execute(select(MILESTONES.c.lease_owner).where(MILESTONES.c.id == pk)).scalar()
    who = f"agent {started.agent!r} at {started.at:%H:%M:%S} UTC (revision {started.revision})" if started else ""
    gate = f"; its gate is running ({lease})" if lease else ""
    return TransitionError(
        f"cannot start {m.name!r}: already in progress, started by {who or 'another writer'}{gate};"
        " pick another ready milestone (next), or wait",
        **{**e.details, "held_by": started.agent if started else None, "gate_lease": lease},
    )


def review(
    ctx: Context,
    name: str,
    approve: bool,
    *,
    reason: str | None = None,
    item: int | None = None,
    expect_revision: int | None = None,
) -> ActionResult:
    """``approve``/``reject``: an operator's verdict on a milestone in review."""
    if reason is not None:
        check_text(reason, "the reason")

    def fn(tx: Tx) -> ActionResult:
        tx.check_open()
        pk, m = tx.find(name)
        change = steps.review(m, approve, reason)
        out = tx.save(pk, [change])
        return ActionResult(item=tx.id, revision=tx.next_revision, milestone=change.after, changes=out)

    return write(ctx, resolve(ctx, item), fn, expect_revision)


# -- plans ------------------------------------------------------------------------


def apply_plan(ctx: Context, plan: Plan) -> WorkItem:
    """Create a work item from a plan, validated whole before anything is written."""
    milestones = plan.take_milestones()  # validated whole (once: parse_plan's check, if it read the plan)
    from milepost.service.proofs import check_module_entries

    check_module_entries(ctx.store.root, milestones)
    defaults = ItemDefaults.model_validate(plan.defaults.model_dump())
    doer = DoerSettings.model_validate(plan.doer.model_dump()) if plan.doer is not None else None
    return create_item(
        ctx,
        plan.objective,
        plan_status=plan.plan_status,
        defaults=defaults,
        milestones=milestones,
        validated=True,
        doer=doer,
    )


def export_plan(ctx: Context, item: int | None = None) -> dict[str, Any]:
    return export_plan_at(ctx, item)[0]


def export_plan_at(ctx: Context, item: int | None = None) -> tuple[dict[str, Any], int]:
    """The item as a plan file, and the revision it was read at (one read):
    a change made from it passes that revision as ``expect_revision``."""
    from milepost.graph.plan import plan_from_item

    it = read(ctx, resolve(ctx, item))[0]
    return plan_from_item(it), it.revision


def plan_order(ctx: Context, item: int | None = None, until: str | None = None) -> DryRun:
    """``drive --dry-run``: the order a sequential drive would run the
    milestones in if every gate passed: the stale ones' re-proofs first
    (lowest id), then the ready ones; failed ones waiting for a change of
    their inputs are left out. Nothing is written."""
    from milepost.service import proofs

    item_id = resolve(ctx, item)
    _, g = read(ctx, item_id)
    check = proofs.check(ctx, item_id, g)
    sim = WorkGraph(list(g), validate=False)
    keep = {until, *sim.ancestors(until)} if until is not None else {m.name for m in sim}
    for other in list(sim):
        if other.name not in keep or other.name in check.waiting:
            sim.hold(other.name)
    order = [name for name in g.stale() if name in keep]
    while (nxt := sim.next_ready()) is not None:
        order.append(nxt.name)
        sim.apply(nxt.name, Action.START)
        sim.record_attempt(nxt.name, passed=True)
        if sim.get(nxt.name).awaiting_review:
            sim.review(nxt.name, approve=True)
    return DryRun(
        item=item_id,
        order=order,
        stale={n: check.stale[n] for n in order if n in check.stale},
        waiting={n: why for n, why in check.waiting.items() if n in keep},
        left={m.name: _why_left(m, sim) for m in sim if m.name in keep and _left(m, check.waiting)},
    )


def _left(m: Milestone, waiting: dict[str, str]) -> bool:
    """Not done once every gate the drive would run passed (``m`` as the
    simulation left it), nor held for a change of its inputs."""
    return not m.status.is_done and m.name not in waiting


def _why_left(m: Milestone, sim: WorkGraph) -> str:
    """Why a drive would not run ``m``: the deps it waits for that would not be done, else its status."""
    undone = [d for d in m.deps if not sim.get(d).status.is_done]
    return f"waits for {', '.join(undone)}" if undone else m.status.value


# -- reading ----------------------------------------------------------------------


# ``next`` names at most this many ready milestones (``ready_count`` says when there are more).
READY_SHOWN = 50


@retried
def next_milestone(ctx: Context, item: int | None = None) -> NextResult:
    """The lowest-id ready milestone, or none and why: indexed reads of a
    few rows (never the whole graph), so it costs the same at 20 milestones
    and at 100,000."""
    from milepost.service import _rows as rows

    item_id = resolve(ctx, item)
    with ctx.store.read() as conn:
        found_ready = rows.READY_PENDING.rows(conn, item=item_id, limit=READY_SHOWN + 1)
        found_ready += rows.READY_RETRY.rows(conn, item=item_id, limit=READY_SHOWN + 1)
        ready = [r.name for r in sorted(found_ready, key=lambda r: r.seq)]
        if ready:
            found = rows.ONE_MILESTONE.rows(conn, item=item_id, name=ready[0])
            m = rows.with_deps(found)[0]
            more = len(ready) > READY_SHOWN
            count = f"{READY_SHOWN}+" if more else str(len(ready))
            return NextResult(
                item=item_id,
                milestone=m,
                reason=f"{m.name} is ready (lowest id among {count} ready)",
                ready=ready[:READY_SHOWN],
                more_ready=more,
            )
        head(conn, item_id)  # an unknown item is refused
        counts = rows.COUNTS.rows(conn, item=item_id)[0]
        total, done = int(counts.total or 0), int(counts.done or 0)
        holding = [Milestone.model_validate({**r, "id": r.seq}) for r in rows.HOLDING.rows(conn, item=item_id)]
        reason = nothing_ready_reason(total, done, holding)
        if total and done == total and rows.WITH_INPUTS.rows(conn, item=item_id):
            # Done is the stored status: whether the files its proofs read changed since, next does not read.
            reason += "; next reads no inputs: `milepost list` shows any that are stale (changed since proven)"
    return NextResult(item=item_id, milestone=None, reason=reason, ready=[])


@retried
def milestone_views(ctx: Context, item: int | None = None) -> tuple[WorkItem, list[MilestoneView]]:
    """Every milestone with its view: ready/blocked folded in, and, for those
    with inputs, stale (done on files that changed since) or waiting for a
    change (failed on files that did not change since)."""

    item_id = resolve(ctx, item)
    it, g, check = read_checked(ctx, item_id)
    with ctx.store.read() as conn:
        last: dict[str, tuple[int, str]] = {
            name: (attempt, reason)
            for name, attempt, reason in conn.execute(
                select(MILESTONES.c.name, RUNS.c.attempt, RUNS.c.reason)
                .join(RUNS, RUNS.c.milestone_id == MILESTONES.c.id)
                .where(RUNS.c.item_id == item_id)
                .order_by(RUNS.c.milestone_id, RUNS.c.attempt)
            )
        }
    views = [
        MilestoneView(
            **m.model_dump(),
            view=display_status(g, m),
            waiting_on=[d.name for d in g.undone_deps(m.name)],
            last_run=last[m.name][1] if m.name in last else None,
            last_attempt=last[m.name][0] if m.name in last else None,
            stale=check.stale.get(m.name),
            waiting_for_change=check.waiting.get(m.name),
        )
        for m in g
    ]
    return it, views


@retried
def runs(ctx: Context, name: str, item: int | None = None) -> list[GateRun]:
    item_id = resolve(ctx, item)
    with ctx.store.read() as conn:
        pk = milestone_pk(conn, item_id, name)
        found = conn.execute(select(RUNS).where(RUNS.c.milestone_id == pk).order_by(RUNS.c.attempt)).all()
        sources = _sources(conn, [r.source_run_id for r in found if r.source_run_id is not None])
    store = ctx.store
    out = []
    for r in found:
        log = str(store.resolve(r.log_path)) if r.log_path else None
        out.append(gate_run_of(r, item_id, name, log, sources.get(r.source_run_id) if r.source_run_id else None))
    return out


def _sources(conn: Any, ids: list[int]) -> dict[int, dict[str, Any]]:
    """The passed runs that ``cached`` attempts reuse: item, milestone, attempt."""
    if not ids:
        return {}
    found = conn.execute(
        select(RUNS.c.id, RUNS.c.item_id, MILESTONES.c.name, RUNS.c.attempt)
        .join(MILESTONES, MILESTONES.c.id == RUNS.c.milestone_id)
        .where(RUNS.c.id.in_(ids))
    )
    return {r.id: {"item": r.item_id, "milestone": r.name, "attempt": r.attempt} for r in found}


def run(ctx: Context, name: str, attempt: int | None = None, item: int | None = None) -> GateRun:
    """One gate run of a milestone: the last by default."""
    found = runs(ctx, name, item)
    if not found:
        raise NotFoundError(f"milestone {name!r} has no gate runs yet", milestone=name)
    one = of_attempt(found, attempt)
    if one is not None:
        return one
    raise NotFoundError(
        f"milestone {name!r} has no attempt {attempt}; attempts recorded: {', '.join(str(r.attempt) for r in found)}",
        milestone=name,
    )


def input_files(ctx: Context, name: str, item: int | None = None) -> dict[str, Any]:
    """``milepost inputs NAME``: the files a milestone's inputs stand for now."""
    from milepost.service.proofs import input_files as files_of

    item_id = resolve(ctx, item)
    _, g = read(ctx, item_id)
    return {"item": item_id, **files_of(ctx.store.root, g.get(name))}
