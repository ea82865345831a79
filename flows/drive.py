"""``drive_workgraph``: a work item's milestone DAG as a Prefect flow, and
:func:`run_drive`, which starts it and returns its summary.

:func:`run_drive` checks the item first (open, its owner, ``expect_revision``,
``until``) and answers from the store without a flow run when there is
nothing to run. Otherwise it builds the drive's one object, a
:class:`~milepost.flows.loop.DriveContext`, sets it in a context variable
(``_RUN``) around the flow call, starts Prefect's temporary server under a
lock when no server is configured, and calls the flow; drives of other items
run side by side in other threads of the process, each with its own context.
The flow body (:func:`drive_workgraph_body`) reads that context (or opens the
store from the settings when Prefect started the run itself), sends the flow
run's heartbeat (flows/heartbeat.py), draws the milestones done earlier as
plan nodes, runs the :class:`~milepost.flows.loop.Loop` (claims, gate tasks,
records: flows/loop.py, flows/gate_task.py), adds the rest of the plan to the
flow-run graph, and has the artifacts published while the flow run ends. A
lost Prefect API or database ends the drive with the part named (exit 3);
the flow run is Completed only when every milestone of the scope is done.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from prefect import Flow
from prefect.client.schemas.objects import State
from prefect.context import get_run_context
from prefect.states import Completed, Failed
from prefect.task_runners import ThreadPoolTaskRunner

from milepost.errors import EnvironmentProblem, PrefectUnreachableError, StaleRevisionError
from milepost.events import DriveInterrupted, DriveSummary, MultiReporter, NullReporter, Reporter
from milepost.extras import require_task_runner
from milepost.flows.doer_attempts import check_doers
from milepost.flows.early import EarlyStart
from milepost.flows.gate_task import GateSpec, gate_task, run_gate_spec
from milepost.flows.heartbeat import Heartbeat, heartbeat_frequency, prefect_heartbeat_off
from milepost.flows.loop import DriveContext, Loop
from milepost.flows.plan_nodes import create_nodes
from milepost.flows.prefect_guard import PrefectGuard, is_api_error
from milepost.gates.git import GitError
from milepost.gates.supervisor import supervisor
from milepost.graph.dag import WorkGraph
from milepost.graph.models import WorkItem
from milepost.graph.status import MilestoneStatus
from milepost.service import Service
from milepost.service.drive import nothing_to_run, summarize
from milepost.settings import load_settings

__all__ = ["DriveFlow", "GateSpec", "drive_flow", "drive_workgraph", "gate_task", "run_drive", "run_gate_spec"]

# The drive this thread's flow run belongs to: set by run_drive around the
# flow call (Prefect runs a sync flow's body, and names its run, in the
# caller's thread and context), read by the body. Each drive has its own, so
# drives run side by side in one process (threads, MCP calls).
_RUN: ContextVar[DriveContext | None] = ContextVar("milepost_drive", default=None)
# Its first steps, done before Prefect was imported (flows/early.py), for the body's loop to adopt.
_EARLY: ContextVar[EarlyStart | None] = ContextVar("milepost_drive_early", default=None)
# Prefect's temporary server is started once per process, by one drive at a time (see _temporary_server).
_TEMPORARY_SERVER = threading.Lock()
# How long a drive waits at its end for its artifacts (made while the flow run ends).
PUBLISH_TIMEOUT = 60.0


def _summary(
    ctx: DriveContext, it: WorkItem, g: WorkGraph, interrupted: bool = False, loop: Loop | None = None
) -> DriveSummary:
    """The drive's verdict (see :func:`milepost.service.drive.summarize`)."""
    return summarize(
        ctx.service,
        it,
        g,
        scope=ctx.scope,
        until=ctx.until,
        durations=ctx.durations,
        flow_run_id=ctx.flow_run_id,
        interrupted=interrupted,
        held=dict(loop.session.waiting) if loop is not None else None,
        cached=dict(loop.cached) if loop is not None else None,
        # (read where the drive's gates ran: the doers' integration checkout when it is not the workspace)
        check=loop.session.proofs_check(g) if loop is not None else None,
    )


def _flow_run_name() -> str:
    from prefect.runtime import flow_run

    params = flow_run.parameters
    item = params.get("item_id")
    ctx = _RUN.get()
    objective = ""
    if ctx is not None and item is not None:
        objective = ctx.objective if ctx.objective is not None else ctx.service.get_item(item).objective
    short = (objective[:60] + "…") if len(objective) > 60 else objective
    return f"item-{item}: {short}" if short else f"item-{item}"


