"""The drive loop: claim the lowest-id ready milestones (up to
``max_parallel``), submit each gate as a task that waits on its deps' tasks,
record every outcome through the item's :class:`DriveSession`, run fix hooks
and honour retry delays, reclaim what dead drivers left, and stop every
running gate when interrupted. It reports to a :class:`Reporter`; it never prints.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect.client.schemas.objects import State
from prefect.futures import PrefectFuture
from prefect.states import Failed

from milepost.errors import EnvironmentProblem, MilepostError
from milepost.events import DoTotals, DriveSummary, Reporter
from milepost.flows.doer_attempts import Doing, NotStarted
from milepost.flows.gate_task import (
    GATE_TASKS,
    GateSpec,
    SpecBox,
    TaskKind,
    call_inline,
    driver_identity,
    forward_output,
    new_monitor,
    task_state,
)
from milepost.flows.outage import read_result
from milepost.flows.prefect_guard import CLAIMED_FRESH_SECONDS, FRESH_SECONDS, PrefectGuard, Quieted
from milepost.flows.waiting import Waiting, wait_for_others
from milepost.gates._crash import crash_point
from milepost.gates.attempt import AttemptFiles
from milepost.gates.command import GateResult, Outcome
from milepost.gates.inputs import describe_changes
from milepost.gates.judge import JudgeOrder, import_rule, named_packages
from milepost.gates.outcome import CachedFrom
from milepost.graph.models import GateCommand
from milepost.graph.status import MilestoneStatus
from milepost.results import Claim, DoneResult
from milepost.service import Service, interrupted_result

__all__ = ["DriveContext", "Loop", "finish_running"]


@dataclass
class _Running:
    key: str
    kind: TaskKind
    claim: Claim
    spec: GateSpec
    box: SpecBox  # the task's parameter; in this process, its verdict and its end come back on it
    # Its task's future; run inline (DriveContext.inline): its final state once it ran, None before.
    future: PrefectFuture[Any] | State[Any] | None


@dataclass
class DriveContext:
    """What ``run_drive`` hands the flow body (the engine gets its store as an
    argument) and what the body hands back."""

    service: Service
    reporter: Reporter
    max_parallel: int = 1
    until: str | None = None
    expect_revision: int | None = None  # guards the first claim only
    use_cache: bool = True  # a passed run with the same fingerprint may stand in (--no-cache: never)
    scope: set[str] | None = None  # --until: the milestones this drive may run (None: all)
    summary: DriveSummary | None = None
    error: MilepostError | None = None  # a refusal or a fault run_drive re-raises (the flow run only records it)
    submitted: int = 0
    flow_run_id: str | None = None
    durations: dict[str, float] = field(default_factory=dict)
    # The database or the Prefect API was lost: claim nothing more (flows/outage.py).
    fault: EnvironmentProblem | None = None
    # The flow run's Prefect API, asked before each claim (PrefectGuard.may_start); None: no flow run yet.
    guard: PrefectGuard | None = None
    # What quieting Prefect after a loss changed of the process: restored at the drive's end (run_drive).
    quieted: Quieted = field(default_factory=Quieted)
    publishing: threading.Thread | None = None  # the artifacts, made while the flow run ends
    objective: str | None = None  # for the flow run's name
    heartbeat: int | None = None  # seconds between the flow run's heartbeats, sent by the body (flows/heartbeat.py)
    # One gate at a time on threads: each task runs in the loop's thread (flows/gate_task.call_inline).
    inline: bool = False
    wait_for_others: bool = True  # nothing to run while other live drivers hold the work: wait (flows/waiting.py)
    units_ahead: bool = True  # idle workers run units of milestones yet to run (milepost.gates.units)
    max_doers: int = 1  # doers at once (docs/doers.md), apart from max_parallel's gates


def _key(claim: Claim, kind: TaskKind) -> str:
    """A gate (or fix, or doer) task's key in the loop's running tasks and done queue."""
    return f"{claim.milestone.name}#{claim.attempt}:{kind}"


def _recorded_spec(claim: Claim) -> GateSpec:
    """The spec of a gate the loop does not run (its verdict known already): its claim and log, for the
    loop's bookkeeping and for its output forwarded to a task run drawn in its final state."""
    m = claim.milestone
    return GateSpec(claim=claim, commands=m.gate, cwd="", env={}, log_path=claim.log_path, stop_file="")


