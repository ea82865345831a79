"""Commands for the store and work items: ``init``, ``item ...``, ``ref ...``, ``history``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from milepost.errors import InvalidValueError

if TYPE_CHECKING:
    from rich.console import Console


from milepost.cli._base import (
    ID,
    PLAN_STATUS,
    RETRIES,
    SECONDS,
    Ctx,
    choice,
    cli,
    item_option,
    item_synonym,
    pass_ctx,
    plan_status_of,
    revision_option,
)
from milepost.graph.status import ItemFilter, WaitKind
from milepost.graph.words import count
from milepost.present.terminal import (
    esc,
    milestone_table,
    styled,
)


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
    data = {
        "home": str(ws.home),
        "root": str(ws.root),
        "db": mask_url(url),
        "created": store.created,
        "store_id": store.id,
    }
    verb = "initialized" if store.created else "already initialized:"
    c.emit(data, lambda con: con.print(f"{verb} milepost store {store.id} in {ws.home} (db {mask_url(url)})"))


# -- work items --------------------------------------------------------------


@cli.group()
def item() -> None:
    """Work items: create, list, show, update, pick, wait, wake, complete, cancel."""


@item.command("create")
@click.argument("objective")
@click.option(
    "--plan-status",
    type=PLAN_STATUS,
    default="draft",
    show_default=True,
    help="ready: stable enough to execute (the plan still changes: plan apply --item, edit, add, remove).",
)
@click.option("--retries", type=RETRIES, default=None, help="Default retry budget of its milestones.")
@click.option("--timeout", type=SECONDS, default=None, help="Default gate timeout (s).")
@click.option("--after", type=ID, default=None, metavar="ID", help="Wait until work item ID is completed.")
@pass_ctx
def item_create(
    c: Ctx, objective: str, plan_status: str, retries: int | None, timeout: float | None, after: int | None
) -> None:
    """Create a work item (with its plan.md) and make it this agent's current item."""
    from milepost.graph.models import DEFAULT_RETRIES, ItemDefaults

    defaults = ItemDefaults(retries=DEFAULT_RETRIES if retries is None else retries, timeout=timeout)
    it = c.service.create_item(objective, plan_status=plan_status_of(plan_status), defaults=defaults, after=after)
    c.emit(
        it.model_dump(mode="json"), lambda con: con.print(f"created work item {it.id}: {esc(it.objective)} (current)")
    )


@item.command("list")
@click.option(
    "--filter",
    "filter_",
    default="all",
    show_default=True,
    type=choice(ItemFilter),
    help="Which items: by state, this agent's current one, or by readiness.",
)
@click.option("--limit", type=ID, default=None, metavar="N", help="At most the first N items that match, oldest first.")
@pass_ctx
def item_list(c: Ctx, filter_: str, limit: int | None) -> None:
    """List work items with their readiness (and why)."""
    items = c.service.list_items(filter_, limit)

    def human(con: Console) -> None:
        from rich.table import Table

        if not items and filter_ != "all":
            con.print(f"no work item matches --filter {filter_}; `milepost item list` lists them all")
            return
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
                styled(i.readiness),
                esc(i.readiness_reason),
                i.plan_status,
                str(i.revision),
                counts or "-",
                esc(i.objective),
            )
        con.print(t)

    c.emit({"items": [i.model_dump(mode="json") for i in items]}, human)


@item.command("show")
@click.argument("item_id", type=ID, required=False)
@item_synonym()
@pass_ctx
def item_show(c: Ctx, item_id: int | None) -> None:
    """Show a work item and its milestones (default: the current item)."""
    _show_item(c, item_id)


def readiness_why(state: str, reason: str) -> str:
    """The fine state and the reason, the state left out where the reason already starts with it
    (``stuck: merge``, ``in progress: lint``, ``completed with a report``), never said twice."""
    words = state.replace("_", " ")
    return reason if reason == words or reason.startswith((f"{words}:", f"{words} ")) else f"{state}: {reason}"


