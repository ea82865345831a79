"""The scheduler tick: expire timers and due rechecks, then drive the
runnable work items — each agent's current item first, then the queued ones,
oldest first — through ``drive_workgraph``.

``milepost tick`` runs one tick; ``milepost serve --interval S`` serves the
tick flow with Prefect (``flow.serve``) so it runs every S seconds.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

from milepost.events import NullReporter, Reporter
from milepost.service import Service

__all__ = ["TickResult", "run_tick", "tick_flow"]


class TickResult(BaseModel):
    expired: list[str] = Field(default_factory=list)
    driven: list[dict[str, Any]] = Field(default_factory=list)


def run_tick(svc: Service, reporter: Reporter | None = None) -> TickResult:
    """One tick, inside or outside a flow run (drives are flow runs of their own)."""
    from milepost.flows.drive import run_drive

    result = TickResult(expired=svc.expire())
    for item in svc.drivable_items():
        # A tick does not wait for other drivers on the item: it goes on with the next item (the next tick looks again).
        summary = run_drive(svc, item, reporter=reporter or NullReporter(), wait_for_others=False)
        result.driven.append({"item": item, "ok": summary.ok, "message": summary.message})
    return result


def tick_body() -> dict[str, Any]:
    # Served by Prefect: the store comes from the environment (MILEPOST_DB or
    # the .milepost/ above the working directory), acting for every agent. Its
    # drives' lines and one line an item go to stdout: `milepost serve`'s
    # terminal (a served flow run's process inherits it), a worker's log.
    from milepost.events import LineReporter

    svc = Service.open(operator=True)
    try:
        result = run_tick(svc, LineReporter())
    finally:
        svc.close()
    for d in result.driven:
        print(f"tick: work item {d['item']}: {'ok' if d['ok'] else 'not done'}: {d['message']}", flush=True)
    return result.model_dump()


# Decorated apart from its body, like drive_workgraph (see there).
tick_flow = flow(name="milepost-tick", log_prints=False)(tick_body)


def deploy_tick(pool: str, name: str, interval: float | None, job_env: dict[str, str], working_dir: str) -> str:
    """Register the tick flow as a deployment on a work pool (a process pool
    is created when missing), so Prefect workers anywhere run ticks against
    the shared database. The flow is found by module path: workers need
    milepost installed, nothing else. Returns the deployment id."""
    from datetime import timedelta

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.deployments.runner import RunnerDeployment, deploy
    from prefect.exceptions import ObjectNotFound
    from prefect.types.entrypoint import EntrypointType

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    deployment = tick_flow.to_deployment(  # sync here: Prefect's async_dispatch returns the value
        name=name,
        interval=timedelta(seconds=interval) if interval else None,
        entrypoint_type=EntrypointType.MODULE_PATH,
        job_variables={"env": job_env, "working_dir": working_dir},
    )
    assert isinstance(deployment, RunnerDeployment)
    # deploy() prints a table of its own; milepost's stdout carries only milepost's output.
    with contextlib.redirect_stdout(io.StringIO()):
        ids = deploy(deployment, work_pool_name=pool, build=False, push=False, print_next_steps_message=False)
    assert isinstance(ids, list)
    return str(ids[0])
