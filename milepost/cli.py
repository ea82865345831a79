"""The ``milepost`` command line.

Three layers: :func:`main` parses, runs and turns errors into one line and an
exit code; each command asks the service for plain data; the ``_show_*``
helpers format that data as rich tables or, with ``--json``, as one JSON
document on stdout. Heavy imports (the store, SQLAlchemy) happen inside
commands; Prefect is imported by no state command.

Exit codes: 0 success; 1 the operation ran and failed (a gate failed);
2 bad input or refused transition (nothing changed); 3 environment
(no store, database unreachable); 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from milepost.errors import EnvironmentProblem, InvalidValueError, MilepostError

if TYPE_CHECKING:
    from rich.console import Console

    from milepost.graph.dag import WorkGraph
    from milepost.results import DoneResult, GateRun, MilestoneView
    from milepost.service import Service

__all__ = ["cli", "main"]

F = TypeVar("F", bound=Callable[..., Any])


class Ctx:
    """What every command shares: global flags and the lazily opened service."""

    def __init__(self, db: str | None, agent: str | None, as_json: bool, operator: bool = False) -> None:
        self.db = db
        self.agent = agent
        self.json = as_json
        self.operator = operator
        self._service: Service | None = None

    @property
    def service(self) -> Service:
        if self._service is None:
            from milepost.service import Service

            self._service = Service.open(self.db, self.agent, operator=self.operator)
        return self._service

    def console(self) -> Console:
        from rich.console import Console

        class _Console(Console):
            def on_broken_pipe(self) -> None:
                # rich exits 1 here; a reader that left (`| head`) is not a failure.
                raise BrokenPipeError

        # Off a terminal rich would wrap at 80 columns; scripts and logs prefer long lines.
        width = None if sys.stdout.isatty() else 200
        return _Console(highlight=False, soft_wrap=True, width=width)

    def emit(self, data: Any, human: Callable[[Console], None]) -> None:
        if self.json:
            # Strict JSON: a NaN or an infinity is a bug to report, never output.
            click.echo(json.dumps(data, default=str, allow_nan=False))
        else:
            human(self.console())


def _styled(status: str) -> str:
    from milepost.graph.render import PALETTE

    colour = PALETTE.get(status)
    return f"[{colour.term}]{status}[/]" if colour else status


def _esc(text: str) -> str:
    """User text for rich: control characters escaped, markup neutralised."""
    from rich.markup import escape

    from milepost._text import printable

    return escape(printable(text))


pass_ctx = click.make_pass_decorator(Ctx)


class _Seconds(click.ParamType[float]):
    """A finite number of seconds within milepost's limits (no nan, no inf)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.0, *, open_min: bool = True) -> None:
        self.minimum = minimum
        self.open_min = open_min

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        import math

        from milepost.graph.models import MAX_SECONDS

        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        low_ok = v > self.minimum if self.open_min else v >= self.minimum
        if not (math.isfinite(v) and low_ok and v <= MAX_SECONDS):
            rel = ">" if self.open_min else ">="
            self.fail(f"{value!r} is not a number of seconds {rel} {self.minimum:g} and <= {MAX_SECONDS:g}", param, ctx)
        return v


class _Id(click.ParamType[int]):
    """A whole number from 1 to the database's integer limit."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from milepost.graph.models import MAX_ID

        try:
            v = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a whole number", param, ctx)
        if not 1 <= v <= MAX_ID:
            self.fail(f"{value!r} is not a whole number from 1 to {MAX_ID}", param, ctx)
        return v


ID = _Id()
SECONDS = _Seconds()
DELAY = _Seconds(open_min=False)
RETRIES = click.IntRange(min=0, max=100)


def item_option(f: F) -> F:
    return click.option(
        "--item", "item", type=ID, default=None, help="Work item id (default: this agent's current item)."
    )(f)


def revision_option(f: F) -> F:
    return click.option(
        "--expect-revision",
        type=ID,
        default=None,
        metavar="N",
        help="Refuse (exit 2) unless the item is at revision N: safe read-modify-write.",
    )(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--db", metavar="URL", help="SQLAlchemy database URL [env MILEPOST_DB].")
@click.option("--agent", metavar="NAME", help="Act as this agent [env MILEPOST_AGENT].")
@click.option("--json", "as_json", is_flag=True, help='Print one JSON document on stdout; errors as {"error": ...}.')
@click.option("--operator", is_flag=True, help="Act as an operator: change other agents' items too.")
@click.option("--debug", is_flag=True, help="Show the Python traceback of an error [env MILEPOST_DEBUG].")
@click.version_option(package_name="milepost")
@click.pass_context
def cli(ctx: click.Context, db: str | None, agent: str | None, as_json: bool, operator: bool, debug: bool) -> None:
    """milepost: plan a milestone DAG, prove each milestone with a gate.

    \b
    Exit codes: 0 ok; 1 the operation ran and failed (a gate failed);
    2 bad input or refused transition, nothing changed; 3 environment
    (no store, database unreachable); 130 interrupted.
    """
    from milepost.settings import load_settings

    settings = load_settings()  # MILEPOST_* from the environment; flags win
    ctx.obj = Ctx(db or settings.db, agent or settings.agent, as_json, operator)
    ctx.call_on_close(lambda: ctx.obj._service.close() if ctx.obj._service else None)


# -- init --------------------------------------------------------------------


@cli.command()
@click.argument("path", type=click.Path(file_okay=False, path_type=Path), default=".")
@pass_ctx
def init(c: Ctx, path: Path) -> None:
    """Create the .milepost/ folder and a store in PATH (default: here).

    The store is the SQLite file .milepost/milepost.db, or the database that
    --db / MILEPOST_DB names (it must exist; its tables are created). This is
    the only command that creates a store: every other one refuses a missing
    or empty database (exit 3)."""
    from milepost.store import Store, mask_url
    from milepost.workspace import init_workspace

    ws = init_workspace(path)
    url = c.db or ws.url
    store = Store.open(url, ws.home, ws.root, create=True)
    store.close()
    data = {"home": str(ws.home), "root": str(ws.root), "db": mask_url(url), "created": store.created,
            "store_id": store.id}  # fmt: skip
    verb = "initialized" if store.created else "already initialized:"
    c.emit(data, lambda con: con.print(f"{verb} milepost store {store.id} in {ws.home} (db {mask_url(url)})"))


# -- work items --------------------------------------------------------------


@cli.group()
def item() -> None:
    """Work items: create, list, show, update, pick, wait, wake, complete, cancel."""


def _plan_status(value: str | None) -> Any:
    from milepost.graph.status import PlanStatus

    return PlanStatus(value) if value else None


PLAN_STATUS = click.Choice(["draft", "ready", "needs_input"])


@item.command("create")
@click.argument("objective")
@click.option("--plan-status", type=PLAN_STATUS, default="draft", show_default=True)
@click.option("--retries", type=RETRIES, default=None, help="Default retry budget of its milestones.")
@click.option("--timeout", type=SECONDS, default=None, help="Default gate timeout (s).")
@click.option("--after", type=ID, default=None, metavar="ID", help="Wait until work item ID is completed.")
@pass_ctx
def item_create(c: Ctx, objective: str, plan_status: str, retries: int | None, timeout: float | None,
                after: int | None) -> None:  # fmt: skip
    """Create a work item (with its plan.md) and make it this agent's current item."""
    from milepost.graph.models import DEFAULT_RETRIES, ItemDefaults

    defaults = ItemDefaults(retries=DEFAULT_RETRIES if retries is None else retries, timeout=timeout)
    it = c.service.create_item(objective, plan_status=_plan_status(plan_status), defaults=defaults, after=after)
    c.emit(
        it.model_dump(mode="json"), lambda con: con.print(f"created work item {it.id}: {_esc(it.objective)} (current)")
    )


