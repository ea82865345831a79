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
start and an end: no bar stretches to "now". The done-before nodes are made
when the drive starts, so the gates that depend on them draw their edges;
the rest when it ends, after every gate, pointing at whatever ran. (Submitted
as tasks with ``wait_for`` instead, a node behind a cancelled one would be
left ``NotReady`` for ever: ``allow_failure`` lets failed upstreams through,
not cancelled ones.)
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State, TaskRunResult
from prefect.states import Cancelled, Completed, Failed, Running

from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.models import Milestone
from milepost.graph.status import DisplayStatus

__all__ = ["STATES", "create_nodes", "node_state", "plan_node"]

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


def node_state(g: WorkGraph, m: Milestone) -> tuple[str, str, str]:
    """(state type, state name, message) of a milestone's plan node."""
    view = display_status(g, m)
    kind, name = STATES.get(view, ("cancelled", view.replace("_", " ").capitalize()))
    if view is DisplayStatus.DONE:
        message = f"done before this drive (attempt {m.attempts} of {m.max_attempts})" if m.gate else "done (no gate)"
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
    g: WorkGraph, flow_run_id: str, item: int, known: dict[str, UUID], *, only_done: bool,
    skip: set[str] | None = None,
) -> dict[str, State[Any]]:  # fmt: skip
    """Create a plan node for every milestone not in ``known`` (name -> task
    run id of what ran) nor in ``skip``, deps first; with ``only_done`` just the done ones.
    Returns, per node, a completed-looking local state that a gate task can
    ``wait_for`` (it carries the node's task run id, so the edge is drawn)."""
    out: dict[str, State[Any]] = {}
    ids = dict(known)
    with get_client(sync_client=True) as client:
        for layer in g.layers():
            for m in layer:
                if m.name in ids or (skip and m.name in skip):
                    continue
                kind, name, message = node_state(g, m)
                if only_done and name != DONE_EARLIER:
                    continue
                inputs = [TaskRunResult(id=ids[d]) for d in m.deps if d in ids]
                run = client.create_task_run(
                    task=plan_node,
                    flow_run_id=UUID(flow_run_id),
                    dynamic_key=f"plan-{m.name}",
                    name=m.name,
                    extra_tags=[f"milepost-item:{item}", "milepost-plan-node"],
                    state=Running(),
                    task_inputs={"wait_for": inputs},  # type: ignore[dict-item]
                )
                client.set_task_run_state(run.id, _FINAL[kind](name=name, message=message), force=True)
                ids[m.name] = run.id
                # In memory, with data, so that a task waiting on it resolves it.
                local: State[Any] = Completed(data=message)
                local.state_details.task_run_id = run.id
                out[m.name] = local
    return out
