"""Milestone commands: ``add``, ``remove``, the actions (``start``,
``done``, ``needs-fix``, ...), review verdicts, ``next``, ``list``,
``runs``, ``log``."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from milepost.graph.words import count

if TYPE_CHECKING:
    from rich.console import Console

    from milepost.results import DoRun, GateRun

from milepost.cli._base import (
    DELAY,
    ID,
    RETRIES,
    SECONDS,
    Ctx,
    cli,
    item_option,
    item_synonym,
    pass_ctx,
    revision_option,
    split_deps,
    split_list,
)
from milepost.present.terminal import (
    do_outcome,
    esc,
    milestone_table,
    run_outcome,
    show_changes,
    show_done,
    show_verify,
    styled,
)


@cli.command()
@click.argument("name")
@click.option("--deps", default=None, metavar="A,B", help="Comma-separated names of milestones this one needs.")
@click.option("--acceptance", default="", help="What a reviewer checks.")
@click.option("--gate", default=None, metavar="CMD", help="Shell command that proves the milestone (exit 0 = pass).")
@click.option(
    "--retries", type=RETRIES, default=None, metavar="N", help="Retry budget: at most 1 + N gate attempts (default 2)."
)
@click.option("--timeout", type=SECONDS, default=None, help="Gate timeout in seconds.")
@click.option("--review", is_flag=True, help="Wait for an operator verdict after the gate passes.")
@click.option("--fix", default=None, metavar="CMD", help="Command run after a failed attempt, before the retry.")
@click.option(
    "--retry-delay", type=DELAY, default=None, metavar="S", help="Drive waits S, 2S, 4S ... seconds before each retry."
)
@click.option("--hypothesis", is_flag=True, help="Add as a hypothesis (confirm it later).")
@click.option(
    "--inputs",
    "inputs",
    multiple=True,
    metavar="PATTERN",
    help="Files the gate proves: gitignore-style patterns relative to the workspace root (repeat, or"
    " comma-separated), module:NAME (a module and what it imports) or env:NAME (an interpreter and its installed"
    " distributions, e.g. env:.venv/bin/python); when they change, the done milestone is stale. Default: the item's"
    " default inputs.",
)
@click.option("--no-cache", is_flag=True, help="Never let a passed run on the same gate and inputs stand in.")
@click.option("--flaky", is_flag=True, help="Retry a failure even when its inputs did not change.")
@click.option(
    "--do",
    "do",
    default=None,
    metavar="CMD",
    help="Command that does the milestone's work before its gate, in a git worktree of its own (a coding agent;"
    " docs/doers.md).",
)
@click.option("--do-timeout", type=float, default=None, metavar="SECONDS", help="Seconds before --do is killed.")
@click.option("--do-budget-usd", type=float, default=None, metavar="USD", help="Dollars its doers may cost in all.")
@click.option(
    "--do-usage",
    type=click.Choice(["claude-json", "codex-json", "file"]),
    default=None,
    help="The form of its doer's usage report (default: the item's doer.usage, else found in its output).",
)
@item_option
@revision_option
@pass_ctx
def add(
    c: Ctx,
    name: str,
    deps: str | None,
    acceptance: str,
    gate: str | None,
    retries: int | None,
    timeout: float | None,
    review: bool,
    fix: str | None,
    retry_delay: float | None,
    hypothesis: bool,
    inputs: tuple[str, ...],
    no_cache: bool,
    flaky: bool,
    do: str | None,
    do_timeout: float | None,
    do_budget_usd: float | None,
    do_usage: str | None,
    item: int | None,
    expect_revision: int | None,
) -> None:
    """Add a milestone to the current work item (at any plan status: a revision in its history)."""
    patterns = [p for value in inputs for p in split_list(value, "--inputs", "patterns")] if inputs else None
    r = c.service.add_milestone(
        name,
        split_deps(deps),
        acceptance=acceptance,
        gate=gate,
        retries=retries,
        timeout=timeout,
        review=review,
        fix=fix,
        retry_delay=retry_delay,
        hypothesis=hypothesis,
        inputs=patterns,
        cache=not no_cache,
        flaky=flaky,
        do=do,
        do_timeout=do_timeout,
        do_budget_usd=do_budget_usd,
        do_usage=do_usage,
        item=item,
        expect_revision=expect_revision,
    )
    m = r.milestone
    c.emit(
        r.model_dump(mode="json"),
        lambda con: con.print(f"added {m.name!r} (id {m.id}, {styled(m.status.value)}) to work item {r.item}"),
    )


@cli.command()
@click.argument("name")
@item_option
@revision_option
@pass_ctx
def remove(c: Ctx, name: str, item: int | None, expect_revision: int | None) -> None:
    """Remove a milestone nothing depends on and not in progress; its runs are kept as work refs."""
    r = c.service.remove_milestone(name, item=item, expect_revision=expect_revision)
    c.emit(r.model_dump(mode="json"), lambda con: con.print(f"removed {name!r} from work item {r.item}"))


@cli.command()
@click.argument("name")
@click.option(
    "--gate",
    default=None,
    metavar="CMD",
    help="The new gate: one shell command (exit 0 = pass); one with {file} runs the gate's units (its each: files,"
    " as a scaffold writes them) with it.",
)
@click.option("--deps", default=None, metavar="A,B", help="The new deps, comma-separated ('' for none).")
@click.option(
    "--inputs",
    "inputs",
    multiple=True,
    metavar="PATTERN",
    help="The new inputs, as add's: gitignore-style patterns, module:NAME or env:NAME (repeat, or"
    " comma-separated); '' for none.",
)
@click.option(
    "--retries", type=RETRIES, default=None, metavar="N", help="The new retry budget: at most 1 + N gate attempts."
)
@click.option("--timeout", type=SECONDS, default=None, help="The new gate timeout in seconds.")
@click.option("--acceptance", default=None, help="The new acceptance text.")
@click.option("--do", "do", default=None, metavar="CMD", help="The new do command ('' for none; docs/doers.md).")
@click.option("--dry-run", is_flag=True, help="Print the change and write nothing.")
@item_option
@revision_option
@pass_ctx
def edit(
    c: Ctx,
    name: str,
    gate: str | None,
    deps: str | None,
    inputs: tuple[str, ...],
    retries: int | None,
    timeout: float | None,
    acceptance: str | None,
    do: str | None,
    dry_run: bool,
    item: int | None,
    expect_revision: int | None,
) -> None:
    """Change a milestone of the current work item, at any plan status: a
    revision in its history. A changed gate, inputs or deps proves it again
    (done goes back to pending); a milestone in progress is not changed."""
    from milepost.present.terminal import show_revision

    changes: dict[str, Any] = {}
    if gate is not None:
        changes["gate"] = gate
    if deps is not None:
        changes["deps"] = split_deps(deps)
    if inputs:
        changes["inputs"] = [p for value in inputs for p in split_list(value, "--inputs", "patterns")]
    if retries is not None:
        changes["retries"] = retries
    if timeout is not None:
        changes["timeout"] = timeout
    if acceptance is not None:
        changes["acceptance"] = acceptance
    if do is not None:
        changes["do"] = do or None
    item = c.service.resolve_item(item)  # no item to edit: said first
    if not changes:
        from milepost.errors import InvalidValueError

        raise InvalidValueError(
            "nothing to change: give --gate, --deps, --inputs, --retries, --timeout, --acceptance or --do"
        )
    r = c.service.edit_milestone(name, changes, item=item, expect_revision=expect_revision, dry_run=dry_run)
    c.emit(r.model_dump(mode="json"), lambda con: show_revision(con, r))


def _action_command(action_name: str, help_text: str, needs_reason: bool) -> None:
    @click.argument("name")
    @item_option
    @revision_option
    @pass_ctx
    def command(c: Ctx, name: str, item: int | None, expect_revision: int | None, reason: str | None = None) -> None:
        from milepost.graph.status import Action

        action = Action(action_name)
        r = c.service.act(name, action, reason=reason, item=item, expect_revision=expect_revision)

        c.emit(r.model_dump(mode="json"), lambda con: show_changes(con, r.changes, name))

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


@cli.command()
@click.argument("name")
@item_option
@revision_option
@pass_ctx
def approve(c: Ctx, name: str, item: int | None, expect_revision: int | None) -> None:
    """Operator: accept a milestone waiting for review (it becomes done)."""
    r = c.service.review(name, True, item=item, expect_revision=expect_revision)
    c.emit(r.model_dump(mode="json"), lambda con: show_changes(con, r.changes, name))


@cli.command()
@click.argument("name")
@click.option("--reason", required=True, help="What is wrong (kept in the event log).")
@item_option
@revision_option
@pass_ctx
def reject(c: Ctx, name: str, reason: str, item: int | None, expect_revision: int | None) -> None:
    """Operator: refuse a milestone in review: needs_fix, or stuck when its budget is spent."""
    r = c.service.review(name, False, reason=reason, item=item, expect_revision=expect_revision)
    c.emit(r.model_dump(mode="json"), lambda con: show_changes(con, r.changes, name))


@cli.command()
@click.argument("name")
@click.option("--verdict", default=None, help="A note on the result, kept with the gate run.")
@click.option("--no-cache", is_flag=True, help="Run the gate even when a passed run on the same inputs exists.")
@item_option
@revision_option
@pass_ctx
def done(c: Ctx, name: str, verdict: str | None, no_cache: bool, item: int | None, expect_revision: int | None) -> None:
    """Finish an in-progress milestone: runs its gate here, no Prefect.

    Pass -> done. Fail -> needs_fix (exit 1), or stuck when its retry budget
    is spent. Prints the reason and where the gate's log is. A milestone with
    inputs whose gate and inputs equal a passed run anywhere in the store is
    done without running (outcome cached) unless --no-cache.
    """
    r = c.service.done(name, verdict=verdict, item=item, expect_revision=expect_revision, use_cache=not no_cache)
    c.emit(r.model_dump(mode="json"), lambda con: show_done(con, r))
    if not r.passed:
        raise SystemExit(1)


@cli.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--all", "all_", is_flag=True, help="Re-run every done milestone's gate, stale or not (implies --fresh).")
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1, max=1000),
    default=1,
    show_default=True,
    help="Gates running at once (lowest ids first; a milestone waits for the re-proofs below it).",
)
@click.option(
    "--fresh", is_flag=True, help="Run every gate it checks, even where a passed run on the same inputs exists."
)
@click.option("--no-cache", is_flag=True, help="The same as --fresh (as drive's and done's).")
@item_option
@pass_ctx
def verify(
    c: Ctx, names: tuple[str, ...], all_: bool, max_parallel: int, fresh: bool, no_cache: bool, item: int | None
) -> None:
    """Prove again what was proven: here (no Prefect), lowest id first, the
    gates of the stale milestones (done, but their inputs changed since), of
    failed ones whose inputs changed since they failed, and of those that
    wait behind them once their deps are done.

    Looks at the milestones a gate proved once (or NAMEs). A state whose gate
    and inputs equal a run that passed anywhere in the store (a file put back
    as it was) is not run again: outcome cached, naming that run; --fresh
    runs every gate it checks. Independent milestones run side by side up to
    --max-parallel (and, with 2 or more, the stale ones' changed test files
    first, together, ahead of their gates). A failing re-proof sends its milestone to needs_fix (the
    done milestones built on it wait behind it). Exit 0 when all of them end
    done and none stale (nothing stale: nothing runs), 1 otherwise. This is
    the command a CI step runs on a reused store.
    """
    for n in names:
        if n.isdigit():  # (a milestone's name starts with a letter: a number names none)
            from milepost.errors import InvalidValueError

            raise InvalidValueError(
                f"verify {n}: NAMEs are milestone names, which start with a letter; to verify work item {n},"
                f" pass --item {n} (milepost verify --item {n})"
            )
    r = c.service.verify(list(names), all_=all_, item=item, fresh=fresh or no_cache, max_parallel=max_parallel)
    c.emit(r.model_dump(mode="json"), lambda con: show_verify(con, r))
    if not r.ok:
        raise SystemExit(1)


@cli.command("next")
@click.argument("item_id", type=ID, required=False)
@item_synonym()
@pass_ctx
def next_(c: Ctx, item_id: int | None) -> None:
    """The lowest-id ready milestone, or why there is none (of ITEM_ID, default: the current item)."""
    r = c.service.next(item_id)

    def human(con: Console) -> None:
        if r.milestone is None:
            con.print(r.reason)
        else:
            m = r.milestone
            gate = f" — gate: {esc(m.gate[0].run)}" if m.gate else ""
            con.print(f"next: [bold]{m.name}[/] (id {m.id}, {m.status.value}){gate}")
            if m.acceptance:
                con.print(f"  acceptance: {esc(m.acceptance)}")

    c.emit(r.model_dump(mode="json"), human)


@cli.command("list")
@click.argument("item_id", type=ID, required=False)
@item_synonym()
@pass_ctx
def list_(c: Ctx, item_id: int | None) -> None:
    """The milestones of a work item (ITEM_ID, default: the current one) with their statuses, gates (and do:
    commands, docs/doers.md)."""
    it, views = c.service.milestone_views(item_id)
    data = {"item": it.id, "revision": it.revision, "milestones": [v.model_dump(mode="json") for v in views]}
    c.emit(data, lambda con: milestone_table(con, views))


@cli.command()
@click.argument("name")
@item_option
@pass_ctx
def inputs(c: Ctx, name: str, item: int | None) -> None:
    """The files a milestone's inputs stand for now: each pattern's matches,
    each module:NAME entry's module with what it imports as the code is (a
    test file's: with pytest's configuration), and each env:NAME entry's
    interpreter with its installed distributions."""
    data = c.service.input_files(name, item)

    def human(con: Console) -> None:
        if not data["inputs"]:
            con.print(f"{name}: no inputs (its proof is bound to no files)")
            return
        for e in data["inputs"]:
            env = e.get("environment")
            found = count(len(e["files"]), "file")
            if env is not None:
                dists = env["distributions"]
                found = f"{env['interpreter']} (Python {env['version']}), {count(len(dists), 'distribution')}"
            con.print(f"{esc(e['entry'])}: {esc(e['missing']) if e['missing'] else esc(found)}")
            for f in e["files"]:
                con.print(f"  {esc(f)}")
            for f in e.get("config", []):
                con.print(f"  {esc(f)} (the test runner's configuration)")
            for d, v in (env or {}).get("distributions", {}).items():
                con.print(f"  {esc(d)} {esc(v)}")
        n = len(data["files"])
        con.print(f"{count(n, 'file')} in all")

    c.emit(data, human)


@cli.command()
@click.argument("name")
@item_option
@pass_ctx
def runs(c: Ctx, name: str, item: int | None) -> None:
    """Every gate attempt of a milestone: when, exit, duration, reason (and
    its doer's, for a milestone with do:)."""
    rs = c.service.runs(name, item)
    ds = c.service.do_runs(name, item)

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
                styled(r.outcome.value),
                "-" if r.exit_code is None else str(r.exit_code),
                f"{r.duration:.2f} s",
                esc(r.reason),
                r.log_path or "-",
            )
        con.print(t)
        if ds:
            _show_do_runs(con, ds)

    data: dict[str, Any] = {"milestone": name, "runs": [r.model_dump(mode="json") for r in rs]}
    if ds:
        data["do_runs"] = [d.model_dump(mode="json") for d in ds]
    c.emit(data, human)