@item.command("list")
@click.option(
    "--filter", "filter_", default="all", show_default=True,
    type=click.Choice(["all", "open", "completed", "cancelled", "current", "queued", "blocked",
                       "waiting_for_operator", "runnable"]),
)  # fmt: skip
@click.option("--limit", type=ID, default=None)
@pass_ctx
def item_list(c: Ctx, filter_: str, limit: int | None) -> None:
    """List work items with their readiness (and why)."""
    items = c.service.list_items(filter_, limit)

    def human(con: Console) -> None:
        from rich.table import Table

        if not items:
            con.print("no work items yet: `milepost item create OBJECTIVE` or `milepost plan apply FILE`")
            return
        t = Table(box=None, header_style="bold")
        for col in ("", "id", "agent", "readiness", "why", "plan", "rev", "milestones", "objective"):
            t.add_column(col, overflow="fold")
        for i in items:
            counts = ", ".join(f"{n} {k}" for k, n in sorted(i.counts.items()))
            t.add_row(
                "*" if i.current else "",
                str(i.id),
                i.agent,
                _styled(i.readiness),
                _esc(i.readiness_reason),
                i.plan_status,
                str(i.revision),
                counts or "-",
                _esc(i.objective),
            )
        con.print(t)

    c.emit({"items": [i.model_dump(mode="json") for i in items]}, human)


@item.command("show")
@click.argument("item_id", type=ID, required=False)
@pass_ctx
def item_show(c: Ctx, item_id: int | None) -> None:
    """Show a work item and its milestones (default: the current item)."""
    _show_item(c, item_id)


def _show_item(c: Ctx, item_id: int | None) -> None:
    from milepost.results import item_with_views

    svc = c.service
    it, views = svc.milestone_views(item_id)
    plan = svc.plan_artifact(it.id)
    refs = svc.refs(it.id)

    def human(con: Console) -> None:
        con.print(f"[bold]work item {it.id}[/]: {_esc(it.objective)}")
        con.print(
            f"state {_styled(it.state.value)} · readiness {_styled(it.readiness)} ({it.readiness_state}:"
            f" {_esc(it.readiness_reason)}) · plan {it.plan_status.value} · revision {it.revision}"
            f" · agent {it.agent}{' · current' if it.current else ''}"
        )
        for w in it.waits:
            on = f" on {w.resource}" if w.resource else ""
            until = f" until {w.deadline:%Y-%m-%d %H:%M:%S %Z}" if w.deadline else ""
            con.print(f"wait: {w.kind}{on}{until}: {_esc(w.reason)}")
        if it.blocked_by:
            con.print(f"blocked by: {_esc(it.blocked_by)}")
        if it.after is not None:
            con.print(f"after work item {it.after}")
        if it.recheck_at:
            con.print(f"recheck at: {it.recheck_at:%Y-%m-%d %H:%M:%S %Z}")
        size = f", {plan.size} bytes, sha256 {plan.sha256[:12]}" if plan.sha256 else ""
        con.print(f"plan: {_esc(plan.path)} ({plan.status}{size})")
        for t in it.todo_list:
            mark = {"completed": "x", "in_progress": "~"}.get(t.state, " ")
            con.print(f"  [{mark}] {_esc(t.text)}")
        _milestone_table(con, views)
        if refs:
            con.print(f"evidence: {len(refs)} refs (last: {refs[-1].kind} {_esc(refs[-1].ref)})")
        if it.report:
            con.print(f"report: {_esc(it.report)}")

    data = item_with_views(it, views)
    data["plan"] = plan.model_dump(mode="json")
    data["work_refs"] = [r.model_dump(mode="json") for r in refs]
    c.emit(data, human)


def _todo(entries: tuple[str, ...]) -> Any:
    from milepost.graph.models import TodoItem
    from milepost.graph.status import TodoState

    out = []
    for e in entries:
        text, sep, state = e.rpartition(":")
        if not sep or not text.strip() or state not in {t.value for t in TodoState}:
            raise InvalidValueError(
                f"invalid todo {e!r}: use TEXT:STATE with STATE one of pending, in_progress, completed"
            )
        out.append(TodoItem(text=text.strip(), state=state))
    return out


def _time(value: str | None, flag: str) -> Any:
    from datetime import datetime

    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidValueError(
            f"invalid {flag} {value!r}: use ISO 8601 with a zone, e.g. 2026-12-01T09:00:00Z"
        ) from None
    if t.tzinfo is None:
        raise InvalidValueError(f"invalid {flag} {value!r}: no zone; add one, e.g. 2026-12-01T09:00:00Z")
    return t


@item.command("update")
@click.argument("item_id", type=ID, required=False)
@click.option("--objective", default=None)
@click.option("--plan-status", type=PLAN_STATUS, default=None, help="ready freezes the DAG's structure.")
@click.option(
    "--todo",
    multiple=True,
    metavar="TEXT:STATE",
    help="Replace the todo list (repeat; STATE pending|in_progress|completed).",
)
@click.option("--clear-todo", is_flag=True, help="Empty the todo list.")
@click.option("--blocked-by", default=None, metavar="TEXT", help="Record what blocks the item.")
@click.option("--clear-blocked-by", is_flag=True, help="Remove the recorded blocker.")
@click.option("--recheck-at", default=None, metavar="TIME", help="When the scheduler reconsiders a blocked item.")
@revision_option
@pass_ctx
def item_update(c: Ctx, item_id: int | None, objective: str | None, plan_status: str | None, todo: tuple[str, ...],
                clear_todo: bool, blocked_by: str | None, clear_blocked_by: bool, recheck_at: str | None,
                expect_revision: int | None) -> None:  # fmt: skip
    """Change a work item (default: the current one): objective, plan status, todo list, blocker, recheck time."""
    if todo and clear_todo:
        raise InvalidValueError("--todo and --clear-todo contradict each other: use one")
    it = c.service.update_item(
        item_id,
        objective=objective,
        plan_status=_plan_status(plan_status),
        todo=_todo(todo) if todo else ([] if clear_todo else None),
        blocked_by=blocked_by,
        clear_blocked_by=clear_blocked_by,
        recheck_at=_time(recheck_at, "--recheck-at"),
        expect_revision=expect_revision,
    )
    c.emit(
        it.model_dump(mode="json"),
        lambda con: con.print(f"work item {it.id}: plan {it.plan_status.value}, revision {it.revision}"),
    )


