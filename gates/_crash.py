"""Crash points: a testing aid that kills this process with SIGKILL (no
clean-up, exactly like an out-of-memory kill) at a named moment, so the crash
tests can prove that no moment of a driver's death loses or repeats work.

Off unless ``MILEPOST_CRASH_AT`` is set, to ``NAME`` or ``NAME:N`` (die the
N-th time this process reaches NAME). The points: ``claim`` (inside the
claim's transaction, before it commits), ``claimed`` (after a claim
committed, before its gate starts), ``flow-claimed`` (the same, for a claim
the flow run's loop made itself, not one of the first gates started before
Prefect loaded), ``gate`` (its gate just started),
``record`` (inside the transaction recording an attempt, before it commits),
``reclaim`` (a dead driver's lease taken over, its attempt not yet fenced),
``merging`` (a doer attempt's gate passed, its merge not begun) and
``merged`` (its merge made, not yet recorded).

Two more ways to fail at a point, for the tests of a driver that stalls
rather than dies: ``MILEPOST_CRASH_SIGNAL=SIGSTOP`` freezes the whole
process there instead (until a SIGCONT), and ``MILEPOST_STALL_AT=NAME:FILE``
makes the thread that reaches NAME wait there, once, until FILE exists (at
most two minutes; the process's other threads, such as its lease keeper,
go on); it writes ``FILE.waiting`` when it starts to wait, for a test to
wait on.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["crash_point"]

_SPEC = os.environ.get("MILEPOST_CRASH_AT", "").strip()
_TARGET, _, _NTH = _SPEC.partition(":")
_SEEN: dict[str, int] = {}
_SIGNAL = getattr(signal, os.environ.get("MILEPOST_CRASH_SIGNAL", "SIGKILL").strip() or "SIGKILL", signal.SIGKILL)
_STALL, _, _UNTIL = os.environ.get("MILEPOST_STALL_AT", "").strip().partition(":")


def crash_point(name: str) -> None:
    if _STALL and name == _STALL:
        _SEEN[f"stall:{name}"] = _SEEN.get(f"stall:{name}", 0) + 1
        deadline = time.monotonic() + 120
        if _SEEN[f"stall:{name}"] == 1:
            with open(f"{_UNTIL}.waiting", "w"):
                pass
        while _SEEN[f"stall:{name}"] == 1 and not os.path.exists(_UNTIL) and time.monotonic() < deadline:
            time.sleep(0.05)
    if not _SPEC or name != _TARGET:
        return
    _SEEN[name] = _SEEN.get(name, 0) + 1
    if _SEEN[name] == int(_NTH or 1):
        os.kill(os.getpid(), _SIGNAL)