def _show_do_runs(con: Console, ds: list[Any]) -> None:
    """The doers' attempts: outcome, exit, duration, cost, what they changed, the merge."""
    from rich.table import Table

    con.print("\n[bold]do[/] (the doer before each gate)")
    t = Table(box=None, header_style="bold")
    cols = ("attempt", "outcome", "exit", "duration", "cost", "tokens", "session", "change", "merged", "reason")
    for col in cols:
        t.add_column(col, overflow="fold")
    for d in ds:
        t.add_row(
            str(d.attempt),
            styled(d.outcome),
            "-" if d.exit_code is None else str(d.exit_code),
            f"{d.duration:.2f} s",
            "-" if d.cost_usd is None else f"${d.cost_usd:.2f}",
            "-" if d.tokens is None else str(d.tokens),
            esc(d.session or "-"),
            esc(_change(d)),
            (d.merge_commit or "-")[:10],
            esc(d.reason),
        )
    con.print(t)
    for d in ds:
        if d.usage_warning:
            con.print(f"[yellow]warning:[/] attempt {d.attempt}: its usage report was not read: {esc(d.usage_warning)}")


def _change(d: Any) -> str:
    """A do run's change: its diff stat, then the files it touched (the first three)."""
    stat = (d.diff_stat or "-").strip()
    files = list(d.files or [])
    if not files:
        return stat
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return f"{stat}: {shown}"