@item.command("pick")
@click.argument("item_id", type=ID)
@click.option("--clear-blocker", is_flag=True, help="Also clear its resolved blocker and waits (needs --reason).")
@click.option("--reason", default=None, help="Why the blocker is resolved.")
@revision_option
@pass_ctx
def item_pick(c: Ctx, item_id: int, clear_blocker: bool, reason: str | None, expect_revision: int | None) -> None:
    """Make ITEM_ID this agent's current work item (a blocked one stays blocked)."""
    it = c.service.pick(item_id, clear_blocker=clear_blocker, reason=reason, expect_revision=expect_revision)
    c.emit(
        it.model_dump(mode="json"),
        lambda con: con.print(f"current work item: {it.id} ({_esc(it.objective)}), {_styled(it.readiness)}"),
    )


@item.command("wait")
@click.argument("item_id", type=ID, required=False)
@click.option("--wake", "kind", required=True,
              type=click.Choice(["operator_input", "task_result", "external", "timer", "system"]),
              help="What wakes the item.")  # fmt: skip
@click.option("--resource", default=None, help="The task id or outside object (PR, CI run, URL) it waits on.")
@click.option("--until", default=None, metavar="TIME", help="Timer deadline, ISO 8601 with a zone.")
@click.option("--reason", required=True, help="Why it waits.")
@revision_option
@pass_ctx
def item_wait(c: Ctx, item_id: int | None, kind: str, resource: str | None, until: str | None, reason: str,
              expect_revision: int | None) -> None:  # fmt: skip
    """Record that a work item waits (replaces its earlier wait)."""
    it = c.service.wait_item(
        kind, reason, resource=resource, until=_time(until, "--until"), item=item_id, expect_revision=expect_revision
    )
    c.emit(it.model_dump(mode="json"), lambda con: con.print(f"work item {it.id} waits: {_esc(it.readiness_reason)}"))


@item.command("wake")
@click.option("--resource", required=True, help="The task or outside object that changed.")
@pass_ctx
def item_wake(c: Ctx, resource: str) -> None:
    """An external event: settle every wait on RESOURCE (none matching is fine)."""
    woken = c.service.wake(resource)
    text = f"woke work item(s) {', '.join(map(str, woken))}" if woken else f"no wait matches resource {resource!r}"
    c.emit({"resource": resource, "woken": woken}, lambda con: con.print(_esc(text)))