def drive_workgraph_body(item_id: int, max_parallel: int = 1, until: str | None = None) -> State[Any]:
    """Drive a work item's milestone DAG: every gate a task, the DAG's edges
    the tasks' ``wait_for``. Completed only when every milestone is done."""
    ctx = _RUN.get()
    if ctx is None:
        # Started by Prefect itself (a deployment): open the store from the environment.
        ctx = DriveContext(service=Service.open(), reporter=NullReporter(), max_parallel=max_parallel, until=until)
    flow_run = get_run_context().flow_run  # type: ignore[union-attr]
    assert flow_run is not None  # a flow body runs in a flow run
    ctx.flow_run_id = flow_run_id = str(flow_run.id)
    beat = Heartbeat(flow_run, drive_workgraph.name, ctx.heartbeat).start() if ctx.heartbeat else None
    try:
        return _drive_body(ctx, item_id, until, flow_run_id)
    finally:
        if beat is not None:
            beat.stop()


def _drive_body(ctx: DriveContext, item_id: int, until: str | None, flow_run_id: str) -> State[Any]:
    svc = ctx.service
    it, g = svc.graph(item_id, proofs=False)
    done_before = {m.name for m in g if m.status is MilestoneStatus.DONE}
    from milepost.flows.artifacts import ArtifactReporter

    guard = ctx.guard = _guard(ctx)
    # Best effort: the artifacts are made by threads of their own (bounded
    # calls, failures swallowed); the drive never waits on them.
    artifacts = ArtifactReporter(item_id, len(g), flow_run_id, svc.last_durations)
    ctx.reporter.drive_started(it.id, it.objective, len(g), flow_run_id)
    try:
        loop = _ready_loop(ctx, item_id, until, MultiReporter(ctx.reporter, artifacts), guard)
    except BaseException:
        artifacts.close()
        guard.close()
        raise
    interrupted = False
    crash: str | None = None
    try:
        loop.run()
        if ctx.fault is not None:
            raise ctx.fault  # the database or the API was lost: exit 3 naming it
    except Exception as e:
        crash = f"the drive failed: {type(e).__name__}: {e}"
        # The first claim lost to a writer (a refusal), or a lost part (a fault): not a crash.
        if isinstance(e, StaleRevisionError | EnvironmentProblem):
            ctx.error = e
        raise
    except BaseException:  # Ctrl-C; SIGTERM, which a flow run's engine raises as its TerminationSignal
        interrupted = True
        raise
    finally:
        summary = _sum_up(ctx, loop, item_id, _Ending(guard, artifacts, done_before, interrupted, crash))
    if summary.ok:
        return Completed(message=summary.message)
    return Failed(message=summary.message)


def _ready_loop(ctx: DriveContext, item_id: int, until: str | None, reporter: Reporter, guard: PrefectGuard) -> Loop:
    """The drive's loop, prepared (dead drivers' work reclaimed, stale
    milestones found, the doers' repository checked), with what was done
    earlier drawn in the flow-run graph (its gates wait on these; the rest
    is drawn when the drive ends). A stale milestone is not "done earlier":
    its re-proof is its node."""
    g = ctx.service.graph(item_id, proofs=False)[1]
    if until is not None:
        ctx.scope = {until, *g.ancestors(until)}
    early = _EARLY.get()
    loop = Loop(ctx, item_id, reporter) if early is None else _early_loop(ctx, item_id, reporter, early)
    if ctx.scope is not None:
        loop.session.set_holds({m.name for m in g if m.name not in ctx.scope})
    loop.prepare()
    no_nodes: dict[str, State[Any]] = {}
    # (Nor is one whose gate this drive ran and recorded before its flow run began: its task is its node.)
    skip = set(loop.session.to_reprove) | loop.recorded_early()
    earlier = guard.call(
        "draw the milestones done earlier",
        lambda: create_nodes(g, ctx.flow_run_id or "", item_id, {}, only_done=True, skip=skip),
        no_nodes,
    )
    loop.by_name.update(earlier)
    ctx.submitted += len(earlier)
    return loop


@dataclass
class _Ending:
    """What the end of a drive's body needs: its API guard, its artifacts,
    what was done before it, and how it ended."""

    guard: PrefectGuard
    artifacts: Any
    done_before: set[str]
    interrupted: bool
    crash: str | None