class Loop:
    def __init__(self, ctx: DriveContext, item_id: int, reporter: Reporter) -> None:
        self.ctx = ctx
        self.reporter = reporter
        self.item = item_id
        self.owner = f"drive:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.session = ctx.service.drive_session(item_id, self.owner, use_cache=ctx.use_cache, scope=ctx.scope)
        self.session.units.set_workers(ctx.max_parallel)  # units of proof run within --max-parallel too
        self.running: dict[str, _Running] = {}
        # Per milestone, what its dependents wait on: its latest gate task, or its plan node.
        self.by_name: dict[str, PrefectFuture[Any] | State[Any]] = {}
        self.done_q: queue.Queue[str] = queue.Queue()
        # Tasks to run in this thread (ctx.inline), each when the loop would wait for a gate's end.
        self.inline: list[tuple[str, list[PrefectFuture[Any] | State[Any]]]] = []
        # The next claim, made with the record of a passed gate (_finish), for _fill to start.
        self.chained: list[Claim | None] = []
        self.told_busy: set[str] = set()  # session.busy entries reported
        self.waiting = Waiting()  # what it waits on of other drivers (flows/waiting.py)
        self.timers: list[tuple[float, str]] = []
        run_dir = ctx.service.store.home / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.stop_file: Path = run_dir / f"{self.owner.replace(':', '-')}.stop"
        self.stop_file.unlink(missing_ok=True)
        self.gate_runs = 0  # gates executed (a cached attempt is not)
        self.cached: list[tuple[str, CachedFrom | None]] = []  # cached attempts: milestone, the run reused
        self.claimed = 0
        self._claimed_at_check = -1
        self._prepared = False
        self.driver = driver_identity()
        self.monitor = new_monitor()  # watches this drive's gates (stop file, log lines to the UI)
        self.crashes: dict[tuple[int, int], int] = {}  # gate tasks that died before reporting (flows/outage.py)
        self.doing: Doing | None = None  # the drive's doers, when a milestone in scope has a do: command
        self.doer_holds: set[str] = set()  # doer milestones held while as many doers run as may
        self.do_futures: dict[str, PrefectFuture[Any] | State[Any]] = {}  # a doer's task, for its gate to follow
        self.do_totals = DoTotals()  # what this drive's doers did, for its summary
        self.packages: list[str] | None = None  # the workspace's packages the import rule checks (gates/judge.py)
        self._node_warned = False  # (a gate's task run could not be drawn: said once)

    # -- submitting --------------------------------------------------------

    def _submit(
        self,
        kind: TaskKind,
        claim: Claim,
        commands: list[GateCommand],
        log_path: str,
        timeout: float | None,
        extra_env: dict[str, str] | None = None,
        *,
        cached: bool = False,
        cwd: Path | None = None,
        judge: JudgeOrder | None = None,
    ) -> None:
        name = claim.milestone.name
        m = claim.milestone
        key = _key(claim, kind)
        spec = GateSpec(
            claim=claim,
            kind=kind,
            commands=commands,
            cwd=str(self.session.ctx.store.root),
            env={**self.session.gate_env(claim), **(extra_env or {})},
            timeout=timeout,
            log_path=log_path,
            stop_file=str(self.stop_file),
            driver=self.driver,
            inputs=m.inputs if kind is TaskKind.GATE and m.has_inputs else [],
            cached=cached,
            reuse_units=m.cache,
        )
        if cwd is not None:
            spec.cwd = str(cwd)
        if kind is TaskKind.DO or judge is not None:  # a doer's whole environment, or its judge's (gates/doer_env.py)
            spec.env, spec.inherit_env = dict(extra_env or {}), False
        spec.judge = judge
        # A fix follows a failed attempt: waiting on that failed future would leave it NotReady forever, so it
        # waits on nothing (it is submitted only after the attempt finished anyway).
        deps = [self.by_name[d] for d in claim.milestone.deps if d in self.by_name] if kind is not TaskKind.FIX else []
        if kind is TaskKind.GATE and name in self.do_futures:  # after its doer's task: the UI shows do -> gate
            deps = [self.do_futures.pop(name)]
        # Named after the milestone (``task_run_name``), and without tags:
        # Prefect asks the API for the tags' concurrency slots before every
        # tagged task run (a round trip per gate). Its task (gate or fix) says what it runs.
        future: PrefectFuture[Any] | None = None
        # Its end reaches done_q once, through its box (SpecBox.end): from the task as soon as its verdict is
        # kept (the loop goes on while Prefect ends the task run), else from its future's end.
        box = SpecBox(spec, self.session.units, self.monitor, functools.partial(self.done_q.put, key))
        if kind is not TaskKind.FIX and not cached:
            box.confirm = functools.partial(self.session.leases.confirm, claim)
        self._boxed(kind, claim, box)
        if self.ctx.inline:
            self.inline.append((key, deps))  # run by the loop when it would wait (_run_inline)
        else:
            future = GATE_TASKS[kind].submit(box, wait_for=deps)  # type: ignore[call-overload]
            if kind is TaskKind.GATE:
                self.by_name[name] = future
            elif kind is TaskKind.DO:
                self.do_futures[name] = future
        # (its lease is in the keeper since its claim: _fill)
        self.running[key] = _Running(key, kind, claim, spec, box, future)
        self.ctx.submitted += 1
        if future is not None:
            future.add_done_callback(lambda _future: box.end())

    def _stand_in(self, claim: Claim, result: GateResult) -> None:
        """A cached ``result`` stands in for ``claim``'s gate: its task run is
        drawn in its final state (Cached), not run through Prefect's task
        engine (which cost about as much as a `true` gate each, for a task
        that only reads the result back: docs/benchmarks.md), and the loop
        takes the verdict at once, as from a task that ended."""
        key, spec = _key(claim, TaskKind.GATE), _recorded_spec(claim)
        box = SpecBox(spec, None, None, functools.partial(self.done_q.put, key))
        box.keep(result)
        self._draw(claim, result, output=False)
        self.running[key] = _Running(key, TaskKind.GATE, claim, spec, box, None)
        box.end()

    def _draw(self, claim: Claim, result: GateResult, *, output: bool) -> None:
        """Draw the task run of ``claim``'s gate in its final state (flows/plan_nodes.ran_node), after its
        deps' runs, for its dependents to wait on; with ``output``, the gate's output from its log. The
        picture never costs a recorded gate (as PrefectGuard.call): a failure is a warning, said once."""
        from prefect.logging.loggers import task_run_logger

        from milepost.flows.plan_nodes import ran_node

        m, task = claim.milestone, GATE_TASKS[TaskKind.GATE]
        final = task_state(claim, TaskKind.GATE, result)
        deps = [run_id for d in m.deps if (run_id := self.run_id(d)) is not None]
        try:
            run, self.by_name[m.name] = ran_node(
                m.name,
                self.ctx.flow_run_id or "",
                task.task_key,
                deps,
                final,
                result.started_at,
                result.finished_at,
                key=f"{m.name}-{claim.attempt}",
            )
            self.ctx.submitted += 1
            if output:
                forward_output(_recorded_spec(claim), task_run_logger(run, task), result.passed)
        except Exception as e:
            if not self._node_warned:
                self._node_warned = True
                said = "it passed and is recorded" if output else "its cached pass stands in"
                self.reporter.warning(
                    f"could not draw {m.name}'s task run in the Prefect UI ({type(e).__name__}: {e});"
                    f" {said}, the drive goes on"
                )

    def drop_chained(self) -> None:
        """The drive is ending on a fault: claims not submitted are left to
        their leases (a later drive runs them)."""
        self.chained.clear()

    def run_id(self, name: str) -> UUID | None:
        """The task run this drive ran or drew for ``name`` (None: none yet)."""
        ran = self.by_name.get(name)
        if ran is None:
            return None
        return getattr(ran, "task_run_id", None) or ran.state_details.task_run_id  # type: ignore[union-attr]

    def recorded_early(self) -> set[str]:
        """Milestones whose gates this drive ran and recorded before its flow
        run began (:class:`milepost.flows.early_loop.EarlyLoop`): none here."""
        return set()

    def _boxed(self, kind: TaskKind, claim: Claim, box: SpecBox) -> None:
        """The box of a task about to be queued or submitted, for a subclass
        to fill (:class:`milepost.flows.early_loop.EarlyLoop`)."""

    def _run_inline(self) -> None:
        """Run the next task of :attr:`inline` here (see call_inline); its
        end goes to ``done_q`` as a pool thread's would, whatever happens."""
        key, deps = self.inline.pop(0)
        r = self.running[key]
        try:
            r.future = call_inline(r.kind, r.box, deps)
        except Exception as e:  # Prefect's engine itself failed (a gate's failure is a state): no verdict, a crash
            r.future = Failed(message=f"{type(e).__name__}: {e}")
        finally:
            r.box.end()  # (said already if its body ended)
        if r.kind is TaskKind.GATE:
            self.by_name[r.claim.milestone.name] = r.future
        elif r.kind is TaskKind.DO:
            self.do_futures[r.claim.milestone.name] = r.future

    def _drop_inline(self) -> None:
        """Tasks queued to run here that never ran end now (no verdict: the
        attempt reads as interrupted)."""
        while self.inline:
            self.running[self.inline.pop(0)[0]].box.end()

    def _fill(self) -> None:
        while self.ctx.fault is None and self._room():
            self._hold_doers()
            if not self.chained and not self._api_answers():
                return  # the Prefect API is lost (ctx.fault): nothing more is claimed
            claim = self.chained.pop() if self.chained else self.session.claim_next(self.ctx.expect_revision)
            self.ctx.expect_revision = None
            for name in self.session.busy.keys() - self.told_busy:  # (picks another driver's gate holds)
                self.told_busy.add(name)
                self.reporter.warning(f"{name} not started: {self.session.busy[name]}")
            if claim is None:
                return
            # Renewed from its claim on, not from its submission: reporting it and reading a proof may outlast
            # a short lease under load, and another driver would take over an attempt about to start.
            self.session.leases.add(claim)
            crash_point("claimed")
            if not self._runs_already(claim):
                crash_point("flow-claimed")  # (a claim of the flow run's own: the first gates' are not)
                if not self._api_answers(CLAIMED_FRESH_SECONDS):  # (asked again: a server killed meanwhile is seen)
                    self._give_back(claim)  # the API stopped answering while it was claimed
                    return
            self.claimed += 1
            m = claim.milestone
            self._tell_started(claim)
            if self.doing is not None and m.has_doer and not claim.reproof:
                self._start_do(claim)  # (a re-proof runs the gate alone, on the integration branch)
                continue
            try:
                hit = self.session.cached_result(claim)
                if hit is not None:
                    # A passed run on the same gate and inputs stands in: its result is
                    # written here; the task only stands for it in the flow run's graph.
                    files = AttemptFiles(Path(claim.log_path))
                    files.log.parent.mkdir(parents=True, exist_ok=True)
                    files.write_result(hit[0])
                env = self._imports_elsewhere(claim, hit is not None)
                if isinstance(env, GateResult):
                    self._end_attempt(claim, env)
                    continue
                if hit is not None and m.name not in self.do_futures:
                    self._stand_in(claim, hit[0])
                    continue
                # A milestone without a gate is done when reached, but still a node of the run's graph.
                self._submit(TaskKind.GATE, claim, m.gate, claim.log_path, m.timeout, env, cached=hit is not None)
            except BaseException as e:
                # Never leave a claimed milestone behind a lease nobody renews.
                why = f"could not submit its gate: {type(e).__name__}: {e}"
                self._not_submitted(claim, interrupted_result(claim, datetime.now(UTC), reason=why))
                raise

    def _api_answers(self, within: float = FRESH_SECONDS) -> bool:
        """Whether the flow run's Prefect API answers (see PrefectGuard.may_start):
        a gate started unseen by it would be missing from the flow run."""
        return self.ctx.guard is None or self.ctx.guard.may_start(within)

    def _runs_already(self, claim: Claim) -> bool:
        """Whether ``claim``'s gate runs already (see EarlyLoop): none here."""
        return False

    def _give_back(self, claim: Claim) -> None:
        """A claim made while the API stopped answering, never started:
        recorded interrupted (no budget spent), its milestone ready for a later drive."""
        why = "interrupted: not started, the Prefect API stopped answering when it was claimed"
        self._record(claim, interrupted_result(claim, datetime.now(UTC), reason=why))

    # -- doers (flows/doer_attempts.py) ------------------------------------------------

    def _hold_doers(self) -> None:
        """While as many doers run as may, ready doer milestones wait (held);
        released when a doer ends."""
        if self.doing is None:
            return
        if self.doing.busy():
            for m in self.session.graph.ready():
                if m.has_doer and m.name not in self.doer_holds:
                    self.doer_holds.add(m.name)
                    self.session.hold(m.name)
        elif self.doer_holds:
            timed = {name for _, name in self.timers}
            for name in self.doer_holds - timed:
                self.session.unhold(name)
            self.doer_holds.clear()

    def _start_do(self, claim: Claim) -> None:
        """Submit the doer of ``claim``'s attempt (its gate follows it), or
        end the attempt when no doer may start."""
        assert self.doing is not None
        try:
            start = self.doing.start(claim)
            if isinstance(start, NotStarted):
                self._end_attempt(claim, start.result, final=start.final)  # (final: stuck at once)
                return
            m = claim.milestone
            self._submit(TaskKind.DO, claim, start.commands, start.log_path, m.do_timeout, start.env, cwd=start.cwd)
        except BaseException as e:
            why = f"could not start its doer: {type(e).__name__}: {e}"
            self._record(claim, interrupted_result(claim, datetime.now(UTC), reason=why))
            raise

    def _after_do(self, r: _Running, result: GateResult) -> None:
        """A doer ended: its gate runs in its judge, or its attempt ends here."""
        assert self.doing is not None
        if result.outcome is Outcome.INTERRUPTED:
            self.doing.interrupted(r.claim, result)  # (its do run says how long the doer ran)
            self._end_attempt(r.claim, result)
            return
        after, run = self.doing.after_do(r.claim, result)
        self.do_totals.add(run)
        self.reporter.do_finished(r.claim, run)
        if isinstance(after, GateResult):
            self._end_attempt(r.claim, after)
            return
        if self.ctx.fault is not None or not self._api_answers():
            # (no new gate once a part is lost: its committed change waits on its branch for the next attempt)
            self.doing.forget(r.claim)
            why = "interrupted: its gate not started, the drive lost a part (its change waits on its branch)"
            self._end_attempt(r.claim, interrupted_result(r.claim, datetime.now(UTC), reason=why))
            return
        self._judge(r.claim, after)

    def _judge(self, claim: Claim, worktree: Path) -> None:
        """Submit the gate of a doer's attempt: its task makes the judge (the
        checkout of its committed result: gates/judge.py) and runs it there,
        with the doer's scrubbed environment and the import rule. With
        ``isolate: none``, in ``worktree`` (the workspace itself)."""
        assert self.doing is not None
        m = claim.milestone
        judged = self.doing.judge_order(claim, self._packages())
        if judged is None:
            where = {"MILEPOST_WORKSPACE": str(worktree)}
            self._submit(TaskKind.GATE, claim, m.gate, claim.log_path, m.timeout, where, cwd=worktree)
            return
        env = {**judged.env, **self.session.gate_env(claim)}  # (MILEPOST_WORKSPACE: the judge, set by the task)
        self._submit(TaskKind.GATE, claim, m.gate, claim.log_path, m.timeout, env, cwd=worktree, judge=judged.order)

    # -- the import rule (gates/judge.py) ----------------------------------------------

    def _imports_elsewhere(self, claim: Claim, cached: bool) -> dict[str, str] | GateResult:
        """A gate about to run outside the workspace (the drive's integration
        checkout: see _gates_in_integration): what the import rule adds to its
        environment, or the attempt's failure (a package resolves outside)."""
        where = Path(self.session.ctx.store.root)
        if cached or not claim.milestone.has_gate or where.resolve() == Path(self.ctx.service.store.root).resolve():
            return {}
        return self._import_rule(claim, where, {**os.environ, **self.session.gate_env(claim)})

    def _packages(self) -> list[str]:
        """The workspace's packages the import rule checks: those the plan's module: entries name."""
        if self.packages is None:
            self.packages = named_packages(e for m in self.session.graph for e in m.inputs)
        return self.packages

    def _import_rule(self, claim: Claim, checkout: Path, env: dict[str, str]) -> dict[str, str] | GateResult:
        """The checkout's source roots first on PYTHONPATH, or the refusal
        when the gate's python would import a package from elsewhere."""
        rule = import_rule(checkout, self._packages(), claim.milestone.gate, env)
        if rule.refusal is None:
            return rule.env
        log = Path(claim.log_path)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"=== {rule.refusal}\n")
        now = datetime.now(UTC)
        return GateResult(
            outcome=Outcome.FAILED, reason=rule.refusal, tail=rule.refusal, started_at=now, finished_at=now,
            log_path=str(log),
        )  # fmt: skip

    def _end_attempt(self, claim: Claim, result: GateResult, *, final: bool = False) -> None:
        """Record an attempt that ended before its gate ran (its doer failed or was
        refused, or none could start); a ``final`` one leaves the milestone stuck."""
        done = self._record(claim, result, final=final)
        self.reporter.gate_finished(claim, done)
        if done.note:
            self.reporter.warning(f"{claim.milestone.name}: {done.note}")
        self._after_failure(claim, done, result)

    # -- finishing -----------------------------------------------------------

    def _record(self, claim: Claim, result: GateResult, *, final: bool = False) -> DoneResult:
        self.session.leases.remove(claim)
        return self.session.record(claim, result, release=result.outcome is Outcome.INTERRUPTED, final=final)

    def _not_submitted(self, claim: Claim, result: GateResult) -> None:
        """A claim whose task could not be submitted: recorded ``result``
        (see :class:`milepost.flows.early_loop.EarlyLoop` for one whose gate runs)."""
        self._record(claim, result)

    def _early_result(self, r: _Running, result: GateResult) -> GateResult:
        """A first gate's task that ended without its verdict (its engine failed)
        must not leave the command running unrecorded: stopped, and its own end read."""
        early = r.box.early
        if early is None or r.box.verdict is not None:
            return result
        early.stop.set()
        try:
            return early.wait()
        except Exception:
            return result

    def _finish(self, r: _Running) -> None:
        result = self._early_result(r, read_result(r.box, r.future, self.crashes))
        if r.box.lost:
            self._lost(r, result)
            return
        if r.kind is TaskKind.DO:
            self._after_do(r, result)
            return
        if r.kind is TaskKind.FIX:
            self.session.record_fix(r.claim, result)
            self.reporter.fix_finished(r.claim, result)
            self._release_hold(r.claim.milestone.name)
            return
        if self.doing is not None and r.claim.milestone.has_doer and not r.claim.reproof:
            merged = self._merge_doer(r, result)
            if merged is None:
                return
            result = merged
        self._counted(r.claim, result)
        if self._may_chain(result):
            self.session.leases.remove(r.claim)
            done, after = self.session.record_and_claim_next(r.claim, result)
            self.chained.append(after)
        else:
            done = self._record(r.claim, result)
        self._reported(r.claim, done, result)

    def _counted(self, claim: Claim, result: GateResult) -> None:
        """A gate's end in the drive's counts: its runs (or cached attempts) and time."""
        name = claim.milestone.name
        if result.outcome is Outcome.CACHED:
            self.cached.append((name, result.cached_from))
        elif claim.milestone.has_gate:
            self.gate_runs += 1
        self.ctx.durations[name] = self.ctx.durations.get(name, 0.0) + result.duration

    def _reported(self, claim: Claim, done: DoneResult, result: GateResult) -> None:
        """A gate's recorded end told, and what follows a failure started."""
        name = claim.milestone.name
        self.reporter.gate_finished(claim, done)
        if done.note:  # the outcome was not applied as it stands (its lease passed on, the milestone moved)
            self.reporter.warning(f"{name}: {done.note}")
        if result.rewrote:
            self.reporter.warning(
                f"{name}: its gate changed its own inputs ({describe_changes(result.rewrote)}): it stays stale"
            )
        self._after_failure(claim, done, result)

    def _merge_doer(self, r: _Running, result: GateResult) -> GateResult | None:
        """A doer attempt's gate ended: merged when it passed (a conflict
        fails it), unless its lease passed to another driver meanwhile (this
        one stalled): then that driver recorded it, nothing is merged (None)."""
        assert self.doing is not None
        if not result.passed:
            self.doing.forget(r.claim)
            return result
        if not self.session.leases.confirm(r.claim):
            self.session.leases.remove(r.claim)
            self.doing.forget(r.claim)
            name = r.claim.milestone.name
            self.reporter.warning(f"{name}: not merged: its lease passed to another driver, which recorded the attempt")
            return None
        merged = self.doing.after_gate(r.claim, result)
        self._gates_in_integration()  # (a person who started editing the workspace moved the merges elsewhere)
        return merged

    def _lost(self, r: _Running, result: GateResult) -> None:
        """Another driver took the attempt over before its task started
        anything (see :attr:`SpecBox.lost`), and recorded it: nothing to record."""
        self.session.leases.remove(r.claim)
        self.reporter.warning(f"{r.claim.milestone.name}: {result.reason.removeprefix('interrupted: ')}")
        self.do_futures.pop(r.claim.milestone.name, None)
        if self.doing is not None:
            self.doing.forget(r.claim)

    def _may_chain(self, result: GateResult) -> bool:
        """Whether the record of ``result`` may claim the next gate in its
        transaction: a passed attempt (nothing to hold back after it), room
        for a gate, no retry delay due meanwhile, nothing lost."""
        if not result.passed or self.ctx.fault is not None or self.timers or self.ctx.expect_revision is not None:
            return False
        if self.doing is not None:
            return False  # the next claim may need a doer: _fill weighs the doers' room first
        return self._room()

    def _tell_started(self, claim: Claim) -> None:
        """Report ``claim``'s gate started (EarlyLoop: unless told already)."""
        self.reporter.gate_started(claim, self._started(claim))

    def _started(self, claim: Claim) -> datetime | None:
        """When ``claim``'s gate started, if before the loop took it (None: it starts now)."""
        return None

    def _room(self) -> bool:
        """Whether fewer gates run than ``max_parallel`` (fix hooks aside)."""
        return len([r for r in self.running.values() if r.kind is TaskKind.GATE]) < self.ctx.max_parallel

    def _after_failure(self, claim: Claim, done: DoneResult, result: GateResult) -> None:
        m = done.milestone
        if done.passed or m.status is not MilestoneStatus.NEEDS_FIX:
            return
        if not m.fix and not m.flaky and not m.has_doer and self.session.unchanged_since(m, result):
            # The same inputs would fail the same way: wait for a change (a later drive).
            why = f"failed at attempt {claim.attempt}; inputs unchanged since: waiting for a change"
            self.session.wait_for_change(m.name, why)
            self.reporter.waiting_for_change(m.name, why)
            return
        if m.fix:
            self.session.hold(m.name)
            fix_log = str(AttemptFiles(Path(claim.log_path)).fix.log)
            fix = [GateCommand(name="fix", run=m.fix)]
            self._submit(TaskKind.FIX, claim, fix, fix_log, m.timeout, {"MILEPOST_FAILURE_LOG": claim.log_path})
        elif m.retry_at is not None:
            self._hold_until(m.name, m.retry_at)

    def _release_hold(self, name: str) -> None:
        g = self.session.graph
        if name not in g:  # removed by a plan revision meanwhile
            return
        m = g.get(name)
        if m.retry_at is not None and m.retry_at > datetime.now(UTC):
            self._hold_until(name, m.retry_at)
        else:
            self.session.unhold(name)

    def _hold_until(self, name: str, when: datetime) -> None:
        self.session.hold(name)
        wait = max(0.0, (when - datetime.now(UTC)).total_seconds())
        self.timers.append((time.monotonic() + wait, name))
        self.reporter.retry_scheduled(name, when, wait)

    def hold_retries(self) -> None:
        """Failed milestones whose retry delay has not passed wait for it (unless they wait already)."""
        now, timed = datetime.now(UTC), {name for _, name in self.timers}
        for m in self.session.graph:
            due = m.retry_at
            if m.status is MilestoneStatus.NEEDS_FIX and due is not None and due > now and m.name not in timed:
                self._hold_until(m.name, due)

    def _due_timers(self) -> None:
        now = time.monotonic()
        for entry in [t for t in self.timers if t[0] <= now]:
            self.timers.remove(entry)
            self.session.unhold(entry[1])

    # -- the loop ------------------------------------------------------------

    def _reclaim(self) -> int:
        """Take over milestones whose driver died (expired leases); see
        :func:`milepost.service.takeover.reclaim_expired`. Returns how many."""
        reclaimed = self.session.reclaim_expired()
        for done in reclaimed:
            self.reporter.lease_reclaimed(done)
        return len(reclaimed)

    def check_proofs(self) -> None:
        """Stale milestones join the re-proof queue; failed ones on unchanged inputs are held."""
        known = dict(self.session.waiting)
        self.session.check_proofs()
        g = self.session.graph
        for name in sorted(self.session.to_reprove, key=lambda n: g.get(n).id):
            self.reporter.stale_found(name, self.session.stale[name])
        for name, why in self.session.waiting.items():
            if name not in known:
                self.reporter.waiting_for_change(name, why)

    def prepare(self) -> None:
        """Before the first claim: reclaim what dead drivers left, and look at
        the inputs; with doer milestones in scope, the workspace's repository."""
        g = self.session.graph
        if any(m.has_doer for m in g if self.ctx.scope is None or m.name in self.ctx.scope):
            self.doing = Doing.open(self.ctx.service, self.item, self.ctx.max_doers)
            self._gates_in_integration()
        self._reclaim()
        self.check_proofs()
        self._prepared = True

    def _gates_in_integration(self) -> None:
        """When doers merge elsewhere than the workspace (docs/doers.md,
        "Isolation"), the drive's gates run and its inputs are read there too:
        the merged work is what they prove, the workspace's files never change."""
        into = self.doing.integration if self.doing is not None else None
        root = self.session.ctx.store.root
        if into is None or into.path.resolve() == Path(root).resolve():
            return
        self.session.work_in(into.path)
        if into.path.resolve() == Path(self.ctx.service.store.root).resolve():  # (back in the workspace)
            self.reporter.warning(f"the workspace is clean on {into.base}: doers merge, and gates run, in it again")
            return
        if into.aside:
            said = (
                f"{into.why}: doers merge into {into.branch}, and gates run, in {into.path} (never in your"
                " files); the drive ends with the one command that brings the work in"
            )
        else:
            said = f"{into.why}: doers merge into it, and gates run, in {into.path}"
        self.reporter.warning(said)

    def run(self) -> None:
        if not self._prepared:
            self.prepare()
        self.hold_retries()
        try:
            with self.session.leases, self.session.units_ahead(self.ctx.units_ahead):
                self._loop()
        finally:
            self.stop_file.unlink(missing_ok=True)

    def _loop(self) -> None:
        try:
            while True:
                self._due_timers()
                self._fill()
                if not self.running:
                    if not self._idle():
                        return
                    continue
                if self.inline:
                    self._run_inline()
                timeout = 0.5 if self.timers else 5.0
                try:
                    key = self.done_q.get(timeout=timeout)
                except queue.Empty:
                    continue
                r = self.running.pop(key)
                if isinstance(r.future, PrefectFuture) and r.box.verdict is None and not r.spec.files.result.exists():
                    with contextlib.suppress(Exception):  # a task that died outside its run: read_result says so
                        r.future.wait()
                self._finish(r)
        except EnvironmentProblem as e:
            # The store is gone (or locked): the running gates end into their files.
            finish_running(self, e)
            raise
        except BaseException:
            self._stop_all()
            raise

    def _idle(self) -> bool:
        """Nothing runs: whether the loop goes on (a timer to wait for,
        work a dead driver left, a re-proof, other live drivers to wait for)."""
        if self.ctx.fault is not None:
            return False  # a lost part: the drive ends with it (flows/outage.py)
        # Before giving up: a driver that died meanwhile may have left work
        # behind, and the gates that ran may have changed other milestones' inputs.
        if not self.timers and not self._reclaim():
            claimed = self.claimed
            self.check_proofs()
            if not self.session.to_reprove or claimed == self._claimed_at_check:
                # other live drivers hold work of the item: wait; else nothing new to re-prove (or it cannot run now)
                return wait_for_others(self)
            self._claimed_at_check = claimed
        if self.timers:  # (else: a reclaim or a re-proof made something claimable now)
            time.sleep(max(0.05, min(t for t, _ in self.timers) - time.monotonic()))
        return True

    def _stop_all(self) -> None:
        """Interrupted: kill every running gate, record the attempts as
        interrupted and make their milestones ready again (and the one
        claimed with the last record, not started yet)."""
        for claim in self.chained:
            if claim is not None:
                why = "interrupted: the drive stopped before its gate started"
                self._record(claim, interrupted_result(claim, datetime.now(UTC), reason=why))
        self.chained.clear()
        if not self.running:
            return
        self._drop_inline()
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
            if r.kind is not TaskKind.FIX:
                self._stopped(r)
        self.running.clear()

    def _stopped(self, r: _Running) -> None:
        """Record the attempt of a gate or doer the stop ended (see :meth:`_stop_all`)."""
        # A gate that ended before the stop counts as it ended (its verdict file says how).
        ended = r.box.verdict is not None or r.spec.files.result.exists()
        result = read_result(r.box, r.future, self.crashes) if ended else None
        if result is None:
            result = interrupted_result(r.claim, datetime.now(UTC), reason="interrupted: the drive stopped")
        done = self._record(r.claim, self.without_merge(r, result, "the drive stopped"))
        self.reporter.gate_finished(r.claim, done)

    def without_merge(self, r: _Running, result: GateResult, why: str) -> GateResult:
        """What an attempt ends as when the drive ends it (``why``) before its
        merge (see :meth:`Doing.ended_without_merge`); any attempt of a
        milestone without a doer, or a re-proof: ``result`` as it is."""
        if self.doing is None or not r.claim.milestone.has_doer or r.claim.reproof:
            return result
        return self.doing.ended_without_merge(r.claim, result, why, doer_task=r.kind is TaskKind.DO)