@item.command("complete")
@click.argument("item_id", type=ID, required=False)
@click.option("--report", default=None, help="What was achieved (required, or --report-file).")
@click.option("--report-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@revision_option
@pass_ctx
def item_complete(c: Ctx, item_id: int | None, report: str | None, report_file: Path | None,
                  expect_revision: int | None) -> None:  # fmt: skip
    """Close a work item with its report (every milestone must be done)."""
    if report_file is not None:
        if report is not None:
            raise InvalidValueError("--report and --report-file contradict each other: use one")
        try:
            report = report_file.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise InvalidValueError(
                f"--report-file {str(report_file)!r} is not UTF-8 text (byte {e.start}): give a text file"
            ) from None
        except OSError as e:
            raise InvalidValueError(f"cannot read --report-file {str(report_file)!r}: {e.strerror or e}") from None
    if report is None:
        raise InvalidValueError("a completion report is required: pass --report TEXT or --report-file FILE")
    r = c.service.complete(report, item=item_id, expect_revision=expect_revision)

    def human(con: Console) -> None:
        con.print(r.message)
        for w in r.warnings:
            con.print(f"[yellow]warning:[/] {_esc(w)}")

    c.emit(r.model_dump(mode="json"), human)


@item.command("cancel")
@click.argument("item_id", type=ID, required=False)
@click.option("--reason", required=True, help="Why the work is abandoned.")
@revision_option
@pass_ctx
def item_cancel(c: Ctx, item_id: int | None, reason: str, expect_revision: int | None) -> None:
    """Abandon a work item (state cancelled, with the reason)."""
    it = c.service.cancel(reason, item=item_id, expect_revision=expect_revision)
    c.emit(it.model_dump(mode="json"), lambda con: con.print(f"cancelled work item {it.id}: {_esc(reason)}"))


@cli.group()
def ref() -> None:
    """Evidence of a work item (gate runs add theirs automatically)."""


@ref.command("add")
@click.argument("kind")
@click.argument("reference")
@click.option("--reason", default="", help="Why it is evidence.")
@item_option
@revision_option
@pass_ctx
def ref_add(c: Ctx, kind: str, reference: str, reason: str, item: int | None, expect_revision: int | None) -> None:
    """Add evidence: KIND (pr, ci, doc, ...) and a REFERENCE (URL, path, id)."""
    r = c.service.add_ref(kind, reference, reason, item=item, expect_revision=expect_revision)
    c.emit(r.model_dump(mode="json"), lambda con: con.print(f"added {_esc(r.kind)} {_esc(r.ref)}"))


@ref.command("list")
@item_option
@pass_ctx
def ref_list(c: Ctx, item: int | None) -> None:
    """The evidence of a work item."""
    refs = c.service.refs(item)

    def human(con: Console) -> None:
        for r in refs:
            con.print(f"{r.at:%Y-%m-%d %H:%M:%S} {r.kind} {_esc(r.ref)} {_esc(r.reason)}")

    c.emit({"work_refs": [r.model_dump(mode="json") for r in refs]}, human)


# -- milestones --------------------------------------------------------------


def _split_deps(deps: str | None) -> list[str]:
    return [d.strip() for d in (deps or "").split(",") if d.strip()]


@cli.command()
@click.argument("name")
@click.option("--deps", default=None, metavar="A,B", help="Comma-separated names of milestones this one needs.")
@click.option("--acceptance", default="", help="What a reviewer checks.")
@click.option("--gate", default=None, metavar="CMD", help="Shell command that proves the milestone (exit 0 = pass).")
@click.option("--retries", type=RETRIES, default=None, help="Retry budget: at most 1 + N gate attempts (default 2).")
@click.option("--timeout", type=SECONDS, default=None, help="Gate timeout in seconds.")
@click.option("--review", is_flag=True, help="Wait for an operator verdict after the gate passes.")
@click.option("--fix", default=None, metavar="CMD", help="Command run after a failed attempt, before the retry.")
@click.option(
    "--retry-delay", type=DELAY, default=None, metavar="S", help="Drive waits S, 2S, 4S ... seconds before each retry."
)
@click.option("--hypothesis", is_flag=True, help="Add as a hypothesis (confirm it later).")
@item_option
@revision_option
@pass_ctx
def add(c: Ctx, name: str, deps: str | None, acceptance: str, gate: str | None, retries: int | None,
        timeout: float | None, review: bool, fix: str | None, retry_delay: float | None, hypothesis: bool,
        item: int | None, expect_revision: int | None) -> None:  # fmt: skip
    """Add a milestone to the current work item (its plan must be a draft)."""
    r = c.service.add_milestone(
        name,
        _split_deps(deps),
        acceptance=acceptance,
        gate=gate,
        retries=retries,
        timeout=timeout,
        review=review,
        fix=fix,
        retry_delay=retry_delay,
        hypothesis=hypothesis,
        item=item,
        expect_revision=expect_revision,
    )
    m = r.milestone
    c.emit(
        r.model_dump(mode="json"),
        lambda con: con.print(f"added {m.name!r} (id {m.id}, {_styled(m.status.value)}) to work item {r.item}"),
    )


@cli.command()
@click.argument("name")
@item_option
@revision_option
@pass_ctx
def remove(c: Ctx, name: str, item: int | None, expect_revision: int | None) -> None:
    """Remove a milestone nothing depends on (plan must be a draft)."""
    r = c.service.remove_milestone(name, item=item, expect_revision=expect_revision)
    c.emit(r.model_dump(mode="json"), lambda con: con.print(f"removed {name!r} from work item {r.item}"))


def _action_command(action_name: str, help_text: str, needs_reason: bool) -> None:
    @click.argument("name")
    @item_option
    @revision_option
    @pass_ctx
    def command(c: Ctx, name: str, item: int | None, expect_revision: int | None, reason: str | None = None) -> None:
        from milepost.graph.status import Action

        action = Action(action_name)
        r = c.service.act(name, action, reason=reason, item=item, expect_revision=expect_revision)

        c.emit(r.model_dump(mode="json"), lambda con: _show_changes(con, r.changes, name))

    command.__doc__ = help_text
    if needs_reason:
        command = click.option("--reason", required=True, help="Why (kept in the event log).")(command)
    cli.command(action_name.replace("_", "-"))(command)


_action_command("start", "Start a milestone: its deps must be done and budget left.", False)
_action_command("confirm", "Confirm a hypothesis milestone (it becomes pending).", False)
_action_command("needs_fix", "Send an in-progress or done milestone back for a fix (reopens done dependents).", True)
_action_command("reset", "Operator: give a stuck or needs_fix milestone a fresh retry budget.", True)
_action_command("lock", "Hold a pending milestone for an external condition.", True)
_action_command("unlock", "Release a locked milestone back to pending.", True)


def _show_changes(con: Console, changes: list[Any], name: str) -> None:
    for ch in changes:
        extra = f" ({_esc(ch.reason)})" if ch.reason and ch.milestone != name else ""
        con.print(f"{ch.milestone}: {ch.from_status} -> {_styled(ch.to_status)}{extra}")


@cli.command()
@click.argument("name")
@item_option
@revision_option
@pass_ctx
def approve(c: Ctx, name: str, item: int | None, expect_revision: int | None) -> None:
    """Operator: accept a milestone waiting for review (it becomes done)."""
    r = c.service.review(name, True, item=item, expect_revision=expect_revision)
    c.emit(r.model_dump(mode="json"), lambda con: _show_changes(con, r.changes, name))


@cli.command()
@click.argument("name")
@click.option("--reason", required=True, help="What is wrong (kept in the event log).")
@item_option
@revision_option
@pass_ctx
def reject(c: Ctx, name: str, reason: str, item: int | None, expect_revision: int | None) -> None:
    """Operator: refuse a milestone in review: needs_fix, or stuck when its budget is spent."""
    r = c.service.review(name, False, reason=reason, item=item, expect_revision=expect_revision)
    c.emit(r.model_dump(mode="json"), lambda con: _show_changes(con, r.changes, name))


@cli.command()
@click.argument("name")
@click.option("--verdict", default=None, help="A note on the result, kept with the gate run.")
@item_option
@revision_option
@pass_ctx
def done(c: Ctx, name: str, verdict: str | None, item: int | None, expect_revision: int | None) -> None:
    """Finish an in-progress milestone: runs its gate here, no Prefect.

    Pass -> done. Fail -> needs_fix (exit 1), or stuck when its retry budget
    is spent. Prints the reason and where the gate's log is.
    """
    r = c.service.done(name, verdict=verdict, item=item, expect_revision=expect_revision)
    c.emit(r.model_dump(mode="json"), lambda con: _show_done(con, r))
    if not r.passed:
        raise SystemExit(1)


def _show_done(con: Console, r: DoneResult) -> None:
    m, run = r.milestone, r.gate_run
    if run is None and r.note:
        con.print(f"[yellow]{_esc(r.note)}[/]")
        return
    if m.awaiting_review:
        gate = f"gate passed ({run.reason}); " if run else ""
        con.print(f"{m.name}: {_styled('in_review')} — {gate}waiting for `milepost approve {m.name}` or `reject`")
        return
    if run is None:
        con.print(f"{m.name}: {_styled('done')} (no gate)")
        return
    where = f"log: {run.log_path}"
    if r.note:
        con.print(f"[yellow]{_esc(r.note)}[/]")
    if r.passed:
        con.print(
            f"{m.name}: {_styled('done')} — gate passed ({run.reason}, {run.duration:.2f} s,"
            f" attempt {run.attempt}); {where}"
        )
        return
    if m.status.value == "stuck":
        con.print(
            f"{m.name}: {_styled('stuck')} — gate failed: {_esc(run.reason)} (attempt {m.attempts} of"
            f" {m.max_attempts}, budget spent); reset with `milepost reset {m.name} --reason TEXT`; {where}"
        )
    else:
        left = m.max_attempts - m.attempts
        con.print(
            f"{m.name}: {_styled(m.status.value)} — gate failed: {_esc(run.reason)} (attempt {m.attempts} of"
            f" {m.max_attempts}, {left} left); {where}"
        )
    tail = run.tail.rstrip().splitlines()[-10:]
    for line in tail:
        con.print(f"  [dim]{_esc(line)}[/]")


@cli.command("next")
@item_option
@pass_ctx
def next_(c: Ctx, item: int | None) -> None:
    """The lowest-id ready milestone, or why there is none."""
    r = c.service.next(item)

    def human(con: Console) -> None:
        if r.milestone is None:
            con.print(r.reason)
        else:
            m = r.milestone
            gate = f" — gate: {_esc(m.gate[0].run)}" if m.gate else ""
            con.print(f"next: [bold]{m.name}[/] (id {m.id}, {m.status.value}){gate}")
            if m.acceptance:
                con.print(f"  acceptance: {_esc(m.acceptance)}")

    c.emit(r.model_dump(mode="json"), human)


@cli.command("list")
@item_option
@pass_ctx
def list_(c: Ctx, item: int | None) -> None:
    """The milestones of the current work item with their statuses."""
    it, views = c.service.milestone_views(item)
    data = {"item": it.id, "revision": it.revision, "milestones": [v.model_dump(mode="json") for v in views]}
    c.emit(data, lambda con: _milestone_table(con, views))


def _milestone_table(con: Console, views: list[MilestoneView]) -> None:
    from rich.table import Table

    if not views:
        con.print("no milestones yet: `milepost add NAME --gate CMD`")
        return
    t = Table(box=None, header_style="bold")
    for col in ("id", "name", "status", "tries", "deps", "gate", "note"):
        t.add_column(col, overflow="fold")
    for v in views:
        gate = v.gate[0].run if len(v.gate) == 1 else (f"{len(v.gate)} commands" if v.gate else "-")
        if len(gate) > 40:
            gate = gate[:39] + "…"
        note = v.reason or v.last_run or ""
        if v.waiting_on:
            note = "waiting on " + ", ".join(v.waiting_on)
        t.add_row(
            str(v.id),
            v.name,
            _styled(v.view),
            f"{v.attempts}/{v.max_attempts}",
            ", ".join(v.deps) or "-",
            _esc(gate),
            _esc(note),
        )
    con.print(t)


# -- plan files --------------------------------------------------------------


@cli.group()
def plan() -> None:
    """Plan files: a whole work item as YAML or JSON."""


@plan.command("apply")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@pass_ctx
def plan_apply(c: Ctx, file: Path) -> None:
    """Validate FILE whole, then create its work item (focused)."""
    from milepost.planfile import load_plan

    p = load_plan(file)  # validated before the store is touched
    it = c.service.apply_plan(p)
    c.emit(
        it.model_dump(mode="json"),
        lambda con: con.print(
            f"created work item {it.id} from {file}: {len(it.milestones)} milestones,"
            f" plan {it.plan_status.value} (current)"
        ),
    )


@plan.command("scaffold")
@click.argument("package")
@click.option(
    "--path",
    "paths",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A source root holding PACKAGE (repeat); default: where Python finds it.",
)
@click.option(
    "--level",
    type=click.Choice(["module", "package"]),
    default="module",
    show_default=True,
    help="One milestone per module, or per package.",
)
@click.option(
    "--gate",
    "gates",
    multiple=True,
    metavar="TEMPLATE",
    help="Gate command template (repeat for a named multi-command gate); placeholders {module}, {path},"
    " {name}, {tests}. [default: python3 -m compileall -q {path}]",
)
@click.option("--acceptance", default=None, metavar="TEMPLATE", help="Acceptance text template (same placeholders).")
@click.option(
    "--tests",
    "tests_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of tests for {tests} (a package: the test modules that import each module; else"
    " test_<name>.py files). [default: ./tests when it exists]",
)
@click.option("--final", default=None, metavar="NAME", help="A last milestone depending on every top milestone.")
@click.option("--final-gate", default=None, metavar="CMD", help="The final milestone's gate (e.g. the whole suite).")
@click.option(
    "--affected-by",
    default=None,
    metavar="GIT_REF",
    help="Only modules changed since GIT_REF (git diff --name-only) and every module importing them.",
)
@click.option("--objective", default=None, help="The work item's objective.")
@click.option(
    "--package-imports",
    is_flag=True,
    help="Count a module's import of an enclosing package (import pkg as p) as a dependency.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the plan here (default: stdout).",
)
@click.option("--apply", "apply_", is_flag=True, help="Also create the work item from it (plan apply).")
@pass_ctx
def plan_scaffold(c: Ctx, package: str, paths: tuple[Path, ...], level: str, gates: tuple[str, ...],
                  acceptance: str | None, tests_dir: Path | None, final: str | None, final_gate: str | None,
                  affected_by: str | None, objective: str | None, package_imports: bool, output: Path | None,
                  apply_: bool) -> None:  # fmt: skip
    """Write a refactor plan for PACKAGE from its import graph: a milestone per
    module (or package) depending on what it imports, leaves first; import
    cycles become one milestone each and are reported as paths."""
    from milepost.scaffold import scaffold

    if tests_dir is None and Path("tests").is_dir():
        tests_dir = Path("tests")
    result = scaffold(
        package, paths=paths, level=level, gates=gates, acceptance=acceptance,  # type: ignore[arg-type]
        tests=tests_dir, final=final, final_gate=final_gate, affected_by=affected_by, objective=objective,
        package_imports=package_imports,
    )  # fmt: skip
    if output is not None:
        _write_file(output, result.text)
    item = None
    if apply_:
        from milepost.planfile import parse_plan

        item = c.service.apply_plan(parse_plan(result.text, str(output or "<scaffold>")))
    data = {
        "milestones": len(result.plan["milestones"]), "modules": result.modules, "cycles": result.cycles,
        "left_out": result.left_out, "notes": result.notes, "output": str(output) if output else None,
        "item": item.id if item else None, "plan": result.plan,
    }  # fmt: skip
    if c.json:
        click.echo(json.dumps(data))
        return
    for cycle in result.cycles:
        click.echo(f"import cycle: {cycle}", err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if output is None and item is None:
        click.echo(result.text, nl=False)
    else:
        where = f"wrote {output}" if output else "scaffolded"
        made = f"; created work item {item.id} (current)" if item else ""
        click.echo(f"{where}: {data['milestones']} milestones from {result.modules} modules{made}")


def _write_file(output: Path, data: str | bytes, flag: str = "-o") -> None:
    """Write what a command made to the file the user named (its ``flag``):
    a missing folder is bad input (exit 2), anything else the system's (exit 3)."""
    try:
        if isinstance(data, bytes):
            output.write_bytes(data)
        else:
            output.write_text(data, encoding="utf-8")
    except FileNotFoundError:
        raise InvalidValueError(
            f"cannot write {flag} {str(output)!r}: folder {str(output.parent)!r} does not exist"
        ) from None
    except IsADirectoryError:
        raise InvalidValueError(f"cannot write {flag} {str(output)!r}: it is a folder") from None
    except OSError as e:
        raise EnvironmentProblem(f"cannot write {flag} {str(output)!r}: {e.strerror or e}") from None


@plan.command("schema")
def plan_schema() -> None:
    """Print the JSON Schema of plan files (for editors and validators).

    Point a YAML language server at it with a first line such as
    `# yaml-language-server: $schema=./milepost-plan.schema.json`."""
    from milepost.graph.plan import Plan

    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **Plan.model_json_schema()}
    schema["title"] = "milepost plan"
    click.echo(json.dumps(schema, indent=2))


@plan.command("export")
@click.argument("item_id", type=ID, required=False)
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
@pass_ctx
def plan_export(c: Ctx, item_id: int | None, fmt: str, output: Path | None) -> None:
    """Write a work item back as a plan file (stdout unless -o)."""
    from milepost.planfile import dump_plan

    data = c.service.export_plan(item_id)
    if c.json:
        fmt = "json"
    text = dump_plan(data, fmt)
    if output is None:
        click.echo(text, nl=False)
    else:
        _write_file(output, text)
        if not c.json:
            click.echo(f"wrote {output}", err=True)


# -- graph, runs, logs -------------------------------------------------------


@cli.command()
@click.argument("item_id", type=ID, required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "mermaid", "dot", "json", "svg", "png", "html"]),
    default="text",
    show_default=True,
    help="svg/png/html: a layered left-to-right picture with status colours and the critical path.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file (default: stdout).")  # fmt: skip
