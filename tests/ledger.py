"""A gate that keeps a ledger: every execution writes a start line, holds an
exclusive lock on its milestone for as long as any of its processes lives,
and writes an end line when it passes. A second execution that starts while
an earlier one of the same milestone still lives finds the lock taken and
writes an ``overlap`` line. Used by the fencing and crash tests."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

SCRIPT = """#!/bin/sh
# gate.sh LEDGER SECONDS: one execution of the gate of $MILEPOST_MILESTONE
ledger=$1
name=$MILEPOST_MILESTONE
exec 9>"$ledger.$name.lock"
flock -n 9 || echo "overlap $name $MILEPOST_ATTEMPT $$" >> "$ledger"
echo "start $name $MILEPOST_ATTEMPT $$" >> "$ledger"
sleep "$2"
echo "end $name $MILEPOST_ATTEMPT $$" >> "$ledger"
"""


def write_gate(folder: Path) -> Path:
    path = folder / "gate.sh"
    path.write_text(SCRIPT)
    path.chmod(0o755)
    return path


@dataclass
class Ledger:
    path: Path

    def lines(self) -> list[tuple[str, str, int]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            kind, name, attempt, _pid = line.split()
            out.append((kind, name, int(attempt)))
        return out

    def count(self, kind: str) -> Counter[str]:
        return Counter(name for k, name, _ in self.lines() if k == kind)

    def executions(self) -> list[tuple[str, int]]:
        """(milestone, attempt) of every execution that started."""
        return [(name, attempt) for kind, name, attempt in self.lines() if kind == "start"]

    def overlaps(self) -> list[tuple[str, int]]:
        return [(name, attempt) for kind, name, attempt in self.lines() if kind == "overlap"]

    def has(self, kind: str, name: str) -> bool:
        return any(k == kind and n == name for k, n, _ in self.lines())


def gate_command(gate: Path, ledger: Path, seconds: float) -> str:
    return f"{gate} {ledger} {seconds:g}"