def _sum_up(ctx: DriveContext, loop: Loop, item_id: int, end: _Ending) -> DriveSummary:
    """The drive's summary (kept on ``ctx``), the plan's other milestones in
    the flow-run graph and the artifacts published, whatever ended the loop."""
    svc = ctx.service
    try:
        it, g = svc.graph(item_id, proofs=False)  # (its read rides out a lost connection: @retried)
    except EnvironmentProblem as e:
        end.guard.close()  # the store is gone: nothing to sum up
        ctx.error = ctx.error or e
        raise
    summary = _summary(ctx, it, g, end.interrupted, loop)
    if end.crash:
        summary.ok = False
        summary.message = f"{end.crash}; {summary.message}"
    summary.gate_runs = loop.gate_runs
    summary.cached = len(loop.cached)
    if loop.do_totals.runs:
        summary.doers = loop.do_totals
    if loop.doing is not None:
        with suppress(GitError):
            summary.bring_in = loop.doing.bring_in()
    ctx.summary = summary
    try:
        if not end.interrupted:
            end.guard.call(
                "add the plan's other milestones to the flow-run graph",
                lambda: _finish_plan_nodes(ctx, g, loop, item_id, end.done_before),
                None,
            )
            if end.guard.lost is None:
                ctx.publishing = end.artifacts.publish_later(summary, g, ctx.reporter.warning)
    finally:
        end.artifacts.close()
        end.guard.close()
    return summary


def _early_loop(ctx: DriveContext, item_id: int, reporter: Reporter, early: EarlyStart) -> Loop:
    from milepost.flows.early_loop import EarlyLoop

    return EarlyLoop(ctx, item_id, reporter, early)


def _guard(ctx: DriveContext) -> PrefectGuard:
    """Watch the API this flow run talks to (see flows/prefect_guard.py): once
    it is lost the loop claims nothing more and the drive ends with exit 3.
    Its URL is the flow run's own client's (a new client is not free)."""
    client = getattr(get_run_context(), "client", None)
    url = str(client.api_url) if client is not None else None

    def lost(e: PrefectUnreachableError) -> None:
        if ctx.fault is None:
            ctx.fault = e
        ctx.reporter.warning(e.message)

    return PrefectGuard(url, load_settings(), lost, ctx.reporter.warning, ctx.quieted).start()


def _api_lost_at_the_end(ctx: DriveContext, e: Exception) -> None:
    """The API failed after the loop (the flow run's final state, the wait for
    its task runs): the drive's work is recorded; its UI record is not."""
    if ctx.fault is None:
        ctx.fault = PrefectUnreachableError(f"the Prefect API stopped answering: {' '.join(str(e).split())}")
        ctx.reporter.warning(f"{ctx.fault.message}; the flow run's record in the Prefect UI is incomplete")
    ctx.quieted.quiet()


def _finish_plan_nodes(ctx: DriveContext, g: WorkGraph, loop: Loop, item_id: int, done_before: set[str]) -> None:
    """Plan nodes for every milestone the drive did not run (``done_before``: those done when it started)."""
    known = {name: run_id for name in loop.by_name if (run_id := loop.run_id(name)) is not None}
    # The picture must never mask the drive's own outcome: run through PrefectGuard.call.
    # Done now, not when it started, and not run here: another driver proved it meanwhile.
    # (ctx.durations: every gate this drive ended, drawn or not: a task run it could not draw is not "elsewhere")
    ran = loop.by_name.keys() | ctx.durations.keys()
    elsewhere = {m.name for m in g if m.status is MilestoneStatus.DONE} - done_before - ran
    nodes = create_nodes(g, ctx.flow_run_id or "", item_id, known, only_done=False, elsewhere=elsewhere)
    ctx.submitted += len(nodes)


class DriveFlow(Flow[..., Any]):
    """The drive's flow. Its parameters are plain JSON values (an item id, a
    count, a milestone name or None) and go to the API as they are: Prefect's
    own ``serialize_parameters`` imports FastAPI's encoder for them, about
    0.1 s of the processor taken from the first gates (docs/benchmarks.md,
    "The flow run's parameters"; tests/flows/test_drive_flow.py pins that the
    result is Prefect's)."""

    def serialize_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        if all(v is None or type(v) in (bool, int, float, str) for v in parameters.values()):
            return dict(parameters)
        return super().serialize_parameters(parameters)


def drive_flow(**options: Any) -> DriveFlow:
    """The drive's flow with ``options`` (a task runner): Prefect's
    ``with_options`` would make a plain ``Flow`` of it."""
    return DriveFlow(
        fn=drive_workgraph_body, name="drive-workgraph", flow_run_name=_flow_run_name, log_prints=False, **options
    )


