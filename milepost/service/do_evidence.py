"""What doers did, in the store: one ``do_runs`` row per do attempt (its
evidence, beside the attempt's row in ``gate_runs``), what doers have cost
an item and a milestone, and the last attempt's diff (a doer that hands in
the same change again made no progress). See docs/doers.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError

from milepost._schema import DO_RUNS, MILESTONES
from milepost.errors import NotFoundError
from milepost.gates.attempt import AttemptFiles
from milepost.gates.outcome import GateResult
from milepost.gates.prices import price_table
from milepost.gates.usage import CODEX, Cost, read_usage
from milepost.graph.models import ModelPrice
from milepost.results import Claim, DoRun
from milepost.retry import retried
from milepost.service._find import milestone_pk, of_attempt, resolve
from milepost.service._tx import Context

# The most paths a do run keeps of its change (a doer that rewrote a whole tree is said in one entry more).
_MAX_FILES = 1000

__all__ = [
    "do_run",
    "do_runs",
    "last_do_run",
    "record_do_run",
    "session_of",
    "session_where",
    "set_merge_commit",
    "spent",
]

_FIELDS = (
    "attempt",
    "outcome",
    "reason",
    "exit_code",
    "duration",
    "tail",
    "host",
    "command",
    "worktree",
    "base_commit",
    "result_commit",
    "diff_stat",
    "diff_digest",
    "cost_usd",
    "tokens",
    "session",
    "usage_warning",
    "merge_commit",
    "files",
    "started_at",
    "finished_at",
)


def do_run_of(
    claim: Claim,
    result: GateResult,
    usage: str | None = None,
    *,
    ctx: Context | None = None,
    prices: Mapping[str, ModelPrice] | None = None,
    **facts: Any,
) -> DoRun:
    """The do run of ``claim``'s attempt as ``result`` (its do task's) tells
    it, with what its usage report says (in the form ``usage``: its output's,
    or its cost file's; None: found; with ``ctx``, a resumed Codex thread's
    tokens beyond what its earlier do runs recorded; a streamed Claude Code
    stopped before its result line estimated at milepost's prices and the
    plan's ``prices``); ``facts``: what else is known of it (host, worktree,
    base commit), or read otherwise."""
    files = AttemptFiles(Path(claim.log_path)).do
    cost = read_usage(files.log, files.cost, usage, prices=price_table(prices))
    if ctx is not None:
        cost = _thread_growth(ctx, claim, cost)
    fields: dict[str, Any] = {
        "item": claim.item,
        "milestone": claim.milestone.name,
        "attempt": claim.attempt,
        "outcome": result.outcome.value,
        "reason": _stopped_at_cap(result, cost) or result.reason,
        "exit_code": result.exit_code,
        "duration": result.duration,
        "tail": result.tail,
        "log_path": str(files.log),
        "command": claim.milestone.do or "",
        "cost_usd": cost.usd,
        "tokens": cost.tokens,
        "session": cost.session,
        "usage_warning": cost.problem,
        "started_at": result.started_at,
        "finished_at": result.finished_at,
    }
    return DoRun(**{**fields, **facts})


def _thread_growth(ctx: Context, claim: Claim, cost: Cost) -> Cost:
    """Codex's tokens are its thread's running total: a resumed thread's
    report restates what the item's earlier do runs in that thread recorded,
    so only what it grew by is this run's. A total below theirs is a thread
    counted afresh (a Codex that does not carry it over): all of it counts."""
    if cost.form != CODEX or cost.session is None or cost.tokens is None:
        return cost
    before = _thread_tokens(ctx, claim, cost.session)
    if before == 0 or cost.tokens < before:
        return cost
    return replace(cost, tokens=cost.tokens - before)


@retried
def _thread_tokens(ctx: Context, claim: Claim, session: str) -> int:
    """The tokens the item's other do runs in ``session`` recorded."""
    q = select(func.coalesce(func.sum(DO_RUNS.c.tokens), 0)).where(
        DO_RUNS.c.item_id == claim.item,
        DO_RUNS.c.session == session,
        (DO_RUNS.c.milestone_id != claim.pk) | (DO_RUNS.c.attempt != claim.attempt),
    )
    with ctx.store.read() as conn:
        return int(conn.execute(q).scalar() or 0)


def _stopped_at_cap(result: GateResult, cost: Cost) -> str | None:
    """Why a doer that stopped itself at its own spending cap failed, in the words of a budget stop."""
    if result.passed or cost.stopped != "budget":
        return None
    spent = f": ${cost.usd:.2f} spent" if cost.usd is not None else ""
    return f"budget: its doer stopped at its own spending cap (Claude Code's error_max_budget_usd){spent}"