@pass_ctx
def graph(c: Ctx, item_id: int | None, fmt: str, output: Path | None) -> None:
    """Show the DAG with statuses: layers, critical path, bottlenecks; or as a picture."""
    from milepost.graph import render

    if c.json and fmt in ("text", "json"):
        fmt = "json"
    it, g = c.service.graph(item_id)
    title = f"work item {it.id}: {it.objective}"
    text: str | None = None
    if fmt == "json":
        text = json.dumps({"item": it.id, "revision": it.revision, **render.graph_json(g)}) + "\n"
    elif fmt == "mermaid":
        text = render.to_mermaid(g)
    elif fmt == "dot":
        text = render.to_dot(g, f"item {it.id}")
    elif fmt == "svg":
        from milepost.picture import to_svg

        text = to_svg(g, title)
    elif fmt == "html":
        from milepost.picture import to_html

        _, views = c.service.milestone_views(it.id)
        done = sum(1 for m in g if m.status.is_done)
        sub = (
            f"{it.state.value} · {it.readiness}: {it.readiness_reason} · {done}/{len(g)} done · revision {it.revision}"
        )
        text = to_html(g, views, title, sub)
    elif fmt == "png":
        from milepost.picture import to_png, to_svg

        data = to_png(to_svg(g, title))
        if output is None:
            if sys.stdout.isatty():
                raise InvalidValueError("--format png writes binary data: give -o FILE, or redirect stdout")
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            _write_file(output, data)
        return
    else:
        _show_graph_text(c.console(), it.id, it.objective, g)
        return
    if output is None:
        click.echo(text, nl=False)
    else:
        _write_file(output, text)


