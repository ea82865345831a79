"""``drive_workgraph``: a work item's milestone DAG as a Prefect flow.

The loop claims the lowest-id ready milestones (up to ``max_parallel``), runs
each gate as a Prefect task named after its milestone and submitted with
``wait_for=`` the futures of its deps run earlier in this flow run (so the
Prefect UI draws the DAG's edges), records every outcome through the service
layer, and ends when nothing is ready or running. A failing gate never stops
other branches: the milestone goes to needs_fix (ready again, after its fix
hook and retry delay) or stuck.

Claims are leases in the store: a second driver never runs the same gate, and
a driver killed mid-gate leaves a lease that expires; the next drive reclaims
the milestone without spending its budget. Ctrl-C or SIGTERM stops the running
gates (through a stop file their watchdogs poll, so it reaches Dask workers
too), records the interrupted attempts, makes their milestones ready again and
re-raises.

Gate results travel from the task to the loop through a JSON file next to the
attempt's log, not through Prefect's result machinery: that works the same for
threads and for Dask worker processes, with result persistence off.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.context import get_run_context
from prefect.futures import PrefectFuture
from prefect.states import Cancelled, Completed, Failed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from milepost.errors import StaleRevisionError
from milepost.flows.events import DriveSummary, MilestoneSummary, MultiReporter, NullReporter, Reporter
from milepost.flows.plan_nodes import create_nodes
from milepost.gates._crash import crash_point
from milepost.gates._supervisor_main import process_start
from milepost.gates.command import GateResult, Outcome, attempt_files, run_gate, write_result
from milepost.gates.supervisor import host_identity
from milepost.graph.dag import WorkGraph
from milepost.graph.models import GateCommand, WorkItem
from milepost.graph.render import display_status
from milepost.graph.status import MilestoneStatus
from milepost.results import Claim, DoneResult
from milepost.service import Service, interrupted_result

__all__ = ["GateSpec", "drive_workgraph", "gate_task", "run_drive"]

# Gate output forwarded to the Prefect task-run log (the UI); the whole output
# stays in the log file.
MAX_LOG_LINES = 2000
STOP_POLL_SECONDS = 0.2


class GateSpec(BaseModel):
    """Everything one gate (or fix) task needs; pickled to Dask workers."""

    claim: Claim
    kind: str = "gate"  # or "fix"
    commands: list[GateCommand]
    cwd: str
    env: dict[str, str]
    timeout: float | None = None
    log_path: str
    stop_file: str
    # The driver process (host, boot, pid, start): a gate task in another
    # process (a Dask worker) stops its gate when that process is gone.
    driver: dict[str, Any] = Field(default_factory=dict)

    @property
    def result_file(self) -> Path:
        return attempt_files(Path(self.log_path))[1]


def driver_identity() -> dict[str, Any]:
    pid = os.getpid()
    return {**host_identity(), "pid": pid, "start": process_start(pid)}


def _driver_gone(driver: dict[str, Any]) -> bool:
    """Whether the driver that submitted a gate task has died. Known only on
    its own machine; a task in the driver's own process never asks."""
    pid = driver.get("pid")
    if not isinstance(pid, int) or pid == os.getpid() or driver.get("boot") != host_identity()["boot"]:
        return False
    start = process_start(pid)
    return start is None or (driver.get("start") is not None and start != driver["start"])


def _follow_log(logger: Any, path: Path, done: threading.Event, limit: int) -> None:
    """Forward the log file's lines to the task-run logger as they are written."""
    sent = 0
    pos = 0
    buf = b""
    while True:
        finished = done.is_set()
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read(1 << 16)
                pos += len(chunk)
        except FileNotFoundError:
            chunk = b""
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if sent < limit:
                logger.info(line.decode("utf-8", errors="replace"))
            sent += 1
        if finished and not chunk:
            if buf and sent < limit:
                logger.info(buf.decode("utf-8", errors="replace"))
            if sent > limit:
                logger.warning(f"{sent - limit} more lines not forwarded; the whole output is in {path}")
            return
        if not chunk:
            done.wait(0.2)


