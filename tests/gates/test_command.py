"""Command gates against real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from milepost.gates import TAIL_BYTES, Outcome, run_gate
from milepost.graph import GateCommand
from tests.conftest import wait_until


def gate(tmp_path: Path, *cmds: GateCommand, timeout: float | None = None, env: dict[str, str] | None = None):
    return run_gate(
        list(cmds), tmp_path / "logs" / "attempt-1.log", default_cwd=tmp_path, default_timeout=timeout, env=env
    )


def test_pass_records_exit_duration_and_tail(tmp_path: Path) -> None:
    r = gate(tmp_path, GateCommand(run="echo hello; echo world >&2"))
    assert r.passed and r.outcome is Outcome.PASSED
    assert r.exit_code == 0 and r.reason == "exit 0"
    assert "hello" in r.tail and "world" in r.tail  # stderr joins stdout
    assert r.duration >= 0 and r.finished_at >= r.started_at
    assert "hello" in Path(r.log_path or "").read_text()


def test_fail_reports_exit_code(tmp_path: Path) -> None:
    r = gate(tmp_path, GateCommand(run="echo broken; exit 3"))
    assert not r.passed and r.exit_code == 3 and r.reason == "exit 3"
    assert "broken" in r.tail


def test_missing_program(tmp_path: Path) -> None:
    r = gate(tmp_path, GateCommand(run="definitely-not-a-program-xyz --flag"))
    assert r.outcome is Outcome.FAILED and r.exit_code == 127
    assert r.reason == "command not found: definitely-not-a-program-xyz (exit 127)"


def test_killed_by_signal(tmp_path: Path) -> None:
    r = gate(tmp_path, GateCommand(run="kill -TERM $$"))
    assert r.outcome is Outcome.FAILED
    assert r.reason == "killed by signal SIGTERM"


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    t0 = time.monotonic()
    r = gate(tmp_path, GateCommand(run=f"sleep 60 & echo $! > {pidfile}; sleep 60"), timeout=1)
    assert time.monotonic() - t0 < 15
    assert r.outcome is Outcome.FAILED and r.reason == "timed out after 1 s"
    child = int(pidfile.read_text())

    def alive() -> bool:
        try:
            return "Z" not in Path(f"/proc/{child}/stat").read_text().split()[2]
        except OSError:
            return False

    # The background grandchild is gone too (or a zombie reaped by init): killed with the group, gone within seconds.
    wait_until(lambda: not alive(), 10, "the background grandchild gone")
    assert "timed out after 1 s" in Path(r.log_path or "").read_text()


def test_non_utf8_output_is_decoded_with_replacement(tmp_path: Path) -> None:
    r = gate(tmp_path, GateCommand(run=r"printf 'ok \377\376 bad\n'; exit 1"))
    assert "\ufffd" in r.tail and "bad" in r.tail


def test_tail_is_bounded(tmp_path: Path) -> None:
    r = gate(tmp_path, GateCommand(run="seq 1 100000"))
    assert len(r.tail.encode()) <= TAIL_BYTES
    assert r.tail.rstrip().endswith("100000")


def test_huge_output_does_not_grow_memory(tmp_path: Path) -> None:
    """100 MB of output goes to the log file, not through this process: the
    peak RSS of a process running the gate grows by far less than 100 MB."""
    script = textwrap.dedent(
        f"""
        import resource, sys
        from pathlib import Path
        from milepost.gates import run_gate
        from milepost.graph import GateCommand
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = run_gate([GateCommand(run="head -c 100000000 /dev/zero | tr '\\\\0' x; echo; echo END")],
                     Path({str(tmp_path / "big.log")!r}), default_cwd=Path({str(tmp_path)!r}))
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert r.passed, r.reason
        assert r.tail.rstrip().endswith("END"), r.tail[-50:]
        print((after - before) // 1024)
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    grown_mb = int(p.stdout.strip())
    assert grown_mb < 20, f"peak RSS grew by {grown_mb} MB"
    assert (tmp_path / "big.log").stat().st_size > 100_000_000


def test_named_commands_all_must_pass_and_each_is_reported(tmp_path: Path) -> None:
    r = gate(
        tmp_path,
        GateCommand(name="compile", run="true"),
        GateCommand(name="tests", run="echo 2 failed; exit 1"),
        GateCommand(name="lint", run="true"),
    )
    assert not r.passed
    assert r.reason == "tests: exit 1"
    assert [(c.name, c.outcome) for c in r.commands] == [
        ("compile", Outcome.PASSED),
        ("tests", Outcome.FAILED),
        ("lint", Outcome.SKIPPED),
    ]
    log = Path(r.log_path or "").read_text()
    assert "=== [compile] $ true" in log and "=== [tests]" in log and "=== [lint]" not in log


def test_all_pass(tmp_path: Path) -> None:
    r = gate(tmp_path, GateCommand(name="a", run="true"), GateCommand(name="b", run="true"))
    assert r.passed and r.reason == "all 2 commands passed"


def test_cwd_and_env(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    r = gate(
        tmp_path,
        GateCommand(
            run='test "$(basename "$PWD")" = sub && test "$FOO" = bar && test "$CTX" = 1', cwd="sub", env={"FOO": "bar"}
        ),
        env={"CTX": "1"},
    )
    assert r.passed, r.tail


def test_missing_cwd_fails_with_reason(tmp_path: Path) -> None:
    r = gate(tmp_path, GateCommand(run="true", cwd="nope"))
    assert not r.passed and r.reason == f"working directory not found: {tmp_path / 'nope'}"


def test_per_command_timeout_overrides_default(tmp_path: Path) -> None:
    r = gate(tmp_path, GateCommand(run="sleep 5", timeout=0.5), timeout=100)
    assert r.reason == "timed out after 0.5 s"


def test_gates_do_not_import_prefect() -> None:
    code = "import sys, milepost.gates; assert 'prefect' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


def test_units_skipped_because_the_attempt_was_stopped_before_they_ran_make_it_interrupted(tmp_path: Path) -> None:
    """A gate passes only when each of its commands proves: units skipped because the attempt was stopped
    before they began (an interrupt while its gate waited for a run of the same unit elsewhere) end it
    interrupted, never passed with nothing run (it passed with every unit skipped: a re-proof Ctrl-C'd
    during a verify recorded its milestone proven)."""
    import threading

    from milepost.gates.units import UnitBook

    for name in ("test_x.py", "test_y.py"):
        (tmp_path / name).write_text("def test_it():\n    pass\n")
    stop = threading.Event()
    stop.set()
    for files, workers in ((["test_x.py"], 1), (["test_x.py", "test_y.py"], 1), (["test_x.py", "test_y.py"], 2)):
        cmd = GateCommand(name="t", run=f"{sys.executable} -m pytest -q {{file}}", each=files)
        log = tmp_path / f"attempt-{len(files)}-{workers}.log"
        r = run_gate([cmd], log, default_cwd=tmp_path, stop=stop, units=UnitBook(None, workers))
        assert r.outcome is Outcome.INTERRUPTED and "skipped: the attempt was interrupted" in r.reason, r
        assert [c.outcome for c in r.commands] == [Outcome.SKIPPED] * len(files)
