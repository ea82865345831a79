"""Gate runners: command gates (subprocess, timeout, output to a log file,
bounded evidence tail). No Prefect here; the flows wrap these in tasks."""

from milepost.gates.command import TAIL_BYTES, CommandResult, GateResult, Outcome, read_tail, run_gate

__all__ = ["TAIL_BYTES", "CommandResult", "GateResult", "Outcome", "read_tail", "run_gate"]
