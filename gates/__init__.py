"""Gate runners: command gates (subprocess, timeout, output to a log file,
bounded evidence tail). No Prefect here; the flows wrap these in tasks.
Names load on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from milepost.gates.command import TAIL_BYTES, CommandResult, GateResult, Outcome, read_tail, run_gate

__all__ = ["TAIL_BYTES", "CommandResult", "GateResult", "Outcome", "read_tail", "run_gate"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'milepost.gates' has no attribute {name!r}")
    from milepost.gates import command

    value = getattr(command, name)
    globals()[name] = value
    return value
