"""Runtime commands (the ones that may start Prefect or serve): ``drive``,
``tick``, ``serve``, ``deploy``, ``server``, ``mcp``, ``prime``."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from milepost.errors import EnvironmentProblem
from milepost.events import DriveInterrupted
from milepost.extras import require_task_runner

if TYPE_CHECKING:
    from rich.console import Console

    from milepost.events import DriveSummary, Reporter
    from milepost.flows.early import EarlyStart
    from milepost.present.live import LiveReporter
    from milepost.service import Service

from milepost.cli._base import (
    ID,
    Ctx,
    PrefectLost,
    Seconds,
    cli,
    home_of,
    item_option,
    item_synonym,
    pass_ctx,
    revision_option,
    write_file,
)
from milepost.present.terminal import (
    esc,
    show_dry_run,
    show_summary,
)


def prefect_env(home: Path, need: str | None = None, *, quiet: bool = True) -> str | None:
    """Point Prefect at this workspace (before anything imports it) and return
    the server's API URL, or None for Prefect's temporary server. With
    ``need``, a real server is required: refuse (exit 3) when none is up."""
    from milepost.flows.server import configure_prefect

    api = configure_prefect(home, quiet_console=quiet)
    if need and api is None:
        raise EnvironmentProblem(
            f"{need} needs a Prefect server and none is up: run `milepost server start` (it runs until"
            " `milepost server stop`) or set PREFECT_API_URL"
        )
    return api


def drive_server(home: Path, say: bool = True, *, quiet: bool = True, by: str = "drive") -> tuple[str, str]:
    """The Prefect server a drive (or tick, or serve) talks to, started when
    none is up (MILEPOST_SERVER: in the background, kept for the next drives
    until unused for MILEPOST_SERVER_IDLE; or a temporary one, stopped with
    this process); both in a session of their own, so Ctrl-C in a terminal
    reaches the drive, not its server. (API URL, how: see ensure_server.)"""
    from milepost.flows.server import configure_prefect, ensure_server
    from milepost.settings import load_settings

    settings = load_settings()
    # Set by the user, not by configure_prefect naming the workspace's running server: a drive on that one is
    # marked as its user, so its keeper does not stop it as unused (a drive between its polls went unseen).
    explicit = bool(os.environ.get("PREFECT_API_URL"))
    configure_prefect(home, quiet_console=quiet)

    def tell(line: str) -> None:
        if say:
            click.echo(line, err=True)

    api, how = ensure_server(home, settings.server, settings.server_idle, tell, by=by, explicit=explicit)
    if how == "started":
        from milepost.flows.server import server_status

        info = server_status(home)
        tell(
            f"Prefect server up in the background: UI {info.ui_url} (pid {info.pid}); it stops itself after"
            f" {_duration(settings.server_idle)} unused, `milepost server stop` stops it now"
        )
    elif how == "temporary":
        tell("using a temporary Prefect server (MILEPOST_SERVER=temporary): no UI, it stops with this drive")
    return api, how


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


@cli.command()
@click.argument("item_id", type=ID, required=False)
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1, max=1000),
    default=1,
    show_default=True,
    help="Gates running at once (lowest ids first).",
)
@click.option(
    "--max-doers",
    type=click.IntRange(min=1, max=1000),
    default=1,
    show_default=True,
    help="Doers (do: commands) running at once, apart from --max-parallel's gates (docs/doers.md).",
)
@click.option(
    "--task-runner",
    type=click.Choice(["thread", "dask"]),
    default="thread",
    show_default=True,
    help="Where the gates' tasks run: threads of this process, or Dask workers (pip install 'milepost[dask]').",
)
@click.option("--dask-address", default=None, metavar="ADDR", help="Dask scheduler (default: a LocalCluster).")
@click.option("--until", default=None, metavar="NAME", help="Drive only NAME and what it depends on.")
@click.option("--dry-run", is_flag=True, help="Print the order a drive would take; run nothing.")
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Write a JUnit XML report: a test case per milestone (for CI); a milestone with do: carries its"
    " doer's evidence as do_* properties.",
)
@click.option("--no-cache", is_flag=True, help="Run every gate, even where a passed run on the same inputs exists.")
@click.option(
    "--wait-recorded",
    is_flag=True,
    help="Before exiting, wait until the Prefect server has recorded every task run of the drive"
    " (always so with Prefect's temporary server; use it before `milepost server stop`).",
)
@revision_option
@item_synonym()
@pass_ctx
def drive(
    c: Ctx,
    item_id: int | None,
    max_parallel: int,
    max_doers: int,
    task_runner: str,
    dask_address: str | None,
    until: str | None,
    dry_run: bool,
    junit: Path | None,
    no_cache: bool,
    wait_recorded: bool,
    expect_revision: int | None,
) -> None:
    """Drive a work item through its DAG as a Prefect flow.

    Each gate runs as a Prefect task named after its milestone; failed gates
    retry within their budget, other branches go on. Stale milestones (done,
    but their inputs changed since) are re-proven first; a failure whose
    inputs did not change is not retried blindly. Exits 0 when every
    milestone (of --until's scope) is done and none is stale, 1 otherwise,
    130 when interrupted, 3 when the database or the Prefect API is lost
    (running gates finish and are recorded, or recovered by the next drive
    from their files). Uses the workspace's Prefect server when one runs,
    else starts it in the background, kept for the next drives until unused
    for MILEPOST_SERVER_IDLE seconds (MILEPOST_SERVER=temporary: a server
    for this drive only); its home is .milepost/prefect. When doers ran
    (do:, docs/doers.md), the summary adds their count, cost and tokens.
    """
    svc = c.service
    item = svc.resolve_item(item_id)
    svc.check_can_drive(item, expect_revision, until=until)
    if dry_run:
        plan = svc.plan_order(item, until)
        c.emit(plan.model_dump(mode="json"), lambda con: show_dry_run(con, plan))
        return
    require_task_runner(task_runner)  # before a server starts or a gate runs
    t0, began = time.monotonic(), datetime.now(UTC)
    from milepost.service.drive import nothing_to_run

    summary = nothing_to_run(svc, item, until)  # answered from the store: no server, no Prefect
    if summary is not None:
        summary.duration = time.monotonic() - t0
    else:
        api, how = drive_server(svc.store.home, say=not c.json)
        from milepost.flows.early import start_first_gates
        from milepost.flows.server import healthy

        reporter, live = _reporter(c, svc, item, began)
        try:
            # The first gate starts now, on the other core, while Prefect is imported (flows/early.py); not when
            # the API PREFECT_API_URL names does not answer (the drive then ends with exit 3, having run nothing).
            early = None
            if how != "env" or healthy(api, timeout=5):
                early = start_first_gates(
                    svc,
                    item,
                    max_parallel=max_parallel,
                    task_runner=task_runner,
                    until=until,
                    expect_revision=expect_revision,
                    use_cache=not no_cache,
                    checked=how != "started",  # (nothing_to_run said so above; not when a server took seconds)
                )
            if live is not None and early is not None:  # the live table from the first gate on
                for gate in early.gates:
                    live.gate_started(gate.claim, gate.started)
            summary = _run_drive(
                svc,
                item,
                (max_parallel, max_doers),
                until,
                task_runner,
                dask_address,
                expect_revision,
                not no_cache,
                wait_recorded or how == "temporary",
                early,
                reporter,
                t0,
            )
        except DriveInterrupted as stopped:  # Ctrl-C: what it did and what is left, then exit 130
            summary = stopped.summary
        finally:
            if live is not None:
                live.stop()
    _tell_end(c, svc, summary, junit)
    if summary.interrupted:
        raise KeyboardInterrupt
    raise (PrefectLost if summary.prefect_lost else SystemExit)(0 if summary.ok else 1)


def _stopped_summary(svc: Service, item: int, until: str | None, t0: float) -> DriveSummary:
    """A drive interrupted before its flow run summed up (while Prefect loaded, say): its summary from the store."""
    from milepost.service.drive import interrupted_summary

    summary = interrupted_summary(svc, item, until)
    summary.duration = time.monotonic() - t0
    return summary


def _tell_end(c: Ctx, svc: Service, summary: DriveSummary, junit: Path | None) -> None:
    """The drive's verdict, once: its table (or JSON ``drive_finished``), and the CI reports."""
    if c.json:
        from milepost.events import JsonLinesReporter

        JsonLinesReporter().drive_finished(summary)
    else:
        show_summary(c.console(), summary)
    _ci_reports(svc, summary, junit)


def _reporter(c: Ctx, svc: Service, item: int, began: datetime) -> tuple[Reporter, LiveReporter | None]:
    """The drive's reporter (JSON lines, the live table on a terminal, else
    lines), made as the drive starts: the opening stamped with ``began``, the
    live table shown from then on (its first gates start before Prefect loads)."""
    from milepost.events import JsonLinesReporter, LineReporter

    if c.json:
        return JsonLinesReporter(started=began), None
    if sys.stdout.isatty():
        from milepost.present.live import LiveReporter

        live = LiveReporter(c.console(), svc.milestone_views(item)[1])
        live.show()
        return live, live
    return LineReporter(started=began), None


def _run_drive(
    svc: Service,
    item: int,
    workers: tuple[int, int],
    until: str | None,
    task_runner: str,
    dask_address: str | None,
    expect_revision: int | None,
    use_cache: bool,
    wait_recorded: bool,
    early: EarlyStart | None,
    reporter: Reporter,
    t0: float,
) -> DriveSummary:
    """The drive's flow run. Interrupted, it raises :class:`DriveInterrupted`
    with what it did and what is left: the flow run's summary, or the store's
    when it never summed up (a Ctrl-C while Prefect loaded, its first gates
    stopped and recorded)."""
    from milepost.cli._interrupts import import_keeping_interrupts

    try:
        import_keeping_interrupts("milepost.flows.drive")  # (and so Prefect, a Ctrl-C during it kept)
        from milepost.flows.drive import run_drive

        return run_drive(
            svc,
            item,
            max_parallel=workers[0],
            max_doers=workers[1],
            until=until,
            task_runner=task_runner,
            dask_address=dask_address,
            reporter=reporter,
            expect_revision=expect_revision,
            use_cache=use_cache,
            wait_recorded=wait_recorded,  # (always with the temporary server: it stops with this process)
            early=early,
        )
    except BaseException as e:
        if early is not None:  # (before the loop took it over: while Prefect was imported, say)
            early.settle(interrupt=not isinstance(e, Exception))
        if isinstance(e, KeyboardInterrupt) and not isinstance(e, DriveInterrupted):
            raise DriveInterrupted(_stopped_summary(svc, item, until, t0)) from e
        raise


def _ci_reports(svc: Service, summary: Any, junit: Path | None) -> None:
    """Where CI looks: a JUnit report (--junit), and GitHub's step summary
    (appended when GITHUB_STEP_SUMMARY names a file)."""
    from milepost.present import report

    if junit is not None:
        write_file(junit, report.junit_xml(svc, summary), "--junit")
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        try:
            with open(step, "a", encoding="utf-8") as f:
                f.write(report.step_summary(svc, summary))
        except OSError as e:
            raise EnvironmentProblem(f"cannot append to GITHUB_STEP_SUMMARY {step!r}: {e.strerror or e}") from None


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
        drive_server(svc.store.home, say=not c.json, by="tick")
        from milepost.cli._interrupts import import_keeping_interrupts
        from milepost.events import JsonLinesReporter, LineReporter

        import_keeping_interrupts("milepost.flows.tick")  # (Prefect: a Ctrl-C during its import kept)
        from milepost.flows.tick import run_tick

        reporter: Reporter = JsonLinesReporter(sys.stderr) if c.json else LineReporter()
        result = run_tick(svc, reporter)
        expired += result.expired
        driven = result.driven

    def human(con: Console) -> None:
        for line in expired:
            con.print(line)
        for d in driven:
            con.print(f"work item {d['item']}: {'all done' if d['ok'] else esc(d['message'])}")
        if not expired and not driven:
            con.print("nothing to do: no timer or recheck due, no item with a ready milestone")

    c.emit({"expired": expired, "driven": driven}, human)


@cli.command()
@click.option(
    "--interval", type=Seconds(1, open_min=False), default=60, show_default=True, help="Seconds between ticks."
)
@click.option("--name", default="milepost-tick", show_default=True, help="Deployment name.")
@pass_ctx
def serve(c: Ctx, interval: float, name: str) -> None:
    """Serve the tick flow with Prefect: a tick every --interval seconds, one
    at a time (a tick that outlasts the interval delays the next), until
    interrupted. Uses the workspace's Prefect server (PREFECT_API_URL, or the
    one `milepost server start` or a drive started), else starts it as a drive
    does (MILEPOST_SERVER: in the background, or a temporary one)."""
    api, _ = drive_server(home_of(c), quiet=False, by="serve")
    if c.db:
        os.environ["MILEPOST_DB"] = c.db  # the served flow runs open the same store
    from datetime import timedelta

    from milepost.flows.tick import tick_flow

    click.echo(f"serving {name}: a tick every {interval:g} s against {api} (Ctrl-C stops)", err=True)
    # One tick at a time: a tick drives everything that is due, so a second
    # one beside it has nothing to add; unbounded, ticks slower than the
    # interval piled up, each a Python process, and starved one another.
    tick_flow.serve(name=name, interval=timedelta(seconds=interval), limit=1)
    # It returns once Ctrl-C or SIGTERM stopped it (Prefect's runner catches both): exit 130, as an interrupted
    # command does (docs/cli.md), where it exited 0.
    raise KeyboardInterrupt


@cli.command()
@click.option("--pool", required=True, help="Work pool (a process pool is created when missing).")
@click.option("--name", default="milepost-tick", show_default=True, help="Deployment name.")
@click.option("--interval", type=Seconds(1, open_min=False), default=None, help="Seconds between scheduled ticks.")
@click.option(
    "--working-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder the workers run ticks in, on their machines (default: this workspace's root).",
)
@pass_ctx
def deploy(c: Ctx, pool: str, name: str, interval: float | None, working_dir: Path | None) -> None:
    """Register the tick flow as a Prefect deployment on a work pool: Prefect
    workers on any machine (`PREFECT_API_URL=URL prefect worker start --pool
    POOL`, the command it prints) then run ticks against the shared database
    (MILEPOST_DB).

    A tick runs its gates in the working directory (the checkout they test)
    and keeps their logs in its .milepost/ folder. The database URL is written
    into the deployment unless it holds a password: then each worker sets
    MILEPOST_DB itself."""
    from sqlalchemy.engine import make_url

    store = c.service.store  # refuses a missing or empty store: workers would fail every tick
    # Not started here: workers need a server that stays up (a drive's background one stops when unused).
    api = prefect_env(store.home, "deploy")
    env = {} if make_url(store.url).password else {"MILEPOST_DB": store.url}
    from milepost.flows.tick import deploy_tick

    folder = str((working_dir or store.root).absolute())
    dep = deploy_tick(pool, name, interval, env, folder)
    hint = "" if env else " (the URL has a password: set MILEPOST_DB on the workers)"
    # A worker finds the deployment only on this server: `prefect worker start` alone refuses to start.
    worker = f"PREFECT_API_URL={shlex.quote(api or '')} prefect worker start --pool {shlex.quote(pool)}"
    c.emit(
        {
            "deployment_id": dep,
            "pool": pool,
            "name": f"milepost-tick/{name}",
            "interval": interval,
            "working_dir": folder,
            "db_in_deployment": bool(env),
            "api_url": api,
            "worker": worker,
        },
        lambda con: con.print(
            f"deployed milepost-tick/{name} on pool {pool!r} ({dep}), working dir {folder}{hint}\n"
            f"start its workers with: {esc(worker)}"
        ),
    )


@cli.group()
def server() -> None:
    """The workspace's Prefect server (UI on loopback)."""


@server.command("start")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port (default: a free one).")
@click.option(
    "--idle",
    type=Seconds(1, open_min=False),
    default=None,
    metavar="SECONDS",
    help="Stop by itself once unused for SECONDS (default: run until `milepost server stop`).",
)
@pass_ctx
def server_start(c: Ctx, port: int | None, idle: float | None) -> None:
    """Start `prefect server start` for this workspace, in the background,
    and wait until it answers. (A drive starts one by itself when none is up.)"""
    from milepost.flows.server import server_start as start

    info = start(home_of(c), port, idle=idle)
    c.emit(info.__dict__, lambda con: con.print(f"Prefect server up: UI {info.ui_url} (pid {info.pid})"))


@server.command("stop")
@pass_ctx
def server_stop(c: Ctx) -> None:
    """Stop the workspace's Prefect server."""
    from milepost.flows.server import server_stop as stop

    was = stop(home_of(c))
    c.emit({"stopped": was}, lambda con: con.print("stopped" if was else "no server was running"))


@server.command("status")
@pass_ctx
def server_status(c: Ctx) -> None:
    """Is the workspace's Prefect server up, who started it, when does it
    stop? (exit 1 when it is not up)"""
    from milepost.flows.server import server_status as status

    info = status(home_of(c))
    text = status_text(info)
    c.emit(info.__dict__, lambda con: con.print(esc(text)))
    if not (info.running and info.healthy):
        raise SystemExit(1)


def status_text(info: Any, now: float | None = None) -> str:
    """``server status``'s line. "unused for N s" only where its keeper tracks
    its use (a server that stops itself once unused: --idle); else its use is
    said to be untracked, not guessed from a stale file."""
    if not info.running:
        return "not running"
    text = f"running (pid {info.pid}), UI {info.ui_url}, healthy: {info.healthy}"
    text += f", started by `milepost {info.started_by}`" if info.started_by else ""
    if info.users:
        text += f"; in use by {info.users} milepost command{'s' if info.users != 1 else ''}"
    elif info.idle is not None and info.last_use is not None:
        text += f"; unused for {max(0.0, (now or time.time()) - info.last_use):.0f} s"
    if info.idle is not None:
        text += f"; stops itself after {_duration(info.idle)} unused"
    else:
        text += "; runs until `milepost server stop` (its use is not tracked: it has no idle stop)"
    return text


@cli.command()
@item_option
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
