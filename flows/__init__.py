"""Prefect flows and tasks: the drive loop (``drive_workgraph``), its
artifacts, and the workspace's Prefect server. ``milepost.flows.events`` and
``milepost.flows.server`` import no Prefect; the rest does, so import them
only where a flow runs."""

__all__: list[str] = []
