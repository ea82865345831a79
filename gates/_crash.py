"""Crash points: a testing aid that kills this process with SIGKILL (no
clean-up, exactly like an out-of-memory kill) at a named moment, so the crash
tests can prove that no moment of a driver's death loses or repeats work.

Off unless ``MILEPOST_CRASH_AT`` is set, to ``NAME`` or ``NAME:N`` (die the
N-th time this process reaches NAME). The points: ``claim`` (inside the
claim's transaction, before it commits), ``claimed`` (after a claim
committed, before its gate starts), ``gate`` (its gate just started),
``record`` (inside the transaction recording an attempt, before it commits),
``reclaim`` (a dead driver's lease taken over, its attempt not yet fenced).
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point"]

_SPEC = os.environ.get("MILEPOST_CRASH_AT", "").strip()
_TARGET, _, _NTH = _SPEC.partition(":")
_SEEN: dict[str, int] = {}


def crash_point(name: str) -> None:
    if not _SPEC or name != _TARGET:
        return
    _SEEN[name] = _SEEN.get(name, 0) + 1
    if _SEEN[name] == int(_NTH or 1):
        os.kill(os.getpid(), signal.SIGKILL)