# Made apart from its body: Prefect ships the flow object to Dask workers
# (in the run context), and pickle finds a plain module-level function by
# reference, where a shadowed one would be pickled by value with its globals.
drive_workgraph = drive_flow()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a drive the way Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _task_runner(kind: str, max_parallel: int, address: str | None) -> Any:
    if kind == "thread":
        return ThreadPoolTaskRunner(max_workers=max(1, max_parallel) + 1)
    if kind == "dask":
        from prefect_dask.task_runners import DaskTaskRunner

        if address:
            return DaskTaskRunner(address=address)
        return DaskTaskRunner(
            cluster_kwargs={"n_workers": max(1, max_parallel), "threads_per_worker": 1, "processes": True}
        )
    raise ValueError(f"unknown task runner {kind!r}: use thread or dask")


def run_drive(
    service: Service,
    item_id: int,
    *,
    max_parallel: int = 1,
    max_doers: int = 1,
    until: str | None = None,
    task_runner: str = "thread",
    dask_address: str | None = None,
    reporter: Reporter | None = None,
    wait_timeout: float = 120.0,
    expect_revision: int | None = None,
    use_cache: bool = True,
    wait_recorded: bool = True,
    wait_for_others: bool = True,
    early: EarlyStart | None = None,
) -> DriveSummary:
    """Run ``drive_workgraph`` for one item and return its summary. With
    ``wait_recorded`` it waits until the Prefect server has recorded every
    task run of the flow run before returning: Prefect's temporary server
    loses what it has not recorded when this process exits. A server that
    outlives the drive records them anyway, seconds later (it records task
    runs from their events more slowly than a drive makes them), so there the
    wait only delays the drive's end.
    With ``expect_revision`` the drive refuses (StaleRevisionError) unless the
    item is at that revision: checked before Prefect starts and again by the
    first claim, in its transaction. With ``wait_for_others`` (the default) a
    drive with nothing it can run while other live drivers hold the item's
    work waits for them (flows/waiting.py); without, it ends. A drive with
    nothing to run (every milestone of its scope done, none stale) answers
    from the store: no flow run. Drives of other items may run at once in
    other threads of this process: each keeps its state on its own
    :class:`DriveContext` (and what hangs off it), none in module globals.
    ``early``: the loop's first steps, done before Prefect was imported
    (:func:`milepost.flows.early.start_first_gates`); ended here when the loop
    never took them over. The summary's duration counts from the drive's
    first step: the early start's, when there was one."""
    t0 = early.t0 if early is not None else time.monotonic()
    require_task_runner(task_runner)
    objective = service.check_can_drive(item_id, expect_revision, until=until)
    doers = check_doers(service, item_id, until)  # a workspace no doer could work in: refused before Prefect
    # (With a claim made before Prefect was imported, the loop records it: even when another driver
    # finished the milestone meanwhile, its attempt is recorded, or said not applied.)
    quick = nothing_to_run(service, item_id, until) if early is None else None
    if quick is not None:
        quick.duration = time.monotonic() - t0
        return quick
    ctx = DriveContext(
        service=service,
        reporter=reporter or NullReporter(),
        max_parallel=max_parallel,
        max_doers=max_doers,
        until=until,
        expect_revision=expect_revision,
        use_cache=use_cache,
        objective=objective,
        heartbeat=heartbeat_frequency(),
        inline=task_runner == "thread" and max_parallel == 1,
        wait_for_others=wait_for_others,
        units_ahead=task_runner == "thread",  # (a Dask worker's gate has no share in this process's book)
    )
    token, early_token = _RUN.set(ctx), _EARLY.set(early)
    state: State[Any] | None = None
    if task_runner == "thread":
        supervisor()  # its gates run here: the supervisor starts up while the flow run does
    try:
        _temporary_server()
        runner = _task_runner(task_runner, max_parallel + (max_doers if doers else 0), dask_address)
        state = _run_flow(ctx, runner, item_id, until, wait_recorded, wait_timeout)
    except KeyboardInterrupt as e:
        if ctx.summary is None or isinstance(e, DriveInterrupted):
            raise
        ctx.summary.duration = time.monotonic() - t0
        ctx.summary.flow_run_url = flow_run_url(ctx.flow_run_id)
        raise DriveInterrupted(ctx.summary) from e  # what it did and what is left, for the CLI to show
    finally:
        _RUN.reset(token)
        _EARLY.reset(early_token)
        ctx.quieted.restore()  # the process as the drive found it: the next drive has retries and logs
        if early is not None:  # the loop never adopted it: stopped when interrupted, else finished and recorded
            failing = sys.exc_info()[1]
            early.settle(interrupt=failing is not None and not isinstance(failing, Exception))
    return _drive_summary(ctx, state, item_id, t0)


