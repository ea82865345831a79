"""What a new user met trying milepost from a fresh clone (issue 42, "tried as a new user"):
each friction that was fixed, pinned where it shows."""

from __future__ import annotations

import pytest

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