def finish_running(loop: Loop, fault: EnvironmentProblem) -> None:
    """The store or the API is gone (``fault``): see the module. Returns when
    every running gate and fix has ended."""
    if loop.ctx.fault is None:
        loop.ctx.fault = fault
    store = loop.ctx.service.store
    store.retry_for = 0.0  # the drive is ending: one try per record from here on
    for key, _ in loop.inline:  # queued, never started: its lease expires, a later drive runs it
        loop.session.leases.remove(loop.running.pop(key).claim)
    loop.inline.clear()
    loop.drop_chained()  # (the same for a claim made with the last record)
    if loop.running:
        names = ", ".join(sorted({r.claim.milestone.name for r in loop.running.values()}))
        loop.reporter.warning(f"{fault.message}; no new gate is started, waiting for {names} to finish")
    while loop.running:
        try:
            key = loop.done_q.get(timeout=0.5)
        except queue.Empty:
            continue
        r = loop.running.pop(key, None)
        if r is None or r.kind is TaskKind.FIX:
            continue
        result = loop._early_result(r, read_result(r.box, r.future, loop.crashes))
        result = loop.without_merge(r, result, f"the drive ended ({fault.kind})")
        try:
            done = loop._record(r.claim, result)
        except EnvironmentProblem:
            loop.reporter.warning(
                f"{r.claim.milestone.name} (attempt {r.claim.attempt}) ended: {result.reason}; not recorded,"
                f" the next drive recovers it from {Path(r.spec.log_path).name} and the files beside it"
            )
            continue
        loop.reporter.gate_finished(r.claim, done)
