"""A drive's first gates, started before Prefect is imported.

Importing Prefect takes a second or more of a drive's start (about 1.2 s
of 2 s on the 2-core reference machine), all of it before the first gate
could start. The CLI's ``drive`` therefore does the loop's first steps
itself, with the store only: it opens the drive's session (its lease
owner), reclaims what dead drivers left, looks at the inputs (when it
re-proves, it starts running units ahead of their gates and lets their
first run take the idle workers: the changed units of every stale gate run
together, :meth:`DriveSession.start_units_ahead`), claims the
first milestones (as many as ``--max-parallel`` lets run at once) and
starts their gates, each in a thread of its own (the commands run under
this process's gate supervisor, on the other core); a first drive then
starts the units ahead, for the workers its first gates left idle; and only
then it imports Prefect and starts the flow run. The drive loop adopts what was done here
(:attr:`DriveContext.early`): the same session, the events to report, the
units running ahead, and the running gates, whose task runs wait for them instead of starting the
commands (:func:`milepost.flows.gate_task.run_gate_spec`).

Exactly once as before: each claim is the store's lease, renewed here
until the loop's keeper holds it or its attempt is recorded; the gates die
with this process. When the
loop never adopts them (an interrupt while Prefect is imported, the API
unreachable, an error), :meth:`EarlyStart.settle` ends them: an interrupt
stops the gates and records the attempts as interrupted (their milestones
ready again, no budget spent); anything else lets the gates finish and
records their verdicts, as the loop would have.

Nothing here imports Prefect. Only the plain case starts early: the thread
task runner, no ``--until``, no ``--expect-revision``, no retry delay
pending; otherwise ``start_first_gates`` returns None and the drive starts
as it did.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from milepost.errors import EnvironmentProblem
from milepost.gates._crash import crash_point
from milepost.gates.attempt import AttemptFiles
from milepost.gates.command import GateResult, Outcome, run_gate
from milepost.gates.inputs import Fingerprint
from milepost.gates.outcome import CachedFrom
from milepost.graph.models import GateCommand
from milepost.graph.status import MilestoneStatus
from milepost.results import Claim, DoneResult
from milepost.service.ahead import AHEAD_START_WAIT
from milepost.service.drive import DriveSession

if TYPE_CHECKING:
    from milepost.service import Service
    from milepost.service.leases import LeaseKeeper

__all__ = ["EarlyGate", "EarlyStart", "start_first_gates"]


class EarlyGate:
    """A first gate's command, running in a thread of its own from before
    the flow run: :meth:`wait` is what its task does instead of running it."""

    def __init__(
        self,
        session: DriveSession,
        claim: Claim,
        keeper: LeaseKeeper,
        on_pass: Callable[[EarlyGate], None] | None = None,
    ) -> None:
        self.session = session
        self.claim = claim
        self.keeper = keeper  # renews the claim's lease until the loop's keeper holds it
        self.on_pass = on_pass  # told when the gate passed (in its thread, before waiters hear of its end)
        self.recorded: DoneResult | None = None  # its attempt's record, when made before the loop took it over
        self.stop = threading.Event()  # set: the command's process group is stopped
        self.adopted = False  # the loop took it over (its task waits for it)
        self.settled = False
        self.result: GateResult | None = None
        self.started = datetime.now(UTC)
        self._error: BaseException | None = None
        # Set when the command has ended. (Not Thread.join: on Python 3.11 an interrupt inside join can mark a
        # running thread as stopped, so it would read as ended while its command still runs.)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="milepost-first-gate", daemon=True)

    def start(self) -> EarlyGate:
        self._thread.start()
        return self

    def _run(self) -> None:
        m = self.claim.milestone
        root = self.session.ctx.store.root
        try:
            self.result = run_gate(
                m.gate,
                Path(self.claim.log_path),
                default_cwd=root,
                env=self.session.gate_env(self.claim),
                default_timeout=m.timeout,
                stop=self.stop,
                inputs=m.inputs if m.has_inputs else [],
                root=root,
                units=self.session.units,
                reuse_units=m.cache,
                origin=CachedFrom(item=self.claim.item, milestone=m.name, attempt=self.claim.attempt),
            )
        except BaseException as e:  # handed to the waiter
            self._error = e
        else:
            if self.on_pass is not None and self.result.passed and not self.stop.is_set():
                with contextlib.suppress(Exception):  # (not recorded then: the loop or settle records it)
                    self.on_pass(self)
        finally:
            self._done.set()

    def wait(
        self, stopped: threading.Event | None = None, on_interrupt: Callable[[BaseException], None] | None = None
    ) -> GateResult:
        """The gate's verdict, once its command has ended. ``stopped`` (the
        task's) stops it when set. An interrupt here (Ctrl-C, SIGTERM) stops
        it; once it has ended the attempt is interrupted and the interrupt
        raised again, unless ``on_interrupt`` takes it (as :func:`run_gate`)."""
        interrupt: BaseException | None = None
        while not self._done.is_set():
            try:
                if stopped is not None and stopped.is_set():
                    self.stop.set()
                self._done.wait(0.05)
            except BaseException as e:  # Ctrl-C, SIGTERM: stop the gate, then raise it
                interrupt = interrupt or e
                self.stop.set()
        if interrupt is None:
            return self._verdict()
        self.result = self._interrupted()
        if on_interrupt is None:
            raise interrupt
        on_interrupt(interrupt)
        return self.result

    def run_gate(
        self,
        commands: Sequence[GateCommand],
        log_path: Path,
        *,
        stop: threading.Event | None = None,
        on_interrupt: Callable[[BaseException], None] | None = None,
        **_: Any,
    ) -> GateResult:
        """What the gate's task calls in place of :func:`run_gate` (the same
        command, started already): :meth:`wait`."""
        assert log_path == Path(self.claim.log_path), (log_path, self.claim.log_path)
        return self.wait(stop, on_interrupt)

    def _verdict(self) -> GateResult:
        if self._error is not None:
            raise self._error
        assert self.result is not None
        if self.stop.is_set() and not self.result.passed:
            self.result = self._interrupted()
        return self.result

    def _interrupted(self) -> GateResult:
        result = self.result or GateResult(
            outcome=Outcome.INTERRUPTED,
            reason="",
            started_at=self.started,
            finished_at=datetime.now(UTC),
            log_path=self.claim.log_path,
        )
        result = result.model_copy(update={"outcome": Outcome.INTERRUPTED, "reason": "interrupted: the drive stopped"})
        AttemptFiles(Path(self.claim.log_path)).write_result(result)
        return result

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the command to end."""
        self._done.wait(timeout)

    def handed_over(self) -> None:
        """The loop holds the claim (its lease keeper renews it): this keeper stops."""
        self.adopted = True
        self.keeper.__exit__(None, None, None)

    def settle(self, *, interrupt: bool) -> DoneResult | None:
        """When the loop never adopted the gate: stop it (``interrupt``) or let
        it finish, and record the attempt. Idempotent; None when the loop had it,
        or it was recorded already."""
        if self.adopted or self.settled or self.recorded is not None:
            return None
        self.settled = True
        if interrupt:
            self.stop.set()
        try:
            result = self.wait()
        except BaseException:  # a second interrupt, or the gate's thread failed: interrupted, not spent
            result = self._interrupted()
        finally:
            self.keeper.__exit__(None, None, None)
        return self.session.record(self.claim, result, release=result.outcome is Outcome.INTERRUPTED)


