"""The whole plan in the flow-run graph: every milestone a task run.

A drive runs only some gates, but a person who opens the Prefect UI should see
the whole milestone DAG: what was done before, what is stuck, and what that
blocks. So the drive adds a *plan node* (a task run named after the
milestone, created through the API in its final state, nothing executed) for
every milestone it does not run, with the DAG's edges as the task run's
``wait_for`` inputs:

==================  ==========  =========================================
milepost status     Prefect     state name
==================  ==========  =========================================
done before         COMPLETED   Done earlier (message: the attempt)
done meanwhile      COMPLETED   Done elsewhere (another driver ran it while this drive waited)
stuck               FAILED      Stuck (message: the last reason)
blocked             CANCELLED   Blocked (message: what it waits on)
locked              CANCELLED   Locked
hypothesis          CANCELLED   Hypothesis
in review           CANCELLED   Awaiting review
in progress         CANCELLED   Running elsewhere (another driver has it)
ready, needs_fix    CANCELLED   Not run (outside ``--until``, or waiting for a change)
stale               CANCELLED   Stale (inputs changed; not re-proven in this drive)
==================  ==========  =========================================

Every node is created running and then set to its final state, so it has a
start and an end: no bar stretches to "now". Those times are chosen (see
:func:`node_times`) so that the UI, which places task runs by start time,
draws the nodes left to right in the DAG's order, a column per level, instead
of a pile where they were created. The done-before nodes are made
when the drive starts, so the gates that depend on them draw their edges;
the rest when it ends, after every gate, pointing at whatever ran. (Submitted
as tasks with ``wait_for`` instead, a node behind a cancelled one would be
left ``NotReady`` for ever: ``allow_failure`` lets failed upstreams through,
not cancelled ones.)
"""

from __future__ import annotations

from collections.abc import Set
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State, TaskRun, TaskRunResult
from prefect.states import Cancelled, Completed, Failed, Running
from prefect.utilities.engine import emit_task_run_state_change_event

from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.models import Milestone
from milepost.graph.status import DisplayStatus

__all__ = ["STATES", "create_nodes", "node_state", "node_times", "plan_node", "ran_node"]

# What each milepost view becomes: (Prefect state type, its name).
STATES: dict[str, tuple[str, str]] = {
    "done": ("completed", "Done earlier"),
    "stuck": ("failed", "Stuck"),
    "blocked": ("cancelled", "Blocked"),
    "locked": ("cancelled", "Locked"),
    "hypothesis": ("cancelled", "Hypothesis"),
    "in_review": ("cancelled", "Awaiting review"),
    "in_progress": ("cancelled", "Running elsewhere"),
    "ready": ("cancelled", "Not run"),
    "needs_fix": ("cancelled", "Not run"),
    "stale": ("cancelled", "Stale"),
}
DONE_EARLIER = "Done earlier"


def node_state(g: WorkGraph, m: Milestone, elsewhere: Set[str] = frozenset()) -> tuple[str, str, str]:
    """(state type, state name, message) of a milestone's plan node;
    ``elsewhere``: the milestones another driver proved during this drive."""
    view = display_status(g, m)
    kind, name = STATES.get(view, ("cancelled", view.replace("_", " ").capitalize()))
    if view is DisplayStatus.DONE and m.name in elsewhere:
        name, message = "Done elsewhere", "done by another driver during this drive"
    elif view is DisplayStatus.DONE:
        message = (
            f"done before this drive (budget {m.attempts} of {m.max_attempts} used)" if m.gate else "done (no gate)"
        )
    elif view is DisplayStatus.BLOCKED:
        waiting = ", ".join(f"{d.name} ({display_status(g, d)})" for d in g.undone_deps(m.name))
        message = f"waiting on {waiting}" if waiting else "blocked"
    elif view is DisplayStatus.STUCK:
        message = f"stuck: {m.reason or 'retry budget spent'} (reset with --reason)"
    else:
        message = m.reason or view.replace("_", " ")
    return kind, name, message


def _never_run() -> None:
    """A plan node's task: its runs are created in their final state, never executed."""


# The task the plan nodes' task runs belong to (its key groups them in the UI).
plan_node = task(name="milestone", cache_policy=NO_CACHE, persist_result=False)(_never_run)

_FINAL = {"completed": Completed, "failed": Failed, "cancelled": Cancelled}