def record_do_run(ctx: Context, claim: Claim, run: DoRun) -> None:
    """Keep ``run`` as the do run of ``claim``'s attempt. Written once: a
    second record of the same attempt (a driver that took a dead one's
    lease over) leaves the first."""
    values: dict[str, Any] = {f: getattr(run, f) for f in _FIELDS}
    if run.files is not None and len(run.files) > _MAX_FILES:
        values["files"] = [*run.files[:_MAX_FILES], f"... and {len(run.files) - _MAX_FILES} more"]
    values.update(item_id=claim.item, milestone_id=claim.pk)
    values["log_path"] = ctx.store.relative(ctx.store.resolve(run.log_path)) if run.log_path else None
    try:
        with ctx.store.write() as conn:
            conn.execute(insert(DO_RUNS).values(values))
            if run.session:  # the milestone's agent session: its next doer resumes it
                conn.execute(update(MILESTONES).where(MILESTONES.c.id == claim.pk).values(doer_session=run.session))
    except IntegrityError:
        return


@retried
def session_where(ctx: Context, pk: int) -> tuple[str | None, str | None]:
    """The agent session a milestone's doers work in (:func:`session_of`)
    and the host of the last do run that reported it (None: not known): its
    agent keeps the session on that machine's disk, where alone it resumes."""
    with ctx.store.read() as conn:
        session = conn.execute(select(MILESTONES.c.doer_session).where(MILESTONES.c.id == pk)).scalar()
        if not session:
            return None, None
        host = conn.execute(
            select(DO_RUNS.c.host)
            .where(DO_RUNS.c.milestone_id == pk, DO_RUNS.c.session == session)
            .order_by(DO_RUNS.c.attempt.desc())
            .limit(1)
        ).scalar()
    return str(session), str(host) if host else None


@retried
def session_of(ctx: Context, pk: int) -> str | None:
    """The agent session a milestone's doers work in (from the last usage
    report that named one; forgotten by its reset), by the milestone's key."""
    with ctx.store.read() as conn:
        found = conn.execute(select(MILESTONES.c.doer_session).where(MILESTONES.c.id == pk)).scalar()
    return str(found) if found else None


def set_merge_commit(ctx: Context, claim: Claim, commit: str) -> None:
    """The merge that brought ``claim``'s passed attempt into the integration branch."""
    with ctx.store.write() as conn:
        conn.execute(
            update(DO_RUNS)
            .where(DO_RUNS.c.milestone_id == claim.pk, DO_RUNS.c.attempt == claim.attempt)
            .values(merge_commit=commit)
        )


@retried
def spent(ctx: Context, item: int, pk: int | None = None) -> float:
    """What doers of ``item`` (of one milestone, by its key) said they cost, in dollars."""
    q = select(func.coalesce(func.sum(DO_RUNS.c.cost_usd), 0.0)).where(DO_RUNS.c.item_id == item)
    if pk is not None:
        q = q.where(DO_RUNS.c.milestone_id == pk)
    with ctx.store.read() as conn:
        return float(conn.execute(q).scalar() or 0.0)


@retried
def last_do_run(ctx: Context, claim: Claim) -> DoRun | None:
    """The do run of the milestone's latest attempt before ``claim``'s."""
    with ctx.store.read() as conn:
        row = conn.execute(
            select(DO_RUNS)
            .where(DO_RUNS.c.milestone_id == claim.pk, DO_RUNS.c.attempt < claim.attempt)
            .order_by(DO_RUNS.c.attempt.desc())
            .limit(1)
        ).first()
    return None if row is None else _run(ctx, row, claim.item, claim.milestone.name)


@retried
def do_runs(ctx: Context, name: str, item: int | None = None) -> list[DoRun]:
    """Every do run of a milestone, oldest first."""
    item_id = resolve(ctx, item)
    with ctx.store.read() as conn:
        pk = milestone_pk(conn, item_id, name)
        found = conn.execute(select(DO_RUNS).where(DO_RUNS.c.milestone_id == pk).order_by(DO_RUNS.c.attempt)).all()
    return [_run(ctx, r, item_id, name) for r in found]


def do_run(ctx: Context, name: str, attempt: int | None = None, item: int | None = None) -> DoRun:
    """The do run of one attempt of a milestone: the last by default."""
    found = do_runs(ctx, name, item)
    if not found:
        raise NotFoundError(f"milestone {name!r} has no do runs (no do: command, or no doer ran yet)", milestone=name)
    one = of_attempt(found, attempt)
    if one is not None:
        return one
    ran = ", ".join(str(d.attempt) for d in found)
    raise NotFoundError(f"attempt {attempt} of {name!r} ran no doer; attempts with a do run: {ran}", milestone=name)


def _run(ctx: Context, row: Any, item: int, name: str) -> DoRun:
    data = dict(row._mapping)
    log = data.get("log_path")
    data.update(item=item, milestone=name, log_path=str(ctx.store.resolve(log)) if log else None)
    return DoRun.model_validate(data)
