"""What needs Prefect: the drive loop as a flow (``drive_workgraph``), the
gate task, the plan nodes and artifacts, the scheduler tick, the guard of
Prefect's API calls and the workspace's Prefect server. The events a drive
reports and the reporters that need no Prefect live below, in
:mod:`milepost.events`. ``milepost.flows.server`` and
``milepost.flows.prefect_guard`` import Prefect only inside their functions
(Prefect's settings must be in the environment first); the rest imports it
at once, so import them only where a flow runs."""

__all__: list[str] = []
