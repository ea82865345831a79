"""An attempt's files, named, written and read in one place
(milepost.gates.attempt); recovering an attempt from them is tested with
real processes in test_supervisor.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from milepost.gates.attempt import AttemptFiles
from milepost.gates.command import run_gate
from milepost.gates.outcome import GateResult, Outcome
from milepost.graph.models import GateCommand


def test_the_files_of_an_attempt_and_of_its_fix(tmp_path: Path) -> None:
    files = AttemptFiles.of(tmp_path / "logs", 7, "build", 3)
    folder = tmp_path / "logs" / "item-7" / "build"
    assert files.log == folder / "attempt-3.log"
    assert (files.proc, files.result, files.inputs) == (
        folder / "attempt-3.proc",
        folder / "attempt-3.result.json",
        folder / "attempt-3.inputs.json",
    )
    assert files.fix.log == folder / "attempt-3.fix.log"
    assert files.fix.result == folder / "attempt-3.fix.result.json"


def test_the_files_of_a_doer_a_unit_and_the_attempt_before(tmp_path: Path) -> None:
    files = AttemptFiles.of(tmp_path / "logs", 7, "build", 3)
    folder = tmp_path / "logs" / "item-7" / "build"
    assert (files.do.log, files.do.prompt, files.do.cost) == (
        folder / "attempt-3.do.log",
        folder / "attempt-3.do.prompt.md",
        folder / "attempt-3.do.cost.json",
    )
    unit = files.unit(4)
    assert (unit.log, unit.proc) == (folder / "attempt-3.unit-4.log", folder / "attempt-3.unit-4.proc")
    before = files.previous()
    assert before is not None and before.log == folder / "attempt-2.log"
    assert AttemptFiles.of(tmp_path, 7, "build", 1).previous() is None  # a first attempt has none
    assert AttemptFiles(tmp_path / "attempt-12.log").previous() == AttemptFiles(tmp_path / "attempt-11.log")
    folder.mkdir(parents=True)
    unit.log.write_text("out\n")
    unit.proc.write_text("{}\n")
    unit.discard()
    assert list(folder.iterdir()) == []


def test_a_verdict_is_written_whole_and_read_back(tmp_path: Path) -> None:
    files = AttemptFiles(tmp_path / "attempt-1.log")
    assert files.read_result() is None  # none written
    now = datetime.now(UTC)
    verdict = GateResult(outcome=Outcome.FAILED, reason="exit 1", started_at=now, finished_at=now)
    files.write_result(verdict)
    assert files.read_result() == verdict
    assert [p.name for p in tmp_path.iterdir()] == ["attempt-1.result.json"]  # no temporary file left
    files.result.write_text('{"outcome": "pass')  # torn: as good as none
    assert files.read_result() is None


def test_a_gate_leaves_its_files_beside_its_log(tmp_path: Path) -> None:
    (tmp_path / "src.py").write_text("x = 1\n")
    files = AttemptFiles(tmp_path / "logs" / "attempt-1.log")
    r = run_gate([GateCommand(run="echo hi")], files.log, default_cwd=tmp_path, inputs=["*.py"])
    assert r.passed and files.read_result() == r
    assert [(p["event"], p["cmd"]) for p in files.processes()] == [("start", 0), ("end", 0)]
    assert [p["cmd"] for p in files.starts(0)] == [0] and files.starts(1) == []
    assert r.inputs_digest is not None and files.read_inputs(r.inputs_digest) is not None
    assert files.read_inputs("another digest") is None
    assert "hi" in files.log.read_text()
