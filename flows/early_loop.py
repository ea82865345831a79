"""The drive loop when its first steps were done before Prefect was
imported (:mod:`milepost.flows.early`): it adopts that drive session (its
lease owner), tells what the first look found (reclaimed leases, stale
milestones, failures held until their inputs change) after the drive's
start, submits the first claims before any other, and their tasks wait for
the gates started already instead of starting the commands: each box gets
its running gate before its task is queued or submitted, so before it can
run (in the loop's thread with one gate at a time, else in the task
runner's)."""

from __future__ import annotations

import contextlib

from milepost.errors import EnvironmentProblem
from milepost.events import Reporter
from milepost.flows.early import EarlyStart
from milepost.flows.gate_task import SpecBox, TaskKind
from milepost.flows.loop import DriveContext, Loop
from milepost.gates.command import GateResult
from milepost.results import Claim

__all__ = ["EarlyLoop"]


class EarlyLoop(Loop):
    def __init__(self, ctx: DriveContext, item_id: int, reporter: Reporter, early: EarlyStart) -> None:
        super().__init__(ctx, item_id, reporter)
        self.early = early
        self.session = early.session
        self.owner = early.session.owner
        self.session.units.set_workers(ctx.max_parallel)
        self.stop_file = self.stop_file.with_name(f"{self.owner.replace(':', '-')}.stop")
        self.stop_file.unlink(missing_ok=True)

    def prepare(self) -> None:
        """What the first look found, told now; the first claims go first, in their order."""
        early = self.early
        for done in early.reclaimed:
            self.reporter.lease_reclaimed(done)
        for name in early.stale:
            self.reporter.stale_found(name, self.session.stale[name])
        for name, why in early.waiting.items():
            self.reporter.waiting_for_change(name, why)
        self.chained.extend(reversed(early.adopt()))  # (_fill takes the last first)
        self._prepared = True

    def recorded_early(self) -> set[str]:
        return {gate.claim.milestone.name for gate in self.early.gates if gate.recorded is not None}

    def _boxed(self, kind: TaskKind, claim: Claim, box: SpecBox) -> None:
        """A claim whose gate runs already: its task waits for that command;
        the loop's lease keeper renews the claim from here."""
        gate = self.early.gate_of(claim)
        if gate is None or kind is not TaskKind.GATE or gate.adopted:
            return
        box.early = gate
        gate.handed_over()

    def _stop_all(self) -> None:
        gates = [gate for gate in self.early.gates if gate.recorded is None]
        for gate in gates:  # every command told to stop first, then each waited for
            gate.stop.set()
        for gate in gates:
            if not gate.adopted:  # not submitted (still chained, or its submit failed): recorded interrupted here
                gate.settle(interrupt=True)
            else:  # its task may never have run; the file beside its log tells how it ended
                gate.join(15)
        # (A first gate's claim is its gate's to record, or recorded already: not the loop's.)
        self.chained = [c for c in self.chained if c is None or self.early.gate_of(c) is None]
        super()._stop_all()

    def drop_chained(self) -> None:
        """On a fault, first gates not submitted yet finish and are recorded
        (as the running ones are); the rest is left to its leases."""
        for gate in self.early.gates:
            if not gate.adopted and gate.claim in self.chained:
                self.chained.remove(gate.claim)
                with contextlib.suppress(EnvironmentProblem):  # (the store is gone: its files tell a later drive)
                    gate.settle(interrupt=False)
        super().drop_chained()

    def _not_submitted(self, claim: Claim, result: GateResult) -> None:
        gate = self.early.gate_of(claim)
        if gate is None:
            super()._not_submitted(claim, result)
        else:  # its command runs: stopped, recorded interrupted (unless recorded already or taken over)
            gate.settle(interrupt=True)
