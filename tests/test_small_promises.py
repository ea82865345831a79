"""Issue 32's small promises, second half: a gate's tail opens at a line's
start (and at a traceback's), counts agree in number, a lease holder reads
as a person would say it, bad names and patterns are refused."""

from __future__ import annotations

import sys
from pathlib import Path

from milepost.gates import TAIL_BYTES, run_gate
from milepost.graph import GateCommand


def _gate_tail(tmp_path: Path, script: str) -> tuple[str, str]:
    (tmp_path / "g.py").write_text(script)
    log = tmp_path / "logs" / "attempt-1.log"
    r = run_gate([GateCommand(run=f"{sys.executable} g.py")], log, default_cwd=tmp_path)
    assert not r.passed
    return r.tail, log.read_text()


def _opens_at_a_line_start(tail: str, log: str) -> None:
    at = log.rindex(tail)
    assert log[at - 1] == "\n", repr(log[at - 20 : at + 20])


def test_a_tail_opens_at_the_traceback_when_one_is_in_range(tmp_path: Path) -> None:
    tail, log = _gate_tail(
        tmp_path,
        "for i in range(200):\n    print('line', i, 'x' * 60)\n"
        "def f(n):\n    return f(n - 1) if n else 1 / 0\nf(5)\n",
    )
    assert len(log.encode()) > TAIL_BYTES
    assert tail.startswith("Traceback (most recent call last):\n"), tail[:80]
    assert tail.rstrip().endswith("ZeroDivisionError: division by zero")
    _opens_at_a_line_start(tail, log)


def test_a_tail_opens_at_a_line_start_with_long_lines(tmp_path: Path) -> None:
    # Lines of 700 characters: a cut used to look for a line's start in the first 200 only.
    tail, log = _gate_tail(tmp_path, "for i in range(40):\n    print(f'{i:03d}', 'y' * 696)\nraise SystemExit(3)\n")
    _opens_at_a_line_start(tail, log)
    assert all(len(line) == 700 for line in tail.splitlines())


def test_a_traceback_longer_than_the_tail_opens_at_a_line(tmp_path: Path) -> None:
    calls = "".join(f"def f{i}():\n    return f{i + 1}() + 1\n" for i in range(60))
    tail, log = _gate_tail(tmp_path, calls + "def f60():\n    return [][1]\nf0()\n")
    assert len(log.encode()) > TAIL_BYTES and "Traceback" not in tail  # its start is out of range
    _opens_at_a_line_start(tail, log)
    assert tail.rstrip().endswith("IndexError: list index out of range")
    assert len(tail.encode()) <= TAIL_BYTES


def test_a_short_output_is_whole(tmp_path: Path) -> None:
    tail, log = _gate_tail(tmp_path, "print('before')\nraise SystemExit('no')\n")
    assert tail == log[log.index("before") :] and tail.startswith("before\n")
