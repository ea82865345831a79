"""The service layer: the one way the CLI, the MCP server and the flows
change or read the store. :class:`Service` is a façade; each concern lives in
its own module as functions of a :class:`~milepost.service._tx.Context`:

| module | holds |
|---|---|
| ``_tx`` | the write path: item lock, revision compare-and-swap, typed events, the graph cache |
| ``_rows`` | the tables, row <-> model mapping, the hot paths' prebuilt statements |
| ``items`` | work items: create, read, list, focus, update, complete, cancel |
| ``evidence`` | an item's plan.md artifact and its work refs |
| ``waits`` | waits, wake-ups, the scheduler's clock |
| ``milestones`` | add/remove, user actions, review verdicts; next, graph, views, runs, plans |
| ``leases``, ``claims`` | a claim is a lease and its keeper; recording a gate run, the one path every attempt takes |
| ``run_here`` | ``done`` with a gate: the gate runs in this process, under a lease |
| ``takeover`` | taking over a dead driver's lease: whose lease is live, fencing its attempt, recording it |
| ``drive`` | :class:`DriveSession`: a drive's cached graph, holds and lease keeper |

Every state change is one write transaction that touches only the rows it
changes (see ``_tx``); reads that show the whole graph read it whole.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from milepost.errors import DoerRefusedError
from milepost.gates.doer_env import DOER_AGENT
from milepost.gates.outcome import GateResult
from milepost.graph.dag import WorkGraph
from milepost.graph.models import (
    GateCommand,
    ItemDefaults,
    Milestone,
    PlanArtifact,
    TodoItem,
    WorkItem,
    WorkRef,
    check_name,
)
from milepost.graph.status import Action, PlanStatus, ReadinessState
from milepost.results import (
    ActionResult,
    Claim,
    CompletionResult,
    DoneResult,
    DoRun,
    DryRun,
    GateRun,
    ItemSummary,
    MilestoneView,
    NextResult,
    VerifyResult,
)
from milepost.service import evidence, items, lists, milestones, waits
from milepost.service._tx import Context, GraphCache
from milepost.settings import load_settings
from milepost.store import Store
from milepost.workspace import resolve_workspace

if TYPE_CHECKING:
    from milepost.graph.plan import Plan
    from milepost.graph.revise import PlanRevision
    from milepost.service.claims import interrupted_result
    from milepost.service.drive import DriveSession
    from milepost.service.proofs import Check

__all__ = ["DEFAULT_AGENT", "DriveSession", "Service", "interrupted_result"]


def __getattr__(name: str) -> Any:
    # The gate path (claims, the drive session) loads when a command runs a
    # gate or a drive: `next`, `list` and the other state commands never do.
    if name == "interrupted_result":
        from milepost.service.claims import interrupted_result

        return interrupted_result
    if name == "DriveSession":
        from milepost.service.drive import DriveSession

        return DriveSession
    raise AttributeError(f"module 'milepost.service' has no attribute {name!r}")


DEFAULT_AGENT = "default"


class Service:
    """milepost's operations on one store, acting as one agent."""

    LIST_FILTERS = lists.LIST_FILTERS

    def __init__(
        self,
        store: Store,
        agent: str = DEFAULT_AGENT,
        *,
        operator: bool = False,
        lease_ttl: float | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        agent = check_name(agent, "agent") if agent != DEFAULT_AGENT else agent
        if operator and agent == DOER_AGENT:
            raise DoerRefusedError("cannot act as an operator: this command runs as a doer (agent 'doer')")
        # How long a gate's claim stays valid without renewal (renewed every quarter of it).
        ttl = timedelta(seconds=load_settings().lease_ttl if lease_ttl is None else lease_ttl)
        self.ctx = Context(store=store, agent=agent, operator=operator, lease_ttl=ttl)
        if clock is not None:  # the time leases are taken and expire by (default: the real time, UTC)
            self.ctx.clock = clock

    @classmethod
    def open(
        cls,
        db: str | None = None,
        agent: str | None = None,
        cwd: Path | None = None,
        *,
        operator: bool = False,
        create: bool = False,
    ) -> Service:
        """The store the settings name: ``db`` or ``MILEPOST_DB``, else the
        SQLite file of the nearest ``.milepost/``; acting as ``agent`` or
        ``MILEPOST_AGENT``. ``create`` makes a new store (``milepost init``)."""
        settings = load_settings()
        ws = resolve_workspace(db or settings.db, cwd)
        store = Store.open(ws.url, ws.home, ws.root, create=create)
        try:
            return cls(store, agent or settings.agent or DEFAULT_AGENT, operator=operator, lease_ttl=settings.lease_ttl)
        except BaseException:
            store.close()
            raise

    def close(self) -> None:
        self.store.close()

    @property
    def store(self) -> Store:
        return self.ctx.store

    @property
    def agent(self) -> str:
        return self.ctx.agent

    @property
    def operator(self) -> bool:
        return self.ctx.operator

    @operator.setter
    def operator(self, operator: bool) -> None:
        self.ctx.operator = operator

    @property
    def lease_ttl(self) -> timedelta:
        return self.ctx.lease_ttl

    @property
    def keep_cache(self) -> bool:
        """A long-lived service (the MCP server) keeps each item's graph
        between calls, valid while the item's revision holds."""
        return self.ctx.cache is not None

    @keep_cache.setter
    def keep_cache(self, keep: bool) -> None:
        self.ctx.cache = GraphCache() if keep else None

    # -- work items --------------------------------------------------------------

    def resolve_item(self, item: int | None) -> int:
        """``item``, or this agent's current item; raises when there is none."""
        return items.resolve(self.ctx, item)

    def create_item(
        self,
        objective: str,
        *,
        plan_status: PlanStatus = PlanStatus.DRAFT,
        defaults: ItemDefaults | None = None,
        milestones: list[Milestone] | None = None,
        after: int | None = None,
    ) -> WorkItem:
        return items.create_item(
            self.ctx, objective, plan_status=plan_status, defaults=defaults, milestones=milestones, after=after
        )

    def get_item(self, item: int | None = None) -> WorkItem:
        return items.get_item(self.ctx, item)

    def list_items(self, filter: str = "all", limit: int | None = None) -> list[ItemSummary]:
        return lists.list_items(self.ctx, filter, limit)

    def current_items(self) -> list[int]:
        return lists.current_items(self.ctx)

    def drivable_items(self) -> list[int]:
        """What a scheduler tick drives: open items with a ready milestone,
        every agent's current item first, then the queued ones, oldest first."""
        ready = [i for i in self.list_items("open") if i.readiness_state is ReadinessState.MILESTONE_READY]
        current = set(self.current_items())
        return [i.id for i in sorted(ready, key=lambda i: (i.id not in current, i.id))]

    def check_can_drive(self, item: int, expect_revision: int | None = None, *, until: str | None = None) -> str:
        return items.check_can_drive(self.ctx, item, expect_revision, until=until)

    def pick(
        self, item: int, *, clear_blocker: bool = False, reason: str | None = None, expect_revision: int | None = None
    ) -> WorkItem:
        return items.pick(self.ctx, item, clear_blocker=clear_blocker, reason=reason, expect_revision=expect_revision)

    def update_item(
        self,
        item: int | None = None,
        *,
        objective: str | None = None,
        plan_status: PlanStatus | None = None,
        todo: list[TodoItem] | None = None,
        blocked_by: str | None = None,
        clear_blocked_by: bool = False,
        recheck_at: datetime | None = None,
        expect_revision: int | None = None,
    ) -> WorkItem:
        """Change a work item; ``todo`` replaces the whole todo list."""
        return items.update_item(
            self.ctx,
            item,
            objective=objective,
            plan_status=plan_status,
            todo=todo,
            blocked_by=blocked_by,
            clear_blocked_by=clear_blocked_by,
            recheck_at=recheck_at,
            expect_revision=expect_revision,
        )

    def complete(self, report: str, *, item: int | None = None, expect_revision: int | None = None) -> CompletionResult:
        self._gate_decides("complete the work item")
        return items.complete(self.ctx, report, item=item, expect_revision=expect_revision)

    def cancel(self, reason: str, *, item: int | None = None, expect_revision: int | None = None) -> WorkItem:
        self._gate_decides("cancel the work item")
        return items.cancel(self.ctx, reason, item=item, expect_revision=expect_revision)

    def add_ref(
        self, kind: str, ref: str, reason: str = "", *, item: int | None = None, expect_revision: int | None = None
    ) -> WorkRef:
        return evidence.add_ref(self.ctx, kind, ref, reason, item=item, expect_revision=expect_revision)

    def refs(self, item: int | None = None) -> list[WorkRef]:
        return evidence.refs(self.ctx, item)

    def events(self, item: int | None = None) -> list[dict[str, Any]]:
        return lists.events(self.ctx, item)

    def plan_path(self, item_id: int) -> Path:
        return evidence.plan_path(self.ctx, item_id)

    def scaffold_base(self, item_id: int) -> dict[str, Any] | None:
        return evidence.scaffold_base(self.ctx, item_id)

    def keep_scaffold(self, item_id: int, plan: dict[str, Any]) -> None:
        evidence.keep_scaffold(self.ctx, item_id, plan)

    def plan_artifact(self, item_id: int, preview_bytes: int = 1024) -> PlanArtifact:
        return evidence.plan_artifact(self.ctx, item_id, preview_bytes)

    # -- waits ----------------------------------------------------------------------

    def wait_item(
        self,
        kind: str,
        reason: str,
        *,
        resource: str | None = None,
        until: datetime | None = None,
        item: int | None = None,
        expect_revision: int | None = None,
    ) -> WorkItem:
        """Record the item's active wait, replacing an earlier one, and the blocker it establishes."""
        return waits.wait_item(
            self.ctx, kind, reason, resource=resource, until=until, item=item, expect_revision=expect_revision
        )

    def wake(self, resource: str) -> list[int]:
        return waits.wake(self.ctx, resource)

    def expire(self, now: datetime | None = None) -> list[str]:
        return waits.expire(self.ctx, now)

    # -- plans ----------------------------------------------------------------------

    def apply_plan(self, plan: Plan) -> WorkItem:
        return milestones.apply_plan(self.ctx, plan)

    def export_plan(self, item: int | None = None) -> dict[str, Any]:
        return milestones.export_plan(self.ctx, item)

    def export_plan_at(self, item: int | None = None) -> tuple[dict[str, Any], int]:
        """:meth:`export_plan` and the revision it was read at."""
        return milestones.export_plan_at(self.ctx, item)

    def revise_item(
        self, plan: Plan, *, item: int | None = None, expect_revision: int | None = None, dry_run: bool = False
    ) -> PlanRevision:
        """``plan apply FILE --item N``: refine an item in place (see :mod:`.revise`)."""
        from milepost.service import revise

        return revise.revise_item(self.ctx, plan, item=item, expect_revision=expect_revision, dry_run=dry_run)

    def revise_text(
        self,
        text: str,
        source: str = "<plan>",
        *,
        item: int | None = None,
        expect_revision: int | None = None,
        dry_run: bool = False,
    ) -> PlanRevision:
        """:meth:`revise_item` with the plan as text: a plan refused on its own
        is refused with what it would do to running attempts in the same error."""
        from milepost.service import revise

        return revise.revise_text(self.ctx, text, source, item=item, expect_revision=expect_revision, dry_run=dry_run)

    def edit_milestone(
        self,
        name: str,
        changes: dict[str, Any],
        *,
        item: int | None = None,
        expect_revision: int | None = None,
        dry_run: bool = False,
    ) -> PlanRevision:
        """``edit NAME``: one milestone's definition changed, as a plan revision."""
        from milepost.service import revise

        return revise.edit_milestone(
            self.ctx, name, changes, item=item, expect_revision=expect_revision, dry_run=dry_run
        )

    def plan_order(self, item: int | None = None, until: str | None = None) -> DryRun:
        return milestones.plan_order(self.ctx, item, until)

    # -- milestones -----------------------------------------------------------------

    def add_milestone(
        self,
        name: str,
        deps: list[str] | None = None,
        *,
        gate: str | list[GateCommand] | None = None,
        acceptance: str = "",
        retries: int | None = None,
        timeout: float | None = None,
        review: bool = False,
        fix: str | None = None,
        retry_delay: float | None = None,
        hypothesis: bool = False,
        inputs: list[str] | None = None,
        cache: bool = True,
        flaky: bool = False,
        do: str | None = None,
        do_timeout: float | None = None,
        do_budget_usd: float | None = None,
        do_usage: str | None = None,
        item: int | None = None,
        expect_revision: int | None = None,
    ) -> ActionResult:
        """Add a milestone (at any plan status); unset fields take the item's defaults
        (see :func:`milepost.service.milestones.add_milestone`); ``do``: its doer (docs/doers.md)."""
        return milestones.add_milestone(
            self.ctx,
            name,
            deps,
            gate=gate,
            acceptance=acceptance,
            retries=retries,
            timeout=timeout,
            review=review,
            fix=fix,
            retry_delay=retry_delay,
            hypothesis=hypothesis,
            inputs=inputs,
            cache=cache,
            flaky=flaky,
            do=(do, do_timeout, do_budget_usd, do_usage),
            item=item,
            expect_revision=expect_revision,
        )

    def remove_milestone(
        self, name: str, *, item: int | None = None, expect_revision: int | None = None
    ) -> ActionResult:
        return milestones.remove_milestone(self.ctx, name, item=item, expect_revision=expect_revision)

    def _gate_decides(self, what: str) -> None:
        """A doer (agent ``doer``: docs/doers.md) never decides a milestone: refused."""
        if self.ctx.agent == DOER_AGENT:
            raise DoerRefusedError(
                f"cannot {what}: this command runs as a doer (agent 'doer'); only the gate the drive runs decides"
                " a milestone (read commands such as list, show and log are open to doers)"
            )

    def act(
        self,
        name: str,
        action: Action,
        *,
        reason: str | None = None,
        item: int | None = None,
        expect_revision: int | None = None,
    ) -> ActionResult:
        self._gate_decides(f"{action.command} {name!r}")
        return milestones.act(self.ctx, name, action, reason=reason, item=item, expect_revision=expect_revision)

    def start(self, name: str, *, item: int | None = None, expect_revision: int | None = None) -> ActionResult:
        return self.act(name, Action.START, item=item, expect_revision=expect_revision)

    def review(
        self,
        name: str,
        approve: bool,
        *,
        reason: str | None = None,
        item: int | None = None,
        expect_revision: int | None = None,
    ) -> ActionResult:
        self._gate_decides(f"{'approve' if approve else 'reject'} {name!r}")
        return milestones.review(self.ctx, name, approve, reason=reason, item=item, expect_revision=expect_revision)

    def done(
        self,
        name: str,
        *,
        verdict: str | None = None,
        item: int | None = None,
        expect_revision: int | None = None,
        use_cache: bool = True,
    ) -> DoneResult:
        self._gate_decides(f"mark {name!r} done")
        from milepost.service import run_here

        return run_here.done(
            self.ctx, name, verdict=verdict, item=item, expect_revision=expect_revision, use_cache=use_cache
        )

    def verify(
        self,
        names: list[str] | None = None,
        *,
        all_: bool = False,
        item: int | None = None,
        fresh: bool = False,
        max_parallel: int = 1,
    ) -> VerifyResult:
        """Prove again what was proven, here, up to ``max_parallel`` gates at
        once; a state that passed before is ``cached`` unless ``fresh`` (see
        :mod:`milepost.service.verify`)."""
        self._gate_decides("verify milestones")
        from milepost.service import verify

        return verify.verify(self.ctx, names or [], all_=all_, item=item, fresh=fresh, max_parallel=max_parallel)

    def check_proofs(self, item: int, graph: WorkGraph) -> Check:
        """Which done milestones are stale and which failed ones wait for a
        change of their inputs (marks the graph's stale ones)."""
        from milepost.service import proofs

        return proofs.check(self.ctx, item, graph)

    # -- reading ----------------------------------------------------------------------

    def next(self, item: int | None = None) -> NextResult:
        return milestones.next_milestone(self.ctx, item)

    def graph(self, item: int | None = None, *, proofs: bool = True) -> tuple[WorkItem, WorkGraph]:
        """The item and its whole graph; with ``proofs`` the stale milestones
        are marked (their inputs are read: see :meth:`check_proofs`)."""
        return items.read(self.ctx, items.resolve(self.ctx, item), proofs=proofs)

    def milestone_views(self, item: int | None = None) -> tuple[WorkItem, list[MilestoneView]]:
        return milestones.milestone_views(self.ctx, item)

    def gate_time(self, item: int) -> dict[str, tuple[float, int]]:
        """Per milestone: seconds of all its gate runs, and its last attempt's number."""
        from milepost.service import durations

        return durations.gate_time(self.ctx, item)

    def last_durations(self, item: int | None = None) -> dict[str, float]:
        """Seconds of each milestone's last gate run that passed or failed."""
        from milepost.service.durations import last_durations

        return last_durations(self.ctx, item)

    def input_files(self, name: str, item: int | None = None) -> dict[str, Any]:
        """The files a milestone's inputs stand for now (``module:`` entries read as the code is)."""
        return milestones.input_files(self.ctx, name, item)

    def do_runs(self, name: str, item: int | None = None) -> list[DoRun]:
        """What the milestone's doers did, attempt by attempt (docs/doers.md)."""
        from milepost.service import do_evidence as doers

        return doers.do_runs(self.ctx, name, item)

    def do_run(self, name: str, attempt: int | None = None, item: int | None = None) -> DoRun:
        """The do run of one attempt (the last by default); :class:`NotFoundError` when it ran no doer."""
        from milepost.service import do_evidence as doers

        return doers.do_run(self.ctx, name, attempt, item)

    def runs(self, name: str, item: int | None = None) -> list[GateRun]:
        return milestones.runs(self.ctx, name, item)

    def run(self, name: str, attempt: int | None = None, item: int | None = None) -> GateRun:
        return milestones.run(self.ctx, name, attempt, item)

    # -- gates, claims and drives -----------------------------------------------------

    def drive_session(
        self, item: int, owner: str, *, use_cache: bool = True, scope: set[str] | None = None
    ) -> DriveSession:
        """What a drive loop of ``item`` keeps while it runs (see :class:`DriveSession`)."""
        from milepost.service.drive import DriveSession

        return DriveSession(self.ctx, item, owner, use_cache=use_cache, scope=scope)

    def log_path(self, item_id: int, name: str, attempt: int) -> Path:
        """Where the log of attempt ``attempt`` of ``name`` is (see :mod:`milepost.gates.attempt`)."""
        from milepost.gates.attempt import AttemptFiles

        return AttemptFiles.of(self.ctx.store.evidence_dir("logs"), item_id, name, attempt).log

    def gate_env(self, claim: Claim) -> dict[str, str]:
        from milepost.service import claims

        return claims.gate_env(self.ctx, claim)

    def record(
        self, claim: Claim, result: GateResult, *, verdict: str | None = None, release: bool = False
    ) -> DoneResult:
        """Store a gate run and apply its outcome (see :func:`milepost.service.claims.record`)."""
        from milepost.service import claims

        return claims.record(self.ctx, claim, result, verdict=verdict, release=release)

    def record_fix(self, claim: Claim, result: GateResult) -> None:
        from milepost.service import claims

        claims.record_fix(self.ctx, claim, result)

    def reclaim_expired(self, item: int, owner: str) -> list[DoneResult]:
        """Take over the leases of ``item`` dead drivers left (see :mod:`milepost.service.takeover`)."""
        from milepost.service import takeover

        return takeover.reclaim_expired(self.ctx, item, owner)