class _Session(DriveSession):
    """The drive's session, whose cache lookup for a claim whose gate runs
    already finds nothing (it found nothing before the gate started)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started: list[EarlyGate] = []

    def cached_result(self, claim: Claim) -> tuple[GateResult, Fingerprint] | None:
        if any(claim is gate.claim for gate in self.started):
            return None
        return super().cached_result(claim)


class EarlyStart:
    """What the drive loop adopts (:class:`milepost.flows.early_loop.EarlyLoop`):
    the prepared session (its owner is the drive's), what its first look
    found to report, and the first claims, in the order they were made
    (each one's gate started when :meth:`gate_of` finds it; else the loop
    submits it as usual)."""

    def __init__(
        self,
        session: _Session,
        reclaimed: list[DoneResult],
        stale: list[str],
        waiting: dict[str, str],
        t0: float | None = None,
    ) -> None:
        self.t0 = time.monotonic() if t0 is None else t0  # the drive began (monotonic): its summary counts from here
        self.session = session
        self.reclaimed = reclaimed
        self.stale = stale  # the stale milestones found, by id (the first may be claimed already)
        self.waiting = waiting  # failed milestones held until their inputs change, and why
        self.found_at = datetime.now(UTC)  # when these were found: told later, after Prefect loaded, with this time
        self.claims: list[Claim] = []
        self.gates = session.started  # (the session's own list: its cache lookup skips their claims)
        self.adopted = False  # the loop took the claims
        self.settled = False  # or, when it never did, settle ended them
        self.closed = False  # no gate chains another any more (the loop took over, or settle began)
        self._lock = threading.Lock()  # (a gate's thread chains while the loop may be taking over)

    def adopt(self) -> list[Claim]:
        """The loop takes the claims over, in the order they were made: no
        gate chains another from now on."""
        with self._lock:
            self.adopted = self.closed = True
            return list(self.claims)

    def claim_first(self, max_parallel: int) -> None:
        """Claim up to ``max_parallel`` milestones and start each one's gate; a
        claim whose gate does not start here (it has none, or a cached result
        stands in) is the last: the loop submits it. (A gate that passes before
        the loop takes over chains the next: :meth:`_chain`.)"""
        while len([c for c in self.claims if not self._recorded(c)]) < max(1, max_parallel):
            claim = self.session.claim_next()
            if claim is None:
                return
            with self._lock:
                self.claims.append(claim)
            crash_point("claimed")
            if not self.start_gate(claim):
                return

    def start_gate(self, claim: Claim) -> bool:
        """Start ``claim``'s gate here, unless it has none or a cached result
        stands in (then the loop submits it): whether it started."""
        if not claim.milestone.has_gate or self.session.cached_result(claim) is not None:
            return False
        from milepost.service.leases import LeaseKeeper

        keeper = LeaseKeeper(self.session.ctx, [claim]).__enter__()
        self.gates.append(EarlyGate(self.session, claim, keeper, on_pass=self._chain).start())
        return True

    def _chain(self, gate: EarlyGate) -> None:
        """``gate`` passed before the loop took it over: record it and claim
        the next milestone in one transaction, as the loop would, and start
        that one's gate too, so a dependent need not wait for the flow run."""
        with self._lock:
            if self.closed:
                return
            assert gate.result is not None
            done, after = self.session.record_and_claim_next(gate.claim, gate.result)
            gate.recorded = done
            gate.keeper.__exit__(None, None, None)
            if after is not None:
                self.claims.append(after)
                crash_point("claimed")
                self.start_gate(after)

    def _recorded(self, claim: Claim) -> bool:
        gate = self.gate_of(claim)
        return gate is not None and gate.recorded is not None

    def gate_of(self, claim: Claim) -> EarlyGate | None:
        """The gate started here for ``claim``, if one was."""
        return next((gate for gate in self.gates if gate.claim is claim), None)

    def settle(self, *, interrupt: bool) -> None:
        """The drive ends before the loop took the claims: see :meth:`EarlyGate.settle`
        (a claim without a started gate is released, no budget spent)."""
        with self._lock:
            self.closed = True
            gates = list(self.gates)
        if interrupt:  # every gate told to stop, then the units run ahead (else they end: a gate may wait for one)
            for gate in gates:
                if not gate.adopted and gate.recorded is None:
                    gate.stop.set()
            self.session.stop_units_ahead()
        for gate in gates:
            with contextlib.suppress(EnvironmentProblem):  # (the store is gone: its files tell a later drive)
                gate.settle(interrupt=interrupt)
        self.session.stop_units_ahead()  # (the loop's block stopped them, when it took them over)
        if self.adopted or self.settled:
            return
        self.settled = True
        from milepost.service import interrupted_result

        why = "interrupted: the drive stopped before its gate started"
        for claim in [c for c in self.claims if self.gate_of(c) is None]:
            self.session.record(claim, interrupted_result(claim, datetime.now(UTC), reason=why), release=True)


def owner_name() -> str:
    """A drive's lease owner: ``drive:HOST:PID:RANDOM``."""
    return f"drive:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def start_first_gates(
    svc: Service,
    item: int,
    *,
    max_parallel: int = 1,
    task_runner: str = "thread",
    until: str | None = None,
    expect_revision: int | None = None,
    use_cache: bool = True,
    checked: bool = False,
) -> EarlyStart | None:
    """The loop's first steps, before Prefect is imported (see the module):
    None when this drive does not start early (nothing to run, or not the plain case).
    ``checked``: the caller found just now that the drive has something to run
    (:func:`milepost.service.drive.nothing_to_run` said None), so it is not looked at again."""
    t0 = time.monotonic()
    if task_runner != "thread" or until is not None or expect_revision is not None:
        return None
    from milepost.service.drive import nothing_to_run

    if not checked and nothing_to_run(svc, item) is not None:
        return None  # answered from the store (run_drive says so)
    now = datetime.now(UTC)
    g = svc.graph(item, proofs=False)[1]
    if any(m.status is MilestoneStatus.NEEDS_FIX and m.retry_at is not None and m.retry_at > now for m in g):
        return None  # a retry delay to honour: the loop's timers
    if any(m.has_doer for m in g):
        return None  # doers run as the drive's tasks, in their worktrees (flows/doer_attempts.py)
    session = _Session(svc.ctx, item, owner_name(), use_cache=use_cache)
    session.units.set_workers(max_parallel)
    reclaimed = session.reclaim_expired()
    session.check_proofs()
    stale = sorted(session.to_reprove, key=lambda n: session.graph.get(n).id)
    early = EarlyStart(session, reclaimed, stale, dict(session.waiting), t0)
    try:
        reproving = bool(session.to_reprove)
        if reproving:  # every stale gate's changed units run together first, while Prefect loads
            session.start_units_ahead()
            session.units.wait_started(AHEAD_START_WAIT)
        early.claim_first(max_parallel)
        if not reproving:  # the first gates took the workers first; the idle ones run later milestones' units
            session.start_units_ahead()
    except BaseException:
        early.settle(interrupt=True)
        raise
    return early
