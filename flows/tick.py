"""The scheduler tick: expire timers and due rechecks, then drive the
runnable work items — each agent's current item first, then the queued ones,
oldest first — through ``drive_workgraph``.

``milepost tick`` runs one tick; ``milepost serve --interval S`` serves the
tick flow with Prefect (``flow.serve``) so it runs every S seconds.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

from milepost.flows.events import MultiReporter, Reporter
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
        summary = run_drive(svc, item, reporter=reporter or MultiReporter())
        result.driven.append({"item": item, "ok": summary.ok, "message": summary.message})
    return result


def tick_body() -> dict[str, Any]:
    # Served by Prefect: the store comes from the environment (MILEPOST_DB or
    # the .milepost/ above the working directory), acting for every agent.
    svc = Service.open(operator=True)
    try:
        return run_tick(svc).model_dump()
    finally:
        svc.close()


# Decorated apart from its body, like drive_workgraph (see there).
tick_flow = flow(name="milepost-tick", log_prints=False)(tick_body)