def _show_graph_text(con: Console, item_id: int, objective: str, g: WorkGraph) -> None:
    from milepost.graph.dag import display_status

    con.print(f"[bold]work item {item_id}[/]: {_esc(objective)}")
    if not len(g):
        con.print("(no milestones)")
        return
    for i, layer in enumerate(g.layers(), start=1):
        con.print(f"[bold]layer {i}[/]")
        for m in layer:
            deps = f"  [dim]<- {', '.join(m.deps)}[/]" if m.deps else ""
            st = display_status(g, m)
            con.print(f"  {_styled(st)}{' ' * (12 - len(st))} {m.name}{deps}")
    path = g.critical_path()
    con.print(f"critical path ({len(path)}): " + " -> ".join(m.name for m in path))
    bn = g.bottlenecks(3)
    if bn:
        con.print("bottlenecks: " + ", ".join(f"{m.name} ({n} depend on it)" for m, n in bn))
    nxt = g.next_ready()
    con.print(f"next: {nxt.name}" if nxt else g.why_nothing_ready())


@cli.command()
@click.argument("name")
@item_option
@pass_ctx
def runs(c: Ctx, name: str, item: int | None) -> None:
    """Every gate attempt of a milestone: when, exit, duration, reason."""
    rs = c.service.runs(name, item)

    def human(con: Console) -> None:
        from rich.table import Table

        if not rs:
            con.print(f"{name}: no gate runs yet")
            return
        t = Table(box=None, header_style="bold")
        for col in ("attempt", "started (UTC)", "outcome", "exit", "duration", "reason", "log"):
            t.add_column(col, overflow="fold")
        for r in rs:
            t.add_row(
                str(r.attempt),
                f"{r.started_at:%Y-%m-%d %H:%M:%S}",
                _styled(r.outcome.value),
                "-" if r.exit_code is None else str(r.exit_code),
                f"{r.duration:.2f} s",
                _esc(r.reason),
                r.log_path or "-",
            )
        con.print(t)

    c.emit({"milestone": name, "runs": [r.model_dump(mode="json") for r in rs]}, human)


@cli.command()
@click.argument("name")
@click.option("--attempt", type=ID, default=None, help="Attempt number (default: the last).")
@item_option
@pass_ctx
def log(c: Ctx, name: str, attempt: int | None, item: int | None) -> None:
    """Print a gate attempt's output (the whole log file).

    With --json, prints the run record with its log_path instead of the text.
    If the log file is gone, says so and prints the tail kept in the store.
    """
    r: GateRun = c.service.run(name, attempt, item)
    path = Path(r.log_path) if r.log_path else None
    exists = bool(path and path.is_file())
    if c.json:
        click.echo(json.dumps({"run": r.model_dump(mode="json"), "log_exists": exists}))
        return
    if path is not None and exists:
        with open(path, "rb") as f:
            out = sys.stdout.buffer
            shutil.copyfileobj(f, out, 1 << 16)
            out.flush()
        return
    click.echo(
        f"log file of attempt {r.attempt} of {name!r} is missing ({path}); the tail kept in the store:", err=True
    )
    click.echo(r.tail, nl=not r.tail.endswith("\n"))


