"""Prefect flows and tasks (the drive loop). Importing this package imports
Prefect; nothing else in milepost does."""

__all__: list[str] = []