@cli.command()
@click.argument("name")
@click.option("--attempt", type=ID, default=None, help="Attempt number (default: the last).")
@click.option(
    "--do",
    "do",
    is_flag=True,
    help="The doer's log of the attempt (attempt-N.do.log, docs/doers.md) instead of its gate's; the last"
    " attempt that ran a doer by default.",
)
@item_option
@pass_ctx
def log(c: Ctx, name: str, attempt: int | None, do: bool, item: int | None) -> None:
    """Print a gate attempt's output (the whole log file), then a line with
    its outcome (and its doer's, for a milestone with do:).

    With --json, prints the run record with its log_path instead of the text
    (and the attempt's do_run when a doer ran). If the log file is gone, says
    so and prints the tail kept in the store. With --do, the doer's log and
    outcome; with --json, its do_run, the gate's run (null before its gate
    ended) and whether the doer's log exists.
    """
    if do:
        _do_log(c, name, attempt, item)
        return
    r: GateRun = c.service.run(name, attempt, item)
    d = _do_run_of(c, name, r.attempt, item)
    path = Path(r.log_path) if r.log_path else None
    exists = bool(path and path.is_file())
    if c.json:
        data: dict[str, Any] = {"run": r.model_dump(mode="json"), "log_exists": exists}
        if d is not None:
            data["do_run"] = d.model_dump(mode="json")
        click.echo(json.dumps(data))
        return
    ends_line = _print_log(path, exists, r.tail, f"log file of attempt {r.attempt} of {name!r}")
    click.echo(("" if ends_line else "\n") + run_outcome(r, d))  # the attempt's outcome, last