def _run_flow(
    ctx: DriveContext, runner: Any, item_id: int, until: str | None, wait_recorded: bool, wait_timeout: float
) -> State[Any] | None:
    """Run the drive's flow on ``runner``: its final state (None when the API
    failed it). An unreachable API, or one lost at the end, is kept on ``ctx``."""
    configured = drive_flow(task_runner=runner)
    state: State[Any] | None = None
    with _sigterm_as_interrupt(), prefect_heartbeat_off():
        try:
            state = configured(item_id=item_id, max_parallel=ctx.max_parallel, until=until, return_state=True)
        except Exception as e:
            if ctx.error is None and not is_api_error(e):
                raise
            if ctx.error is None and ctx.flow_run_id is None:  # the flow run never started
                ctx.error = PrefectUnreachableError(
                    f"cannot reach the Prefect API: {' '.join(str(e).split())}; start the workspace's server"
                    " (milepost server start) or check PREFECT_API_URL"
                )
            elif ctx.error is None:
                _api_lost_at_the_end(ctx, e)
        finally:
            _wait_published(ctx, wait_recorded, wait_timeout)
    return state


def _wait_published(ctx: DriveContext, wait_recorded: bool, wait_timeout: float) -> None:
    """Wait for the artifacts, and with ``wait_recorded`` for the server to hold every task run."""
    if ctx.publishing is not None:
        ctx.publishing.join(PUBLISH_TIMEOUT)
    if ctx.flow_run_id and wait_recorded and not isinstance(ctx.fault, PrefectUnreachableError):
        try:
            wait_for_task_runs(ctx.flow_run_id, ctx.submitted, timeout=wait_timeout)
        except Exception as e:
            if not is_api_error(e):
                raise
            _api_lost_at_the_end(ctx, e)


def _drive_summary(ctx: DriveContext, state: State[Any] | None, item_id: int, t0: float) -> DriveSummary:
    """What run_drive returns (or the refusal or fault it raises)."""
    if ctx.error is not None:
        raise ctx.error
    if ctx.summary is None and state is not None and state.is_failed():
        state.result()  # the body failed before it could sum up: its error, raised as it is (not a summary)
    summary = ctx.summary or _summary(ctx, *ctx.service.graph(item_id, proofs=False))
    if isinstance(ctx.fault, PrefectUnreachableError):
        summary.message += "; the flow run's record in the Prefect UI is incomplete (the Prefect API stopped answering)"
    summary.duration = time.monotonic() - t0
    summary.flow_run_url = flow_run_url(ctx.flow_run_id)
    summary.prefect_lost = ctx.quieted.abandoned
    return summary


def _temporary_server() -> None:
    """Without a server to talk to, Prefect starts its temporary one on a
    client's first use; two drives starting at once in one process race it
    (the second finds it "running" before its process exists: "Server
    process did not start"). Started here, under a lock, it is up before
    either flow run begins; it stops with this process (Prefect's atexit)."""
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return
    from prefect.server.api.server import SubprocessASGIServer

    with _TEMPORARY_SERVER:
        SubprocessASGIServer().start()


def flow_run_url(flow_run_id: str | None) -> str | None:
    ui = os.environ.get("PREFECT_UI_URL")
    if not flow_run_id or not ui:
        return None
    return f"{ui.rstrip('/')}/runs/flow-run/{flow_run_id}"


def wait_for_task_runs(flow_run_id: str, expected: int, timeout: float = 120.0) -> int:
    """Poll the API until it holds ``expected`` task runs of the flow run, all
    in a final state. Returns how many it saw."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    deadline = time.monotonic() + timeout
    runs_of = FlowRunFilter(id=FlowRunFilterId(any_=[uuid.UUID(flow_run_id)]))
    with get_client(sync_client=True) as client:
        while True:
            seen, offset = 0, 0
            while True:
                page = client.read_task_runs(flow_run_filter=runs_of, limit=200, offset=offset)  # the API's maximum
                seen += sum(1 for r in page if r.state is not None and r.state.is_final())
                if len(page) < 200:
                    break
                offset += 200
            if seen >= expected or time.monotonic() > deadline:
                return seen
            time.sleep(0.25)