def create_nodes(
    g: WorkGraph,
    flow_run_id: str,
    item: int,
    known: dict[str, UUID],
    *,
    only_done: bool,
    skip: set[str] | None = None,
    elsewhere: Set[str] = frozenset(),
) -> dict[str, State[Any]]:
    """Create a plan node for every milestone not in ``known`` (name -> task
    run id of what ran) nor in ``skip``, deps first; with ``only_done`` just the done ones.
    Returns, per node, a completed-looking local state that a gate task can
    ``wait_for`` (it carries the node's task run id, so the edge is drawn).

    Each node is one task-run event, as Prefect's own task engine records its
    task runs (the server's recorder makes the task run from it): sent in the
    background, with the start and end :func:`node_times` chose (the REST
    API would stamp them with the moment of the call). One API call per
    drive reads the flow run's start."""
    ids = dict(known)
    todo = [
        m
        for layer in g.layers()
        for m in layer
        if m.name not in ids
        and not (skip and m.name in skip)
        and (not only_done or node_state(g, m)[1] == DONE_EARLIER)
    ]
    if not todo:
        return {}
    with get_client(sync_client=True) as client:
        began = client.read_flow_run(UUID(flow_run_id)).start_time
    times = node_times(todo, began, only_done=only_done)
    out: dict[str, State[Any]] = {}
    for m in todo:
        kind, name, message = node_state(g, m, elsewhere)
        start, end = times[m.name]
        final: State[Any] = _FINAL[kind](name=name, message=message, timestamp=end)
        run = TaskRun(
            id=uuid4(),
            name=m.name,
            flow_run_id=UUID(flow_run_id),
            task_key=plan_node.task_key,
            dynamic_key=f"plan-{m.name}",
            tags=[f"milepost-item:{item}", "milepost-plan-node"],
            task_inputs={"wait_for": [TaskRunResult(id=ids[d]) for d in m.deps if d in ids]},
            expected_start_time=start,
            start_time=start,
            end_time=end,
            total_run_time=end - start,
            run_count=1,
        )
        emit_task_run_state_change_event(run, Running(timestamp=start), final)
        ids[m.name] = run.id
        # In memory, with data, so that a task waiting on it resolves it.
        local: State[Any] = Completed(data=message)
        local.state_details.task_run_id = run.id
        out[m.name] = local
    return out


def ran_node(
    name: str,
    flow_run_id: str,
    task_key: str,
    deps: list[UUID],
    final: State[Any],
    started: datetime,
    finished: datetime,
    key: str | None = None,
) -> tuple[TaskRun, State[Any]]:
    """The task run of a gate that ran and was recorded before the flow run
    began (flows/early.py), or whose cached result stood in, made as a plan
    node is: one event, in its final state, with the gate's own start and
    end, its deps' runs as its ``wait_for``. Named and keyed as the gate
    task's runs are (``task_key``; ``key``, unique in the flow run: its
    dynamic key's end, default the name). Returns it and a local state a
    dependent task can ``wait_for``. (Run through the task engine instead,
    each cost about as much as running a `true` gate: docs/benchmarks.md.)"""
    run = TaskRun(
        id=uuid4(),
        name=name,
        flow_run_id=UUID(flow_run_id),
        task_key=task_key,
        dynamic_key=f"first-{key or name}",  # (the engine's keys are numbers: never the same)
        task_inputs={"wait_for": [TaskRunResult(id=d) for d in deps]},
        expected_start_time=started,
        start_time=started,
        end_time=finished,
        total_run_time=finished - started,
        run_count=1,
    )
    final = final.model_copy(update={"timestamp": finished})
    emit_task_run_state_change_event(run, Running(timestamp=started), final)
    local: State[Any] = Completed(data=final.message)
    local.state_details.task_run_id = run.id
    return run, local


# Where plan nodes sit on the time axis of the flow-run graph. The Prefect UI
# places a task run by its start time (x) and next to its nearest parent (row),
# moving it to another row when its bar and label would touch a neighbour's;
# it scales the flow run's whole time to its width. Created one after the
# other, all of a drive's last plan nodes started "now": a pile at the right
# edge, labels on labels. Instead each node starts one step after the nodes it
# depends on, a column per level of the DAG; a step is a share of the flow
# run's time so far (wide enough for a label whatever the run's length), and
# all the steps together at most 30% of it (the UI shows a little past the
# run's end).
STEP_SHARE = 0.08
TAIL_SHARE = 0.3
MIN_STEP = timedelta(milliseconds=20)


def node_times(
    nodes: list[Milestone], began: datetime | None, *, only_done: bool, now: datetime | None = None
) -> dict[str, tuple[datetime, datetime]]:
    """(start, end) of each plan node, ``nodes`` in dependency order. The
    ones done before the drive share out the time between the flow run's
    start and now (before any gate runs); the others come after now (after
    every gate), one step per level."""
    now = now or datetime.now(UTC)
    began = min(began or now, now)
    level: dict[str, int] = {}
    for m in nodes:
        level[m.name] = 1 + max((level[d] for d in m.deps if d in level), default=0)
    levels = max(level.values(), default=1)
    if only_done:
        step = (now - began) / (levels + 1)
        origin = began + step / 2
    else:
        step = max((now - began) * min(STEP_SHARE, TAIL_SHARE / levels), MIN_STEP)
        origin = now
    return {n: (origin + (k - 1) * step, origin + (k - 1) * step + step / 3) for n, k in level.items()}
