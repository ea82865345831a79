"""The drive loop when its first steps were done before Prefect was
imported (:mod:`milepost.flows.early`): it adopts that drive session (its
lease owner), tells what the first look found (reclaimed leases, stale
milestones, failures held until their inputs change) after the drive's
start, submits the first claim before any other, and its task waits for
the gate started already instead of starting the command. That task runs
in the loop's thread, as every task of a drive of one gate at a time does
(with ``--max-parallel`` above 1 the others go to the task runner's
threads): its box gets the running gate before it can run."""

from __future__ import annotations

from pathlib import Path

from milepost.events import Reporter
from milepost.flows.early import EarlyStart
from milepost.flows.gate_task import TaskKind
from milepost.flows.loop import DriveContext, Loop
from milepost.graph.models import GateCommand
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
        """What the first look found, told now; the first claim goes first."""
        early = self.early
        for done in early.reclaimed:
            self.reporter.lease_reclaimed(done)
        for name in early.stale:
            self.reporter.stale_found(name, self.session.stale[name])
        for name, why in early.waiting.items():
            self.reporter.waiting_for_change(name, why)
        if early.claim is not None:
            self.chained.append(early.claim)
            early.adopted = True
        self._prepared = True

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
    ) -> None:
        gate = self.early.gate
        if gate is None or kind is not TaskKind.GATE or claim is not gate.claim or gate.adopted:
            super()._submit(kind, claim, commands, log_path, timeout, extra_env, cached=cached, cwd=cwd)
            return
        inline, self.ctx.inline = self.ctx.inline, True  # queued to run in this thread, not run yet
        try:
            super()._submit(kind, claim, commands, log_path, timeout, extra_env, cached=cached, cwd=cwd)
        finally:
            self.ctx.inline = inline
        # Its task waits for the command already running; the loop's lease keeper renews the claim from here.
        self.running[f"{claim.milestone.name}#{claim.attempt}:{kind}"].box.early = gate
        gate.handed_over()

    def _stop_all(self) -> None:
        gate = self.early.gate
        if gate is not None and not gate.adopted and gate.claim in self.chained:
            self.chained.remove(gate.claim)  # its gate runs: stopped, and recorded interrupted
            gate.settle(interrupt=True)
        elif gate is not None:  # adopted: its task may never have run; the file beside its log tells how it ended
            gate.stop.set()
            gate.join(15)
        super()._stop_all()