def _show_item(c: Ctx, item_id: int | None) -> None:
    from milepost.results import item_with_views

    svc = c.service
    it, views = svc.milestone_views(item_id)
    plan = svc.plan_artifact(it.id)
    refs = svc.refs(it.id)

    def human(con: Console) -> None:
        con.print(f"[bold]work item {it.id}[/]: {esc(it.objective)}")
        con.print(
            f"state {styled(it.state.value)} · readiness {styled(it.readiness)}"
            f" ({esc(readiness_why(it.readiness_state, it.readiness_reason))}) · plan {it.plan_status.value}"
            f" · revision {it.revision}"
            f" · agent {it.agent}{' · current' if it.current else ''}"
        )
        for w in it.waits:
            on = f" on {w.resource}" if w.resource else ""
            until = f" until {w.deadline:%Y-%m-%d %H:%M:%S %Z}" if w.deadline else ""
            con.print(f"wait: {w.kind}{on}{until}: {esc(w.reason)}")
        if it.blocked_by:
            con.print(f"blocked by: {esc(it.blocked_by)}")
        if it.after is not None:
            con.print(f"after work item {it.after}")
        if it.recheck_at:
            con.print(f"recheck at: {it.recheck_at:%Y-%m-%d %H:%M:%S %Z}")
        size = f", {plan.size} bytes, sha256 {plan.sha256[:12]}" if plan.sha256 else ""
        con.print(f"plan: {esc(plan.path)} ({plan.status}{size})")
        for t in it.todo_list:
            mark = {"completed": "x", "in_progress": "~"}.get(t.state, " ")
            con.print(f"  [{mark}] {esc(t.text)}")
        milestone_table(con, views)
        if refs:
            con.print(f"evidence: {count(len(refs), 'ref')} (last: {refs[-1].kind} {esc(refs[-1].ref)})")
        if it.report:
            con.print(f"report: {esc(it.report)}")

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
@click.option("--objective", default=None, help="The item's new objective.")
@click.option(
    "--plan-status",
    type=PLAN_STATUS,
    default=None,
    help="ready: stable enough to execute (the plan still changes: plan apply --item, edit, add, remove).",
)
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
@item_synonym()
@pass_ctx
def item_update(
    c: Ctx,
    item_id: int | None,
    objective: str | None,
    plan_status: str | None,
    todo: tuple[str, ...],
    clear_todo: bool,
    blocked_by: str | None,
    clear_blocked_by: bool,
    recheck_at: str | None,
    expect_revision: int | None,
) -> None:
    """Change a work item (default: the current one): objective, plan status, todo list, blocker, recheck time."""
    if todo and clear_todo:
        raise InvalidValueError("--todo and --clear-todo contradict each other: use one")
    it = c.service.update_item(
        item_id,
        objective=objective,
        plan_status=plan_status_of(plan_status),
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
@click.argument("item_id", type=ID, required=False)
@click.option("--clear-blocker", is_flag=True, help="Also clear its resolved blocker and waits (needs --reason).")
@click.option("--reason", default=None, help="Why the blocker is resolved.")
@revision_option
@item_synonym(required=True)
@pass_ctx
def item_pick(c: Ctx, item_id: int, clear_blocker: bool, reason: str | None, expect_revision: int | None) -> None:
    """Make ITEM_ID this agent's current work item (a blocked one stays blocked)."""
    it = c.service.pick(item_id, clear_blocker=clear_blocker, reason=reason, expect_revision=expect_revision)
    c.emit(
        it.model_dump(mode="json"),
        lambda con: con.print(f"current work item: {it.id} ({esc(it.objective)}), {styled(it.readiness)}"),
    )


@item.command("wait")
@click.argument("item_id", type=ID, required=False)
@click.option("--wake", "kind", required=True, type=choice(WaitKind), help="What wakes the item.")
@click.option("--resource", default=None, help="The task id or outside object (PR, CI run, URL) it waits on.")
@click.option("--until", default=None, metavar="TIME", help="Timer deadline, ISO 8601 with a zone.")
@click.option("--reason", required=True, help="Why it waits.")
@revision_option
@item_synonym()
@pass_ctx
def item_wait(
    c: Ctx,
    item_id: int | None,
    kind: str,
    resource: str | None,
    until: str | None,
    reason: str,
    expect_revision: int | None,
) -> None:
    """Record that a work item waits (replaces its earlier wait)."""
    it = c.service.wait_item(
        kind, reason, resource=resource, until=_time(until, "--until"), item=item_id, expect_revision=expect_revision
    )
    c.emit(it.model_dump(mode="json"), lambda con: con.print(f"work item {it.id} waits: {esc(it.readiness_reason)}"))


@item.command("wake")
@click.option("--resource", required=True, metavar="RESOURCE", help="The task or outside object that changed.")
@pass_ctx
def item_wake(c: Ctx, resource: str) -> None:
    """An external event: settle every wait on RESOURCE (none matching is fine)."""
    woken = c.service.wake(resource)
    text = f"woke work item(s) {', '.join(map(str, woken))}" if woken else f"no wait matches resource {resource!r}"
    c.emit({"resource": resource, "woken": woken}, lambda con: con.print(esc(text)))


@item.command("complete")
@click.argument("item_id", type=ID, required=False)
@click.option("--report", default=None, help="What was achieved (required, or --report-file).")
@click.option(
    "--report-file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="The report, read from FILE."
)
@revision_option
@item_synonym()
@pass_ctx
def item_complete(
    c: Ctx, item_id: int | None, report: str | None, report_file: Path | None, expect_revision: int | None
) -> None:
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
            con.print(f"[yellow]warning:[/] {esc(w)}")

    c.emit(r.model_dump(mode="json"), human)


@item.command("cancel")
@click.argument("item_id", type=ID, required=False)
@click.option("--reason", required=True, help="Why the work is abandoned.")
@revision_option
@item_synonym()
@pass_ctx
def item_cancel(c: Ctx, item_id: int | None, reason: str, expect_revision: int | None) -> None:
    """Abandon a work item (state cancelled, with the reason)."""
    it = c.service.cancel(reason, item=item_id, expect_revision=expect_revision)
    c.emit(it.model_dump(mode="json"), lambda con: con.print(f"cancelled work item {it.id}: {esc(reason)}"))


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
    c.emit(r.model_dump(mode="json"), lambda con: con.print(f"added {esc(r.kind)} {esc(r.ref)}"))


@ref.command("list")
@click.argument("item_id", type=ID, required=False)
@item_synonym()
@pass_ctx
def ref_list(c: Ctx, item_id: int | None) -> None:
    """The evidence of a work item (ITEM_ID, default: the current one)."""
    refs = c.service.refs(item_id)

    def human(con: Console) -> None:
        for r in refs:
            ref = f" {esc(r.ref)}" if r.ref else ""  # (a cached run has no log of its own)
            con.print(f"{r.at:%Y-%m-%d %H:%M:%S} {r.kind}{ref} {esc(r.reason)}")

    c.emit({"work_refs": [r.model_dump(mode="json") for r in refs]}, human)


# -- milestones --------------------------------------------------------------


@cli.command()
@click.argument("item_id", type=ID, required=False)
@item_synonym()
@pass_ctx
def history(c: Ctx, item_id: int | None) -> None:
    """The append-only event log of a work item (ITEM_ID, default: the current one)."""
    events = c.service.events(item_id)

    def human(con: Console) -> None:
        for e in events:
            ms = f" {e['milestone']}" if e["milestone"] else ""
            came = f" {e['from_status']}" if e["from_status"] else ""  # 'add a -> pending': one space
            move = f"{came} -> {e['to_status']}" if e["to_status"] else ""
            why = f" ({esc(e['reason'])})" if e["reason"] else ""
            con.print(f"{e['at']:%Y-%m-%d %H:%M:%S} r{e['revision']} {e['agent']}: {e['action']}{ms}{move}{why}")

    c.emit({"events": [{**e, "at": e["at"].isoformat()} for e in events]}, human)


# -- entry point -------------------------------------------------------------
