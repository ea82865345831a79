"""Gate runners: command gates (subprocess, timeout, output to a log file,
bounded evidence tail). No Prefect here; the flows wrap these in tasks.
Names load on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from milepost.gates.attempt import TAIL_BYTES, read_tail
    from milepost.gates.command import run_gate
    from milepost.gates.outcome import CommandResult, GateResult, Outcome

__all__ = ["TAIL_BYTES", "CommandResult", "GateResult", "Outcome", "read_tail", "run_gate"]

_HOMES = {"TAIL_BYTES": "attempt", "read_tail": "attempt", "run_gate": "command"}  # the rest: outcome


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'milepost.gates' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"milepost.gates.{_HOMES.get(name, 'outcome')}"), name)
    globals()[name] = value
    return value
