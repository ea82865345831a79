"""What a new user met trying milepost from a fresh clone (issue 42, "tried as a new user"):
each friction that was fixed, pinned where it shows."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from milepost.events import LineReporter
from milepost.results import Claim
from milepost.service import Service
from tests.conftest import CLI


def test_item_show_says_a_stuck_milestone_once(cli: CLI) -> None:
    cli("item", "create", "stuck once", check=True)
    cli("add", "x", "--gate", "exit 1", "--retries", "0", check=True)
    cli("start", "x", check=True)
    assert cli("done", "x").code == 1
    line = next(s for s in cli("item", "show").out.splitlines() if "readiness" in s)
    assert "readiness blocked (stuck: x)" in line and "stuck: stuck" not in line, line


def test_item_show_keeps_the_fine_state_where_the_reason_does_not_name_it(cli: CLI) -> None:
    cli("item", "create", "ready one", check=True)
    cli("add", "x", "--gate", "true", check=True)
    assert "readiness runnable (milestone_ready: next: x)" in cli("item", "show").out
    cli("start", "x", check=True)
    assert "readiness runnable (in progress: x)" in cli("item", "show").out


@pytest.mark.parametrize(
    "command", [["start", "1"], ["done", "1"], ["runs", "1"], ["log", "1"], ["reset", "1", "--reason", "r"]]
)
def test_a_number_where_a_milestone_is_named_says_how_to_name_the_item(cli: CLI, command: list[str]) -> None:
    cli("item", "create", "numbers", check=True)
    cli("add", "m1", "--gate", "true", check=True)
    r = cli(*command)
    assert r.code == 2, r
    assert "a milestone's name starts with a letter; for work item 1, pass --item 1" in r.err, r.err
    assert "did you mean" not in r.err, r.err


def test_a_drive_says_no_gate_for_a_milestone_without_one(service: Service) -> None:
    """A scaffolded package without tests has no gate: the drive's lines said ``(attempt 1)``
    for an attempt that never was (its budget stays 0/3); now ``(no gate)``, as ``done`` says."""
    item = service.create_item("no gate").id
    service.add_milestone("pkg", item=item)
    service.add_milestone("leaf", gate="true", item=item)
    out = io.StringIO()
    for name in ("pkg", "leaf"):
        service.start(name, item=item)
        done = service.done(name, item=item)
        claim = Claim(item=item, pk=done.milestone.id, milestone=done.milestone, attempt=1, owner="t", log_path="t")
        LineReporter(out).gate_started(claim)
        LineReporter(out).gate_finished(claim, done)
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines[:2] == ["start  pkg (no gate)", "done   pkg (no gate)"], lines
    assert lines[2] == "start  leaf (attempt 1)" and lines[3].startswith("done   leaf (attempt 1 in "), lines
    assert service.milestone_views(item)[1][0].attempts == 0  # (no attempt was spent)


def test_a_failed_verify_says_what_failed_and_where_its_log_is(cli: CLI) -> None:
    """The README's proofs walk-through: `verify` after a bad edit said "gate failed: exit 1" and no
    more; like `done` and `drive`, it now shows the gate's last lines and its log's path."""
    (cli.cwd / "leaf.py").write_text("def value():\n    return 1\n")
    cli("item", "create", "Keep leaf proven", check=True)
    gate = "python3 -c 'import leaf; assert leaf.value() == 1, \"leaf.value() is \" + str(leaf.value())'"
    cli("add", "leaf", "--gate", gate, "--inputs", "leaf.py", check=True)
    cli("start", "leaf", check=True)
    cli("done", "leaf", check=True)
    (cli.cwd / "leaf.py").write_text("def value():\n    return 2\n")
    first = cli("--json", "verify")
    assert first.code == 1, first
    [v] = first.data["verified"]
    assert v["outcome"] == "failed" and v["log"] and v["log"].endswith("attempt-2.log"), v
    assert any("leaf.value() is 2" in line for line in v["last_lines"]), v
    assert Path(v["log"]).is_file()
    (cli.cwd / "leaf.py").write_text("def value():\n    return 3\n")
    r = cli("verify")
    assert r.code == 1, r
    assert "AssertionError: leaf.value() is 3" in r.out and "attempt-3.log" in r.out, r.out


def test_edit_help_names_every_kind_of_input_add_takes() -> None:
    from click.testing import CliRunner

    from milepost.cli import cli as main

    for command in ("add", "edit"):
        shown = " ".join(CliRunner().invoke(main, [command, "--help"]).output.split())
        inputs = shown.split("--inputs PATTERN", 1)[1].split(" --", 1)[0]
        assert "gitignore-style" in inputs and "module:NAME" in inputs and "env:NAME" in inputs, (command, inputs)


def test_a_drive_until_a_milestone_says_how_many_it_needed_in_one_parenthesis(cli: CLI) -> None:
    """`drive --until merge` on work done said "merge and what it depends on are done (7 milestones)
    (0 gate runs, 0.0 s)": two parentheses in a row. (Answered from the store: no Prefect.)"""
    cli("item", "create", "until", check=True)
    cli("add", "a", "--gate", "true", check=True)
    cli("add", "b", "--gate", "true", "--deps", "a", check=True)
    cli("add", "c", "--gate", "true", "--deps", "b", check=True)
    for name in ("a", "b", "c"):
        cli("start", name, check=True)
        cli("done", name, check=True)
    said = {u: cli("drive", "--until", u, check=True).out.splitlines()[-1] for u in ("a", "b", "c")}
    assert said["a"].startswith("ok: a is done (0 gate runs, "), said
    assert said["b"].startswith("ok: b and the milestone it depends on are done (0 gate runs, "), said
    assert said["c"].startswith("ok: c and the 2 milestones it depends on are done (0 gate runs, "), said


