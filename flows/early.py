"""A drive's first gate, started before Prefect is imported.

Importing Prefect takes a second or more of a drive's start (about 1.2 s
of 2 s on the 2-core reference machine), all of it before the first gate
could start. The CLI's ``drive`` therefore does the loop's first steps
itself, with the store only: it opens the drive's session (its lease
owner), reclaims what dead drivers left, looks at the inputs, claims the
first milestone and starts its gate in a thread of its own (the command
runs under this process's gate supervisor, on the other core), and only
then imports Prefect and starts the flow run. The drive loop adopts what
was done here (:attr:`DriveContext.early`): the same session, the events
to report, and the running gate, whose task run waits for it instead of
starting the command (:func:`milepost.flows.gate_task.run_gate_spec`).

Exactly once as before: the claim is the store's lease, renewed here until
the loop's keeper holds it; the gate dies with this process. When the loop
never adopts it (an interrupt while Prefect is imported, the API
unreachable, an error), :meth:`EarlyGate.settle` ends it: an interrupt
stops the gate and records the attempt as interrupted (its milestone ready
again, no budget spent); anything else lets the gate finish and records its
verdict, as the loop would have.

Nothing here imports Prefect. Only the plain case starts early: the thread
task runner, no ``--until``, no ``--expect-revision``, no retry delay
pending; otherwise ``start_first_gate`` returns None and the drive starts
as it did.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from milepost.gates.attempt import AttemptFiles
from milepost.gates.command import GateResult, Outcome, run_gate
from milepost.gates.inputs import Fingerprint
from milepost.gates.outcome import CachedFrom
from milepost.graph.models import GateCommand
from milepost.graph.status import MilestoneStatus
from milepost.results import Claim, DoneResult
from milepost.service.drive import DriveSession

if TYPE_CHECKING:
    from milepost.service import Service
    from milepost.service.leases import LeaseKeeper

__all__ = ["EarlyGate", "EarlyStart", "start_first_gate"]


class EarlyGate:
    """The first gate's command, running in a thread of its own from before
    the flow run: :meth:`wait` is what its task does instead of running it."""

    def __init__(self, session: DriveSession, claim: Claim, keeper: LeaseKeeper) -> None:
        self.session = session
        self.claim = claim
        self.keeper = keeper  # renews the claim's lease until the loop's keeper holds it
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
                origin=CachedFrom(item=self.claim.item, milestone=m.name, attempt=self.claim.attempt),
            )
        except BaseException as e:  # handed to the waiter
            self._error = e
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
        it finish, and record the attempt. Idempotent; None when the loop had it."""
        if self.adopted or self.settled:
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
    """The drive's session, whose cache lookup for the claim whose gate runs
    already finds nothing (it found nothing before the gate started)."""

    started: EarlyGate | None = None

    def cached_result(self, claim: Claim) -> tuple[GateResult, Fingerprint] | None:
        if self.started is not None and claim is self.started.claim:
            return None
        return super().cached_result(claim)


class EarlyStart:
    """What the drive loop adopts (:class:`milepost.flows.early_loop.EarlyLoop`):
    the prepared session (its owner is the drive's), what its first look
    found to report, and the first claim (its gate started when ``gate`` is
    not None; else the loop submits it as usual)."""

    def __init__(
        self,
        session: DriveSession,
        reclaimed: list[DoneResult],
        stale: list[str],
        waiting: dict[str, str],
        claim: Claim | None,
        gate: EarlyGate | None,
    ) -> None:
        self.session = session
        self.reclaimed = reclaimed
        self.stale = stale  # the stale milestones found, by id (the first may be claimed already)
        self.waiting = waiting  # failed milestones held until their inputs change, and why
        self.claim = claim
        self.gate = gate
        self.adopted = False  # the loop took the claim

    def settle(self, *, interrupt: bool) -> None:
        """The drive ends before the loop took the claim: see :meth:`EarlyGate.settle`
        (a claim without a started gate is released, no budget spent)."""
        if self.gate is not None:
            self.gate.settle(interrupt=interrupt)
        elif self.claim is not None and not self.adopted:
            from milepost.service import interrupted_result

            claim, self.claim = self.claim, None
            why = "interrupted: the drive stopped before its gate started"
            self.session.record(claim, interrupted_result(claim, datetime.now(UTC), reason=why), release=True)


def owner_name() -> str:
    """A drive's lease owner: ``drive:HOST:PID:RANDOM``."""
    return f"drive:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def start_first_gate(
    svc: Service,
    item: int,
    *,
    max_parallel: int = 1,
    task_runner: str = "thread",
    until: str | None = None,
    expect_revision: int | None = None,
    use_cache: bool = True,
) -> EarlyStart | None:
    """The loop's first steps, before Prefect is imported (see the module):
    None when this drive does not start early (nothing to run, or not the plain case)."""
    if task_runner != "thread" or until is not None or expect_revision is not None:
        return None
    from milepost.service.drive import nothing_to_run

    if nothing_to_run(svc, item) is not None:
        return None  # answered from the store (run_drive says so)
    now = datetime.now(UTC)
    g = svc.graph(item, proofs=False)[1]
    if any(m.status is MilestoneStatus.NEEDS_FIX and m.retry_at is not None and m.retry_at > now for m in g):
        return None  # a retry delay to honour: the loop's timers
    if any(m.has_doer for m in g):
        return None  # doers run as the drive's tasks, in their worktrees (flows/doing.py)
    session = _Session(svc.ctx, item, owner_name(), use_cache=use_cache)
    session.units.set_workers(max_parallel)
    reclaimed = session.reclaim_expired()
    session.check_proofs()
    g = session.graph
    stale = sorted(session.to_reprove, key=lambda n: g.get(n).id)
    waiting = dict(session.waiting)
    claim = session.claim_next()
    if claim is None:
        return EarlyStart(session, reclaimed, stale, waiting, None, None)
    from milepost.service.leases import LeaseKeeper

    gate: EarlyGate | None = None
    try:
        if claim.milestone.has_gate and session.cached_result(claim) is None:
            keeper = LeaseKeeper(session.ctx, [claim]).__enter__()
            gate = session.started = EarlyGate(session, claim, keeper).start()
    except BaseException:
        EarlyStart(session, reclaimed, stale, waiting, claim, None).settle(interrupt=True)
        raise
    return EarlyStart(session, reclaimed, stale, waiting, claim, gate)