@cli.command()
@click.argument("item_id", type=ID, required=False)
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1, max=1000),
    default=1,
    show_default=True,
    help="Gates running at once (lowest ids first).",
)
@click.option("--task-runner", type=click.Choice(["thread", "dask"]), default="thread", show_default=True)
@click.option("--dask-address", default=None, metavar="ADDR", help="Dask scheduler (default: a LocalCluster).")
@click.option("--until", default=None, metavar="NAME", help="Drive only NAME and what it depends on.")
@click.option("--dry-run", is_flag=True, help="Print the order a drive would take; run nothing.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              help="Write a JUnit XML report: a test case per milestone (for CI).")  # fmt: skip
@revision_option
@pass_ctx
def drive(c: Ctx, item_id: int | None, max_parallel: int, task_runner: str, dask_address: str | None,
          until: str | None, dry_run: bool, junit: Path | None, expect_revision: int | None) -> None:  # fmt: skip
    """Drive a work item through its DAG as a Prefect flow.

    Each gate runs as a Prefect task named after its milestone; failed gates
    retry within their budget, other branches go on. Exits 0 when every
    milestone is done, 1 otherwise, 130 when interrupted. Uses the workspace's
    Prefect server when `milepost server start` runs, else Prefect's temporary
    server (with its home in .milepost/prefect).
    """
    svc = c.service
    item = svc.resolve_item(item_id)
    svc.check_can_drive(item, expect_revision)
    if dry_run:
        order = svc.plan_order(item, until)
        c.emit(
            {"item": item, "order": order},
            lambda con: con.print("\n".join(f"{i}. {n}" for i, n in enumerate(order, 1)) or "nothing to run"),
        )
        return
    api = _prefect(svc.store.home, "the dask task runner (its workers)" if task_runner == "dask" else None)
    from milepost.flows.events import JsonLinesReporter, LineReporter, Reporter

    reporter: Reporter
    live = None
    if c.json:
        reporter = JsonLinesReporter()
    elif sys.stdout.isatty():
        from milepost._live import LiveReporter

        reporter = live = LiveReporter(c.console(), svc.milestone_views(item)[1])
    else:
        reporter = LineReporter()
    if api is None and not c.json:
        click.echo("using Prefect's temporary server (start `milepost server start` for the UI)", err=True)
    from milepost.flows.drive import run_drive

    try:
        summary = run_drive(
            svc, item, max_parallel=max_parallel, until=until, task_runner=task_runner, dask_address=dask_address,
            reporter=reporter, expect_revision=expect_revision,
        )  # fmt: skip
    finally:
        if live is not None:
            live.stop()
    reporter.drive_finished(summary)
    if not c.json:
        _show_summary(c.console(), summary)
    _ci_reports(svc, summary, junit)
    raise SystemExit(0 if summary.ok else 1)


def _ci_reports(svc: Service, summary: Any, junit: Path | None) -> None:
    """Where CI looks: a JUnit report (--junit), and GitHub's step summary
    (appended when GITHUB_STEP_SUMMARY names a file)."""
    from milepost import report

    if junit is not None:
        _write_file(junit, report.junit_xml(svc, summary), "--junit")
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        try:
            with open(step, "a", encoding="utf-8") as f:
                f.write(report.step_summary(svc, summary))
        except OSError as e:
            raise EnvironmentProblem(f"cannot append to GITHUB_STEP_SUMMARY {step!r}: {e.strerror or e}") from None


def _show_summary(con: Console, summary: Any) -> None:
    from rich.table import Table

    t = Table(box=None, header_style="bold")
    for col in ("id", "milestone", "status", "tries", "time", "last reason"):
        t.add_column(col, overflow="fold")
    for m in summary.milestones:
        t.add_row(str(m.id), m.name, _styled(m.view), f"{m.attempts}/{m.max_attempts}", f"{m.duration:.1f} s",
                  _esc(m.last_reason or ""))  # fmt: skip
    con.print(t)
    verdict = "[green]all done[/]" if summary.ok else "[red]not done[/]"
    con.print(f"{verdict}: {_esc(summary.message)} ({summary.gate_runs} gate runs, {summary.duration:.1f} s)")
    if summary.flow_run_url:
        con.print(f"flow run: {summary.flow_run_url}")


@cli.command()
@pass_ctx
def tick(c: Ctx) -> None:
    """One scheduler tick: expire timers and due rechecks, then drive the
    runnable items (current ones first, then queued oldest first)."""
    svc = c.service
    svc.operator = True  # the scheduler acts for every agent
    expired = svc.expire()
    driven: list[dict[str, Any]] = []
    if svc.drivable_items():  # only then is Prefect imported
        _prefect(svc.store.home)
        from milepost.flows.events import JsonLinesReporter, LineReporter, Reporter
        from milepost.flows.tick import run_tick

        reporter: Reporter = JsonLinesReporter(sys.stderr) if c.json else LineReporter()
        result = run_tick(svc, reporter)
        expired += result.expired
        driven = result.driven

    def human(con: Console) -> None:
        for line in expired:
            con.print(line)
        for d in driven:
            con.print(f"work item {d['item']}: {'all done' if d['ok'] else _esc(d['message'])}")
        if not expired and not driven:
            con.print("nothing to do: no timer or recheck due, no item with a ready milestone")

    c.emit({"expired": expired, "driven": driven}, human)


@cli.command()
@click.option("--interval", type=_Seconds(1, open_min=False), default=60, show_default=True,
              help="Seconds between ticks.")  # fmt: skip
@click.option("--name", default="milepost-tick", show_default=True, help="Deployment name.")
@pass_ctx
def serve(c: Ctx, interval: float, name: str) -> None:
    """Serve the tick flow with Prefect: a tick every INTERVAL seconds, until
    interrupted. Uses the workspace's Prefect server (`milepost server start`)
    or PREFECT_API_URL."""
    api = _prefect(_home(c), "serve", quiet=False)
    if c.db:
        os.environ["MILEPOST_DB"] = c.db  # the served flow runs open the same store
    from datetime import timedelta

    from milepost.flows.tick import tick_flow

    click.echo(f"serving {name}: a tick every {interval:g} s against {api} (Ctrl-C stops)", err=True)
    tick_flow.serve(name=name, interval=timedelta(seconds=interval))


@cli.command()
@click.option("--pool", required=True, help="Work pool (a process pool is created when missing).")
@click.option("--name", default="milepost-tick", show_default=True, help="Deployment name.")
@click.option("--interval", type=_Seconds(1, open_min=False), default=None, help="Seconds between scheduled ticks.")
@click.option(
    "--working-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder the workers run ticks in, on their machines (default: this workspace's root).",
)
@pass_ctx
def deploy(c: Ctx, pool: str, name: str, interval: float | None, working_dir: Path | None) -> None:
    """Register the tick flow as a Prefect deployment on a work pool: Prefect
    workers on any machine (`prefect worker start --pool POOL`) then run ticks
    against the shared database (MILEPOST_DB).

    A tick runs its gates in the working directory (the checkout they test)
    and keeps their logs in its .milepost/ folder. The database URL is written
    into the deployment unless it holds a password: then each worker sets
    MILEPOST_DB itself."""
    from sqlalchemy.engine import make_url

    store = c.service.store  # refuses a missing or empty store: workers would fail every tick
    _prefect(store.home, "deploy")
    env = {} if make_url(store.url).password else {"MILEPOST_DB": store.url}
    from milepost.flows.tick import deploy_tick

    folder = str((working_dir or store.root).absolute())
    dep = deploy_tick(pool, name, interval, env, folder)
    hint = "" if env else " (the URL has a password: set MILEPOST_DB on the workers)"
    c.emit(
        {"deployment_id": dep, "pool": pool, "name": f"milepost-tick/{name}", "interval": interval,
         "working_dir": folder, "db_in_deployment": bool(env)},
        lambda con: con.print(f"deployed milepost-tick/{name} on pool {pool!r} ({dep}), working dir {folder}{hint}"),
    )  # fmt: skip


@cli.group()
def server() -> None:
    """The workspace's Prefect server (UI on loopback)."""


@server.command("start")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port (default: a free one).")
@pass_ctx
def server_start(c: Ctx, port: int | None) -> None:
    """Start `prefect server start` for this workspace and wait until it answers."""
    from milepost.flows.server import server_start as start

    info = start(_home(c), port)
    c.emit(info.__dict__, lambda con: con.print(f"Prefect server up: UI {info.ui_url} (pid {info.pid})"))


@server.command("stop")
@pass_ctx
def server_stop(c: Ctx) -> None:
    """Stop the workspace's Prefect server."""
    from milepost.flows.server import server_stop as stop

    was = stop(_home(c))
    c.emit({"stopped": was}, lambda con: con.print("stopped" if was else "no server was running"))


@server.command("status")
@pass_ctx
def server_status(c: Ctx) -> None:
    """Is the workspace's Prefect server up? (exit 1 when it is not)"""
    from milepost.flows.server import server_status as status

    info = status(_home(c))
    text = f"running (pid {info.pid}), UI {info.ui_url}, healthy: {info.healthy}" if info.running else "not running"
    c.emit(info.__dict__, lambda con: con.print(text))
    if not (info.running and info.healthy):
        raise SystemExit(1)


def _prefect(home: Path, need: str | None = None, *, quiet: bool = True) -> str | None:
    """Point Prefect at this workspace (before anything imports it) and return
    the server's API URL, or None for Prefect's temporary server. With
    ``need``, a real server is required: refuse (exit 3) when none is up."""
    from milepost.flows.server import configure_prefect

    api = configure_prefect(home, quiet_console=quiet)
    if need and api is None:
        raise EnvironmentProblem(f"{need} needs a Prefect server: run `milepost server start` or set PREFECT_API_URL")
    return api


def _home(c: Ctx) -> Path:
    from milepost.workspace import resolve_workspace

    return resolve_workspace(c.db).home


@cli.command()
@click.option("--item", "item", type=ID, default=None, help="Work item id (default: this agent's current item).")
@pass_ctx
def prime(c: Ctx, item: int | None) -> None:
    """A short briefing for a coding agent's context: the focused item, ready
    milestones with their acceptance text, what blocks the rest, and how to
    prove work. Agent clients can run it in a session-start hook."""
    from milepost.agent import prime as briefing

    text = briefing(c.service, item)
    if c.json:
        click.echo(json.dumps({"briefing": text}))
    else:
        click.echo(text, nl=False)


@cli.command()
@click.option(
    "--workspace",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="The workspace to serve (default: the current folder), for clients that start servers elsewhere.",
)
@pass_ctx
def mcp(c: Ctx, workspace: Path | None) -> None:
    """Serve milepost's agent tools over MCP on stdio (for an agent client's
    mcpServers configuration): work_item, milestone, wait, graph, drive, and
    the prime prompt."""
    if workspace is not None:
        os.chdir(workspace)  # gates run, and logs are kept, in the workspace
    from milepost.mcp_server import serve_stdio

    serve_stdio(c.db, c.agent, c.operator)


@cli.command()
@item_option
@pass_ctx
def history(c: Ctx, item: int | None) -> None:
    """The append-only event log of a work item."""
    events = c.service.events(item)

    def human(con: Console) -> None:
        for e in events:
            ms = f" {e['milestone']}" if e["milestone"] else ""
            move = f" {e['from_status'] or ''} -> {e['to_status']}" if e["to_status"] else ""
            why = f" ({_esc(e['reason'])})" if e["reason"] else ""
            con.print(f"{e['at']:%Y-%m-%d %H:%M:%S} r{e['revision']} {e['agent']}: {e['action']}{ms}{move}{why}")

    c.emit({"events": [{**e, "at": e["at"].isoformat()} for e in events]}, human)


# -- entry point -------------------------------------------------------------


def _fail(as_json: bool, payload: dict[str, Any], message: str, code: int) -> NoReturn:
    if as_json:
        click.echo(json.dumps({"error": payload}))
    else:
        from milepost._text import printable

        click.echo(f"milepost: error: {printable(message)}", err=True)
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> None:
    """The entry point: run one command, turn every error into one line (or a
    JSON error document) and an exit code of the contract. ``--debug`` or
    ``MILEPOST_DEBUG=1`` adds the Python traceback."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    debug = "--debug" in args or os.environ.get("MILEPOST_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
    if not args:
        click.echo(cli.get_help(click.Context(cli, info_name="milepost")))
        raise SystemExit(0)
    previous = _sigterm_interrupts()
    try:
        cli.main(args=args, prog_name="milepost", standalone_mode=False)
    except BaseException as e:
        code, payload, message = _classify(e)
        if code is None:
            raise
        if debug and not isinstance(e, SystemExit):
            import traceback

            traceback.print_exception(e, file=sys.stderr)
        if code == 0:
            raise SystemExit(0) from None
        _fail(as_json, payload, message, code)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _sigterm_interrupts() -> Any:
    """SIGTERM (a CI timeout, ``kill``) stops a command the way Ctrl-C does:
    a running gate's process group is killed and the attempt recorded as
    interrupted, then exit 130."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def _classify(e: BaseException) -> tuple[int | None, dict[str, Any], str]:
    """(exit code, JSON error payload, one-line message) for an exception that
    ended a command; code None: let it propagate (a SystemExit of a command)."""
    if isinstance(e, SystemExit):
        return None, {}, ""
    if isinstance(e, MilepostError):
        return e.exit_code, e.to_dict(), e.message
    if isinstance(e, click.exceptions.Exit):
        if e.exit_code == 0:
            return 0, {}, ""
        return e.exit_code, {"type": "usage", "message": "exit", "exit_code": e.exit_code}, "exit"
    if isinstance(e, click.Abort | KeyboardInterrupt):
        return 130, {"type": "interrupted", "message": "interrupted", "exit_code": 130}, "interrupted"
    if isinstance(e, click.ClickException):
        message = _one_line(e.format_message())
        if isinstance(e, click.UsageError) and e.ctx is not None:
            message += f" (see `{e.ctx.command_path} --help`)"
        return 2, {"type": "usage", "message": message, "exit_code": 2}, message
    if isinstance(e, BrokenPipeError):
        # `milepost history | head -1`: the reader left; that is not an error.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0, {}, ""
    from sqlalchemy.exc import SQLAlchemyError

    if isinstance(e, SQLAlchemyError | OSError):
        what = "database" if isinstance(e, SQLAlchemyError) else "system"
        detail = _one_line(str(getattr(e, "orig", None) or e)) or type(e).__name__
        message = f"{what} error: {detail}"
        return 3, {"type": "environment", "message": message, "exit_code": 3}, message
    message = f"internal error: {type(e).__name__}: {_one_line(str(e))}; rerun with --debug for the traceback"
    return 1, {"type": "internal", "message": message, "exit_code": 1}, message


def _one_line(text: str) -> str:
    return " ".join(text.split())