def run_gate_spec(spec: GateSpec) -> State[Any]:
    """The body of :data:`gate_task`: run one gate (or fix) attempt and end
    in a state that says how it went (see :func:`_task_state`). (A plain
    module-level function, so Dask can pickle the task by reference.)"""
    log_path = Path(spec.log_path)
    finished = threading.Event()
    stopped = threading.Event()

    def watchdog() -> None:
        while not finished.wait(STOP_POLL_SECONDS):
            if os.path.exists(spec.stop_file) or _driver_gone(spec.driver):
                stopped.set()  # run_gate stops the running command's whole group
                return

    # The run logger is bound to this task run's context: take it here, use it in the thread.
    logger = get_run_logger()
    follower = threading.Thread(target=_follow_log, args=(logger, log_path, finished, MAX_LOG_LINES), daemon=True)
    guard = threading.Thread(target=watchdog, daemon=True)
    follower.start()
    guard.start()
    try:
        result = run_gate(
            spec.commands,
            log_path,
            default_cwd=Path(spec.cwd),
            env=spec.env,
            default_timeout=spec.timeout,
            stop=stopped,
        )
    finally:
        finished.set()
        follower.join(timeout=10)
        guard.join(timeout=5)
    if stopped.is_set() and not result.passed:
        result = result.model_copy(update={"outcome": Outcome.INTERRUPTED, "reason": "interrupted: the drive stopped"})
        write_result(log_path, result)
    return _task_state(spec, result)


def _task_state(spec: GateSpec, result: GateResult) -> State[Any]:
    """The gate task run's final state, named for what it means to the
    milestone (the UI shows the name): a failure that spends the last of the
    budget reads ``Stuck``, an earlier one ``Needs fix``; an interrupted
    attempt is ``Interrupted`` (cancelled), not a failure of the work."""
    m = spec.claim.milestone
    what = f"{spec.kind} of {m.name!r} (attempt {spec.claim.attempt}): {result.reason}"
    if result.passed:
        return Completed(message=what)
    if result.outcome is Outcome.INTERRUPTED:
        return Cancelled(name="Interrupted", message=what)
    if spec.kind != "gate":
        return Failed(name="Fix failed", message=what)
    last = m.attempts + 1 >= m.max_attempts
    return Failed(name="Stuck" if last else "Needs fix", message=what + ("; retry budget spent" if last else ""))


gate_task = task(name="gate", cache_policy=NO_CACHE, persist_result=False, log_prints=False)(run_gate_spec)


# -- the loop --------------------------------------------------------------------


@dataclass
class _Running:
    key: str
    kind: str
    claim: Claim
    spec: GateSpec
    future: PrefectFuture[Any]


@dataclass
class _DriveContext:
    """What ``run_drive`` hands the flow body (the engine gets its store as an
    argument) and what the body hands back."""

    service: Service
    reporter: Reporter
    max_parallel: int = 1
    until: str | None = None
    expect_revision: int | None = None  # guards the first claim only
    summary: DriveSummary | None = None
    error: StaleRevisionError | None = None  # a refusal run_drive re-raises (the flow run only records it)
    submitted: int = 0
    flow_run_id: str | None = None
    durations: dict[str, float] = field(default_factory=dict)


_CONTEXT: _DriveContext | None = None


def _read_result(spec: GateSpec) -> GateResult:
    try:
        return GateResult.model_validate_json(spec.result_file.read_text())
    except (OSError, ValueError):
        # The task died before writing its result (a crashed worker).
        return interrupted_result(spec.claim, datetime.now(UTC), reason="the gate task crashed before reporting")


def _fix_command(svc: Service, claim: Claim) -> str | None:
    m = claim.milestone
    if m.fix:
        return m.fix
    return svc.get_item(claim.item).defaults.fix