def test_item_list_with_a_filter_nothing_matches_does_not_say_there_are_no_items(cli: CLI) -> None:
    assert "no work items yet" in cli("item", "list", check=True).out
    cli("item", "create", "one", check=True)
    shown = cli("item", "list", "--filter", "waiting_for_operator", check=True).out
    assert "no work items yet" not in shown and "no work item matches --filter waiting_for_operator" in shown, shown


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["add"], "--retries N "),
        (["edit"], "--retries N "),
        (["item", "list"], "--limit N "),
        (["item", "wake"], "--resource RESOURCE "),
        (["serve"], "a tick every --interval seconds"),
    ],
)
def test_help_names_the_placeholders_its_text_uses(command: list[str], shown: str) -> None:
    """`add --help` said "at most 1 + N gate attempts" beside `--retries INTEGER RANGE`, `serve --help`
    "a tick every INTERVAL seconds" beside `--interval SECONDS`: the words now match."""
    from click.testing import CliRunner

    from milepost.cli import cli as main

    text = " ".join(CliRunner().invoke(main, [*command, "--help"]).output.split())
    assert shown in text, text


def test_ref_list_says_a_cached_runs_outcome_once_and_no_empty_path(cli: CLI) -> None:
    """The README's proofs walk-through: a file put back as proven makes a `cached` attempt, whose
    work ref read `gate_run  leaf attempt 3: cached (cached: passed as ...)` (an empty path, the
    outcome twice)."""
    (cli.cwd / "leaf.py").write_text("def value():\n    return 1\n")
    cli("item", "create", "Keep leaf proven", check=True)
    cli(
        "add", "leaf", "--gate", "python3 -c 'import leaf; assert leaf.value() == 1'", "--inputs", "leaf.py", check=True
    )
    cli("start", "leaf", check=True)
    cli("done", "leaf", check=True)
    (cli.cwd / "leaf.py").write_text("def value():\n    return 2\n")
    assert cli("verify").code == 1
    (cli.cwd / "leaf.py").write_text("def value():\n    return 1\n")
    cli("verify", check=True)
    cached = [r for r in cli.json("ref", "list")["work_refs"] if r["ref"] == ""]
    assert [r["reason"] for r in cached] == [
        "leaf attempt 3: cached: passed as item 1 'leaf' attempt 1 on the same gate and inputs"
    ], cached
    [line] = [s for s in cli("ref", "list").out.splitlines() if "attempt 3" in s]
    assert " gate_run leaf attempt 3: cached: passed as " in line, line
    failed = [s for s in cli("ref", "list").out.splitlines() if "attempt 2" in s]
    assert failed and failed[0].endswith("leaf attempt 2: failed (exit 1)"), failed


def test_the_agent_tools_say_item_1_where_the_cli_says_pass_item_1(service: Service) -> None:
    from milepost.agent.words import error_payload
    from milepost.errors import NotFoundError

    item = service.create_item("numbers").id
    service.add_milestone("m1", gate="true", item=item)
    with pytest.raises(NotFoundError) as e:
        service.start("1", item=item)
    said = error_payload(e.value)["message"]
    assert "for work item 1, pass item=1" in said and "--" not in said, said


def test_a_plan_gate_yaml_reads_as_a_boolean_says_to_quote_it(cli: CLI) -> None:
    """`--gate "true"` is the README's; `gate: true` in a plan file is YAML's boolean."""
    (cli.cwd / "plan.yaml").write_text("objective: x\nmilestones:\n  - name: a\n    gate: true\n")
    r = cli("plan", "apply", "plan.yaml")
    assert r.code == 2, r
    assert "plan.yaml:4: milestone 'a': invalid gate:" in r.err and "quote it, e.g. gate: 'true'" in r.err, r.err
    (cli.cwd / "plan.yaml").write_text("objective: x\nmilestones:\n  - name: a\n    gate: 'true'\n")
    cli("plan", "apply", "plan.yaml", check=True)
