"""One way to name a work item (issue 42): ``--item N`` in any position
(before the command too, as ``--json``), the positional ITEM_ID of the
commands whose subject is an item, and ``verify N``, where N could be read
as an item, refused naming ``--item``."""

from __future__ import annotations

import pytest

from tests.conftest import CLI


@pytest.fixture
def two(cli: CLI) -> CLI:
    for name in ("first", "second"):
        cli("item", "create", name, check=True)
        cli("add", f"{name}-m", "--gate", "true", check=True)
    return cli  # (the second is current)


@pytest.mark.parametrize(
    "args",
    [
        ["--item", "1", "list"],
        ["list", "--item", "1"],
        ["list", "1"],
        ["--item=1", "list"],
        ["--json", "--item", "1", "list"],
    ],
)
def test_list_names_its_item_every_way(two: CLI, args: list[str]) -> None:
    data = two.json(*[a for a in args if a != "--json"])
    assert data["item"] == 1 and [m["name"] for m in data["milestones"]] == ["first-m"]


@pytest.mark.parametrize("args", [["next", "1"], ["--item", "1", "next"], ["next", "--item", "1"]])
def test_next_names_its_item_every_way(two: CLI, args: list[str]) -> None:
    assert two.json(*args)["milestone"]["name"] == "first-m"


@pytest.mark.parametrize("command", [["history"], ["ref", "list"], ["item", "show"], ["graph"]])
def test_an_item_before_the_command_is_the_commands(two: CLI, command: list[str]) -> None:
    assert two.json("--item", "1", *command) == two.json(*command, "1")


def test_two_different_items_are_refused(two: CLI) -> None:
    r = two("list", "1", "--item", "2")
    assert r.code == 2 and "two work items given: ITEM_ID 1 and --item 2" in r.err, r.err


def test_a_command_without_an_item_says_so(two: CLI) -> None:
    r = two("--item", "1", "init")
    assert r.code == 2 and "No such option '--item'" in r.err, r.err


def test_verify_with_a_number_is_told_apart_from_a_milestone(two: CLI) -> None:
    r = two("verify", "1")
    assert r.code == 2, r
    assert "NAMEs are milestone names, which start with a letter; to verify work item 1, pass --item 1" in r.err
    assert two("verify", "--item", "1").code == 0