class _Loop:
    def __init__(self, ctx: _DriveContext, item_id: int, reporter: Reporter) -> None:
        self.ctx = ctx
        self.reporter = reporter
        self.svc = ctx.service
        self.item = item_id
        self.owner = f"drive:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.running: dict[str, _Running] = {}
        # Per milestone, what its dependents wait on: its latest gate task, or its plan node.
        self.by_name: dict[str, PrefectFuture[Any] | State[Any]] = {}
        self.done_q: queue.Queue[str] = queue.Queue()
        self.timers: list[tuple[float, str]] = []
        run_dir = self.svc.store.home / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.stop_file = run_dir / f"{self.owner.replace(':', '-')}.stop"
        self.stop_file.unlink(missing_ok=True)
        self.gate_runs = 0
        self.driver = driver_identity()

    # -- submitting --------------------------------------------------------

    def _submit(self, kind: str, claim: Claim, commands: list[GateCommand], log_path: str, timeout: float | None,
                extra_env: dict[str, str] | None = None) -> None:  # fmt: skip
        name = claim.milestone.name
        key = f"{name}#{claim.attempt}:{kind}"
        spec = GateSpec(
            claim=claim,
            kind=kind,
            commands=commands,
            cwd=str(self.svc.store.root),
            env={**self.svc.gate_env(claim), **(extra_env or {})},
            timeout=timeout,
            log_path=log_path,
            stop_file=str(self.stop_file),
            driver=self.driver,
        )
        # A fix follows a failed attempt: waiting on that failed future would
        # leave it NotReady forever, so it waits on nothing (it is submitted
        # only after the attempt finished anyway).
        deps = [self.by_name[d] for d in claim.milestone.deps if d in self.by_name] if kind == "gate" else []
        run_name = name if kind == "gate" else f"fix {name}"
        tags = [f"milepost-item:{self.item}", f"attempt:{claim.attempt}", f"milepost-{kind}"]
        configured = gate_task.with_options(name=kind, task_run_name=run_name, tags=tags)
        future: PrefectFuture[Any] = configured.submit(spec, wait_for=deps)  # type: ignore[call-overload]
        if kind == "gate":
            self.by_name[name] = future
        self.running[key] = _Running(key, kind, claim, spec, future)
        self.ctx.submitted += 1
        future.add_done_callback(self._notify(key))

    def _notify(self, key: str) -> Any:
        def done(_future: PrefectFuture[Any]) -> None:
            self.done_q.put(key)

        return done

    def _fill(self) -> None:
        while len([r for r in self.running.values() if r.kind == "gate"]) < self.ctx.max_parallel:
            claim = self.svc.claim_next(self.item, self.owner, self.ctx.expect_revision)
            self.ctx.expect_revision = None
            if claim is None:
                return
            crash_point("claimed")
            m = claim.milestone
            self.reporter.gate_started(claim)
            try:
                # A milestone without a gate is done when reached, but still a node of the run's graph.
                self._submit("gate", claim, m.gate, claim.log_path, m.timeout)
            except BaseException as e:
                # Never leave a claimed milestone behind a lease nobody renews.
                why = f"could not submit its gate: {type(e).__name__}: {e}"
                self.svc.record(claim, interrupted_result(claim, datetime.now(UTC), reason=why), release=True)
                raise

    # -- finishing -----------------------------------------------------------

    def _finish(self, r: _Running) -> None:
        result = _read_result(r.spec)
        if r.kind == "fix":
            self.svc.record_fix(r.claim, result)
            self.reporter.note(f"fix of {r.claim.milestone.name} after attempt {r.claim.attempt}: {result.reason}")
            self._release_hold(r.claim.milestone.name)
            return
        self.gate_runs += 1
        self.ctx.durations[r.claim.milestone.name] = (
            self.ctx.durations.get(r.claim.milestone.name, 0.0) + result.duration
        )
        done = self.svc.record(r.claim, result, release=result.outcome is Outcome.INTERRUPTED)
        self.reporter.gate_finished(r.claim, done)
        self._after_failure(r.claim, done)

    def _after_failure(self, claim: Claim, done: DoneResult) -> None:
        m = done.milestone
        if done.passed or m.status is not MilestoneStatus.NEEDS_FIX:
            return
        fix = _fix_command(self.svc, claim)
        if fix:
            self.svc.hold(self.item, m.name)
            failure_log = claim.log_path
            log_path = claim.log_path.removesuffix(".log") + ".fix.log"
            self._submit(
                "fix",
                claim,
                [GateCommand(name="fix", run=fix)],
                log_path,
                m.timeout,
                {"MILEPOST_FAILURE_LOG": failure_log},
            )
        elif m.retry_at is not None:
            self._hold_until(m.name, m.retry_at)

    def _release_hold(self, name: str) -> None:
        m = self.svc.cached_graph(self.item).get(name)
        if m.retry_at is not None and m.retry_at > datetime.now(UTC):
            self._hold_until(name, m.retry_at)
        else:
            self.svc.unhold(self.item, name)

    def _hold_until(self, name: str, when: datetime) -> None:
        self.svc.hold(self.item, name)
        wait = max(0.0, (when - datetime.now(UTC)).total_seconds())
        self.timers.append((time.monotonic() + wait, name))
        self.reporter.note(f"retry of {name} in {wait:.1f} s")

    def _due_timers(self) -> None:
        now = time.monotonic()
        for entry in [t for t in self.timers if t[0] <= now]:
            self.timers.remove(entry)
            self.svc.unhold(self.item, entry[1])

    # -- the loop ------------------------------------------------------------

    def _reclaim(self) -> int:
        """Take over milestones whose driver died (expired leases); see
        :meth:`Service.reclaim_expired`. Returns how many."""
        reclaimed = self.svc.reclaim_expired(self.item, self.owner)
        for done in reclaimed:
            why = done.gate_run.reason if done.gate_run else "its driver stopped"
            self.reporter.note(f"reclaimed {done.milestone.name}: {why}")
        return len(reclaimed)

    def run(self) -> None:
        self._reclaim()
        g = self.svc.cached_graph(self.item)
        now = datetime.now(UTC)
        for m in g:
            if m.retry_at is not None and m.retry_at > now and m.status is MilestoneStatus.NEEDS_FIX:
                self._hold_until(m.name, m.retry_at)
        stop_keeper = threading.Event()
        keeper = threading.Thread(target=self.svc.keep_leases, args=(self._gate_claims, stop_keeper), daemon=True)
        keeper.start()
        try:
            while True:
                self._due_timers()
                self._fill()
                if not self.running:
                    # Before giving up: a driver that died meanwhile may have left work behind.
                    if not self.timers and not self._reclaim():
                        return
                    time.sleep(max(0.05, min(t for t, _ in self.timers) - time.monotonic()))
                    continue
                timeout = 0.5 if self.timers else 5.0
                try:
                    key = self.done_q.get(timeout=timeout)
                except queue.Empty:
                    continue
                r = self.running.pop(key)
                r.future.wait()
                self._finish(r)
        except BaseException:
            self._stop_all()
            raise
        finally:
            stop_keeper.set()
            keeper.join(timeout=5)
            self.stop_file.unlink(missing_ok=True)

    def _gate_claims(self) -> list[Claim]:
        return [r.claim for r in list(self.running.values()) if r.kind == "gate"]

    def _stop_all(self) -> None:
        """Interrupted: kill every running gate, record the attempts as
        interrupted and make their milestones ready again."""
        if not self.running:
            return
        self.stop_file.write_text(self.owner)
        deadline = time.monotonic() + 15
        pending = dict(self.running)
        while pending and time.monotonic() < deadline:
            try:
                key = self.done_q.get(timeout=0.5)
            except queue.Empty:
                continue
            pending.pop(key, None)
        for r in self.running.values():
            if r.kind != "gate":
                continue
            result = _read_result(r.spec) if r.key not in pending else None
            if result is None or result.outcome is not Outcome.INTERRUPTED:
                result = interrupted_result(r.claim, datetime.now(UTC), reason="interrupted: the drive stopped")
            done = self.svc.record(r.claim, result, release=True)
            self.reporter.gate_finished(r.claim, done)
        self.running.clear()