def _do_run_of(c: Ctx, name: str, attempt: int, item: int | None) -> DoRun | None:
    """The do run of ``attempt``, if a doer ran in it."""
    return next((d for d in c.service.do_runs(name, item) if d.attempt == attempt), None)


def _do_log(c: Ctx, name: str, attempt: int | None, item: int | None) -> None:
    """``log --do``: the doer's log of an attempt, then its outcome."""
    from milepost.errors import NotFoundError

    d = c.service.do_run(name, attempt, item)
    try:
        r: GateRun | None = c.service.run(name, d.attempt, item)
    except NotFoundError:
        r = None  # its gate has not ended yet
    path = Path(d.log_path) if d.log_path else None
    exists = bool(path and path.is_file())
    if c.json:
        run = r.model_dump(mode="json") if r is not None else None
        click.echo(json.dumps({"do_run": d.model_dump(mode="json"), "run": run, "log_exists": exists}))
        return
    ends_line = _print_log(path, exists, d.tail, f"the doer's log file of attempt {d.attempt} of {name!r}")
    click.echo(("" if ends_line else "\n") + f"=== attempt {d.attempt} {do_outcome(d)}")


def _print_log(path: Path | None, exists: bool, tail: str, what: str) -> bool:
    """Copy the log at ``path`` to stdout (when it is gone, say so and print
    ``tail``, kept in the store). Returns whether the output ends a line."""
    if path is not None and exists:
        with open(path, "rb") as f:
            out = sys.stdout.buffer
            shutil.copyfileobj(f, out, 1 << 16)
            ends_line = f.tell() == 0 or (f.seek(-1, 1) >= 0 and f.read(1) == b"\n")
            out.flush()
        return ends_line
    click.echo(f"{what} is missing ({path}); the tail kept in the store:", err=True)
    click.echo(tail, nl=False)
    return not tail or tail.endswith("\n")
