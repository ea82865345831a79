"""Damaged and moved workspaces around a gate: a log folder that cannot be
written, terminal control characters, a moved or copied workspace, a
re-created store, SIGTERM during ``done``."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import CLI
from tests.test_hostile import delete_db, fresh, logs_blocked, run_main, strict_json, template

__all__ = ["template"]  # the workspace fixture these tests copy


def test_a_gate_that_cannot_start_records_a_failed_attempt_and_frees_its_lease(template: Path, tmp_path: Path) -> None:
    ws = fresh(template, tmp_path)
    logs_blocked(ws)
    r = run_main(ws, ["--json", "done", "a"])
    assert r.code == 1
    run = strict_json(r.out)["gate_run"]
    assert run["outcome"] == "failed" and run["reason"].startswith("cannot write the gate's log")
    (ws / ".milepost" / "logs").unlink()
    # No stale lease: the milestone can be started again and its gate run at once.
    assert run_main(ws, ["start", "a"]).code == 0
    again = run_main(ws, ["--json", "done", "a"])
    assert again.code == 0 and strict_json(again.out)["gate_run"]["attempt"] == 2


def test_terminal_control_characters_are_escaped_on_human_output(template: Path, tmp_path: Path) -> None:
    ws = fresh(template, tmp_path)
    evil = "evil \x1b[2J\x1b[31mred\x07 \u202eabc"
    assert run_main(ws, ["item", "create", evil]).code == 0
    for args in (["item", "list"], ["item", "show"], ["history"]):
        out = run_main(ws, args).out
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, args
        assert "evil \\x1b[2J\\x1b[31mred\\x07 \\u202eabc" in out, (args, out)
    # JSON keeps the text as it was written.
    assert strict_json(run_main(ws, ["--json", "item", "show"]).out)["objective"] == evil


def test_a_moved_workspace_keeps_its_logs_and_a_copy_reads_its_own(template: Path, tmp_path: Path) -> None:
    ws = fresh(template, tmp_path)
    assert run_main(ws, ["done", "a"]).code == 0
    moved = tmp_path / "moved"
    ws.rename(moved)
    r = run_main(moved, ["--json", "log", "a"])
    path = Path(strict_json(r.out)["run"]["log_path"])
    assert strict_json(r.out)["log_exists"] and path.is_relative_to(moved)
    copy = tmp_path / "copy"
    shutil.copytree(moved, copy)
    (moved / path.relative_to(moved)).write_text("the original's log\n")
    assert run_main(copy, ["log", "a"]).out != "the original's log\n"
    assert strict_json(run_main(copy, ["--json", "log", "a"]).out)["run"]["log_path"].startswith(str(copy))


def test_a_recreated_store_never_appends_to_the_old_evidence(template: Path, tmp_path: Path) -> None:
    ws = fresh(template, tmp_path)
    assert run_main(ws, ["done", "a"]).code == 0
    old_log = Path(strict_json(run_main(ws, ["--json", "log", "a"]).out)["run"]["log_path"])
    old_text = old_log.read_text()
    delete_db(ws)
    assert run_main(ws, ["list"]).code == 3  # no silent fresh start
    assert run_main(ws, ["init"]).code == 0  # a new store, on purpose
    for args in (["item", "create", "again"], ["add", "a", "--gate", "echo new"], ["start", "a"], ["done", "a"]):
        assert run_main(ws, args).code == 0, args
    new_log = Path(strict_json(run_main(ws, ["--json", "log", "a"]).out)["run"]["log_path"])
    assert new_log != old_log and old_log.read_text() == old_text
    shown = strict_json(run_main(ws, ["--json", "item", "show"]).out)["plan"]
    assert "again" in shown["preview"]  # the new item's plan.md, not the old one's


def test_sigterm_stops_done_like_ctrl_c(template: Path, tmp_path: Path) -> None:
    import signal
    import time

    ws = fresh(template, tmp_path)
    marker = ws / "gate.pid"
    run_main(ws, ["add", "slow", "--gate", f"echo $$ > {marker}; sleep 60"])
    run_main(ws, ["start", "slow"])
    proc = CLI(ws).popen("done", "slow")
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    gate_pid = int(marker.read_text())
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert err.strip() == "milepost: error: interrupted"
    assert not Path(f"/proc/{gate_pid}").exists() or "Z" in Path(f"/proc/{gate_pid}/stat").read_text().split()[2]
    runs = strict_json(run_main(ws, ["--json", "runs", "slow"]).out)["runs"]
    assert [r["outcome"] for r in runs] == ["interrupted"]
    # The lease was freed: done runs the gate again at once.
    (ws / "gate.pid").unlink()
    run_main(ws, ["add", "dummy"])  # any write works; the milestone is still in progress
    listed = strict_json(run_main(ws, ["--json", "list"]).out)["milestones"]
    assert next(m for m in listed if m["name"] == "slow")["status"] == "in_progress"