def _summary(ctx: _DriveContext, it: WorkItem, g: WorkGraph, interrupted: bool = False) -> DriveSummary:
    ms = []
    for m in g:
        view = display_status(g, m)
        ms.append(
            MilestoneSummary(
                id=m.id,
                name=m.name,
                status=m.status.value,
                view=view,
                attempts=m.attempts,
                max_attempts=m.max_attempts,
                duration=ctx.durations.get(m.name, 0.0),
                last_reason=m.reason,
            )
        )
    ok = g.all_done()
    if ok:
        message = f"all {len(g)} milestones are done"
    else:
        parts = []
        stuck = [m for m in g if m.is_stuck]
        for m in stuck:
            below = g.descendants(m.name)
            blocks = f" (blocks {', '.join(below)})" if below else ""
            parts.append(f"stuck: {m.name}{blocks}")
        review = [m.name for m in g if m.awaiting_review]
        if review:
            parts.append("waiting for review: " + ", ".join(review))
        left = [m.name for m in g if not m.status.is_done and m not in stuck and not m.awaiting_review]
        if left:
            parts.append("not done: " + ", ".join(left))
        message = "; ".join(parts) or g.why_nothing_ready()
    if interrupted:
        message = "interrupted; " + message
    return DriveSummary(
        item=it.id,
        objective=it.objective,
        ok=ok and not interrupted,
        message=message,
        flow_run_id=ctx.flow_run_id,
        gate_runs=0,
        interrupted=interrupted,
        milestones=ms,
    )


def _flow_run_name() -> str:
    from prefect.runtime import flow_run

    params = flow_run.parameters
    item = params.get("item_id")
    ctx = _CONTEXT
    objective = ""
    if ctx is not None and item is not None:
        objective = ctx.service.get_item(item).objective
    short = (objective[:60] + "…") if len(objective) > 60 else objective
    return f"item-{item}: {short}" if short else f"item-{item}"


