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
from datetime import datetime

from milepost.errors import EnvironmentProblem
from milepost.events import Reporter
from milepost.flows.early import EarlyGate, EarlyStart
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
        self._told: set[int] = set()  # first gates whose start was told with the moments (ids of their claims)

    def prepare(self) -> None:
        """What the first look found, told now; the first claims go first, in their order."""
        early = self.early
        for done in early.reclaimed:  # (told with the time they were found: before the first gates)
            self.reporter.lease_reclaimed(done, early.found_at)
        for name in early.stale:
            self.reporter.stale_found(name, self.session.stale[name], early.found_at)
        for name, why in early.waiting.items():
            self.reporter.waiting_for_change(name, why, early.found_at)
        claims = early.adopt()
        recorded = [self._recorded_gate(c) for c in claims]
        # Gates recorded already are drawn, not run again as tasks (run); the rest the loop submits.
        self.first_recorded = [gate for gate in recorded if gate is not None]
        self.chained.extend(
            reversed([c for c, gate in zip(claims, recorded, strict=True) if gate is None])
        )  # (last first)
        self._prepared = True

    def _recorded_gate(self, claim: Claim) -> EarlyGate | None:
        gate = self.early.gate_of(claim)
        return gate if gate is not None and gate.recorded is not None else None

    def run(self) -> None:
        if not self._prepared:
            self.prepare()
        # Told in the order they happened while Prefect loaded, starts and ends (a gate starts after its deps
        # ended, so they are drawn before it), each with its own time.
        for _, ended, gate in sorted(self._moments(), key=lambda m: (m[0], m[1])):
            if ended:
                self._account(gate)
            else:
                self._told.add(id(gate.claim))
                self.reporter.gate_started(gate.claim, gate.started)
        super().run()

    def _moments(self) -> list[tuple[datetime, bool, EarlyGate]]:
        """The recorded first gates' starts and ends: (when, ended, gate)."""
        out = []
        for gate in self.first_recorded:
            assert gate.result is not None
            out += [(gate.started, False, gate), (gate.result.finished_at, True, gate)]
        # The first gates still running started among them: told in their place too (the loop adopts them).
        out += [(gate.started, False, gate) for gate in self.early.gates if gate.claim in self.chained]
        return out

    def _account(self, gate: EarlyGate) -> None:
        """A first gate that passed and was recorded before the flow run began
        (its start told already): reported as the loop reports a gate's end, its task run made in its final
        state (flows/plan_nodes.ran_node) with its output, for its dependents
        to wait on."""
        claim = gate.claim
        assert gate.recorded is not None and gate.result is not None
        gate.adopted = True  # (its keeper stopped when it was recorded: EarlyStart._chain)
        result, done = gate.result, gate.recorded
        self.claimed += 1
        self._draw(claim, result, output=True)
        self._counted(claim, result)
        self._reported(claim, done, result)

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

    def _tell_started(self, claim: Claim) -> None:
        if id(claim) not in self._told:  # (a first gate's start was told in its place: run)
            super()._tell_started(claim)

    def _started(self, claim: Claim) -> datetime | None:
        """A first gate's command started before the flow run: its own start."""
        gate = self.early.gate_of(claim)
        return gate.started if gate is not None else None

    def _runs_already(self, claim: Claim) -> bool:
        return self.early.gate_of(claim) is not None

    def _not_submitted(self, claim: Claim, result: GateResult) -> None:
        gate = self.early.gate_of(claim)
        if gate is None:
            super()._not_submitted(claim, result)
        else:  # its command runs: stopped, recorded interrupted (unless recorded already or taken over)
            gate.settle(interrupt=True)