def drive_workgraph_body(item_id: int, max_parallel: int = 1, until: str | None = None) -> State[Any]:
    """Drive a work item's milestone DAG: every gate a task, the DAG's edges
    the tasks' ``wait_for``. Completed only when every milestone is done."""
    ctx = _CONTEXT
    if ctx is None:
        # Started by Prefect itself (a deployment): open the store from the environment.
        ctx = _DriveContext(service=Service.open(), reporter=NullReporter(), max_parallel=max_parallel, until=until)
    ctx.flow_run_id = str(get_run_context().flow_run.id)  # type: ignore[union-attr]
    svc = ctx.service
    it, g = svc.graph(item_id)
    if until is not None:
        keep = {until, *g.ancestors(until)}
        svc.set_holds(item_id, {m.name for m in g if m.name not in keep})
    from milepost.flows.artifacts import ArtifactReporter

    artifacts = ArtifactReporter(item_id, len(g))
    reporter: Reporter = MultiReporter(ctx.reporter, artifacts)
    ctx.reporter.drive_started(it.id, it.objective, len(g), ctx.flow_run_id)
    loop = _Loop(ctx, item_id, reporter)
    # The whole plan in the flow-run graph: what was done before, now (its
    # gates wait on these), and the rest when the drive ends (below).
    earlier = create_nodes(g, ctx.flow_run_id, item_id, {}, only_done=True)
    loop.by_name.update(earlier)
    ctx.submitted += len(earlier)
    interrupted = False
    crash: str | None = None
    try:
        loop.run()
    except KeyboardInterrupt:
        interrupted = True
        raise
    except Exception as e:
        crash = f"the drive failed: {type(e).__name__}: {e}"
        if isinstance(e, StaleRevisionError):  # the first claim lost to a writer: a refusal, not a crash
            ctx.error = e
        raise
    finally:
        svc.set_holds(item_id, set())
        it, g = svc.graph(item_id)
        summary = _summary(ctx, it, g, interrupted)
        if crash:
            summary.ok = False
            summary.message = f"{crash}; {summary.message}"
        summary.gate_runs = loop.gate_runs
        ctx.summary = summary
        if not interrupted:
            _finish_plan_nodes(ctx, g, loop, item_id)
            artifacts.publish(summary, g)
    if summary.ok:
        return Completed(message=summary.message)
    return Failed(message=summary.message)


def _finish_plan_nodes(ctx: _DriveContext, g: WorkGraph, loop: _Loop, item_id: int) -> None:
    """Plan nodes for every milestone the drive did not run."""
    known = {}
    for name, ran in loop.by_name.items():
        run_id = getattr(ran, "task_run_id", None) or ran.state_details.task_run_id  # type: ignore[union-attr]
        if run_id is not None:
            known[name] = run_id
    try:
        nodes = create_nodes(g, ctx.flow_run_id or "", item_id, known, only_done=False)
    except Exception as e:  # the picture must never mask the drive's own outcome
        ctx.reporter.note(f"could not add the plan's other milestones to the flow-run graph: {e}")
        return
    ctx.submitted += len(nodes)


# Decorated apart from its body: Prefect ships the flow object to Dask workers
# (in the run context), and pickle finds a plain module-level function by
# reference, where a shadowed one would be pickled by value with its globals.
drive_workgraph = flow(name="drive-workgraph", flow_run_name=_flow_run_name, log_prints=False)(drive_workgraph_body)


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
    until: str | None = None,
    task_runner: str = "thread",
    dask_address: str | None = None,
    reporter: Reporter | None = None,
    wait_timeout: float = 120.0,
    expect_revision: int | None = None,
) -> DriveSummary:
    """Run ``drive_workgraph`` for one item and return its summary. Waits until
    the Prefect server has recorded every task run of the flow run before
    returning (a temporary server loses what it has not recorded at exit).
    With ``expect_revision`` the drive refuses (StaleRevisionError) unless the
    item is at that revision: checked before Prefect starts and again by the
    first claim, in its transaction."""
    global _CONTEXT
    service.check_can_drive(item_id, expect_revision)
    ctx = _DriveContext(
        service=service,
        reporter=reporter or NullReporter(),
        max_parallel=max_parallel,
        until=until,
        expect_revision=expect_revision,
    )
    _CONTEXT = ctx
    t0 = time.monotonic()
    try:
        runner = _task_runner(task_runner, max_parallel, dask_address)
        configured = drive_workgraph.with_options(task_runner=runner)
        with _sigterm_as_interrupt():
            try:
                configured(item_id=item_id, max_parallel=max_parallel, until=until, return_state=True)
            finally:
                if ctx.flow_run_id:
                    wait_for_task_runs(ctx.flow_run_id, ctx.submitted, timeout=wait_timeout)
    finally:
        _CONTEXT = None
    if ctx.error is not None:
        raise ctx.error
    summary = ctx.summary or _summary(ctx, *service.graph(item_id))
    summary.duration = time.monotonic() - t0
    summary.flow_run_url = flow_run_url(ctx.flow_run_id)
    return summary


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
