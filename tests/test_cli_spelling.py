"""One spelling per concept and global flags anywhere (issue 32): every
command that acts on a work item takes ``--item N`` (a positional ITEM_ID
stays as its synonym), every hint a command prints names a flag that command
accepts, and ``--json``, ``--db``, ``--agent``, ``--operator``, ``--debug``
work before or after the subcommand."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from milepost.cli import cli as root
from tests.conftest import CLI

# Commands that act on no existing work item: they make one, or none at all.
NO_ITEM = {
    "init",
    "item create",
    "item list",
    "item wake",
    "plan apply",
    "plan scaffold",
    "plan cycles",
    "plan schema",
    "tick",
    "serve",
    "deploy",
    "server start",
    "server stop",
    "server status",
    "mcp",
}
GLOBAL = {"--db", "--agent", "--json", "--operator", "--debug", "--help", "--version"}


def leaves(cmd: click.Command = root, path: tuple[str, ...] = ()) -> list[tuple[str, click.Command]]:
    if isinstance(cmd, click.Group):
        return [leaf for n, c in sorted(cmd.commands.items()) for leaf in leaves(c, (*path, n))]
    return [(" ".join(path), cmd)]


def flags_in_help(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))


def test_every_command_on_an_item_takes_item_n_in_its_help(cli: CLI) -> None:
    names = [name for name, _ in leaves()]
    assert len(names) > 40 and set(NO_ITEM) <= set(names)  # the walk sees every command
    for name in names:
        r = cli(*name.split(), "--help")
        assert r.code == 0, name
        usage = r.out.splitlines()[0]
        if name in NO_ITEM:
            assert "ITEM_ID" not in usage, name
            continue
        assert "--item N " in r.out, f"`milepost {name} --help` shows no --item N"
        assert "--item ID" not in r.out and "--item INTEGER" not in r.out, name
        if "ITEM_ID" in usage:  # the positional id is a synonym, said so
            assert "the same as ITEM_ID" in r.out, name


def _filled(name: str, cmd: click.Command) -> list[str]:
    """``name`` with its required arguments and options given dummy values."""
    args = name.split()
    for p in cmd.params:
        if not p.required:
            continue
        value = p.type.choices[0] if isinstance(p.type, click.Choice) else "x"
        if isinstance(p, click.Option):
            args += [p.opts[0], str(value)]
        else:
            args.append(str(value))
    return args


@pytest.mark.parametrize("name", sorted(n for n, _ in leaves() if n not in NO_ITEM))
def test_each_hint_names_a_flag_the_command_takes(cli: CLI, name: str) -> None:
    """Run with no current work item: the refusal's hints (outside the
    backquoted commands it suggests) name only this command's flags."""
    cmd = dict(leaves())[name]
    r = cli("--agent", "nobody", *_filled(name, cmd))
    said = r.err if name != "prime" else r.out  # prime briefs the agent even then
    assert r.code == (2 if name != "prime" else 0) and said, name
    hint = re.sub(r"`[^`]*`", "", said)
    accepted = {o for p in cmd.params for o in getattr(p, "opts", [])} | GLOBAL
    assert flags_in_help(hint) <= accepted, (name, said)
    if name in ("item complete", "item pick", "item wait"):  # refused before an item is looked up
        assert "--report" in said or "--item N" in said or "--resource" in said, said
    else:
        assert "has no current work item" in said and "--item N" in said, said


def test_the_positional_id_and_item_are_one_thing(cli: CLI) -> None:
    cli("item", "create", "one", check=True)
    cli("add", "a", check=True)
    assert cli("--json", "graph", "--item", "1").data == cli("--json", "graph", "1").data
    assert cli("plan", "export", "--item", "1").out == cli("plan", "export", "1").out
    r = cli("graph", "1", "--item", "2")
    assert r.code == 2 and r.err == (
        "milepost: error: two work items given: ITEM_ID 1 and --item 2; give one (they are synonyms)\n"
    )
    assert cli("item", "show", "1", "--item", "1").code == 0
    r = cli("item", "pick")
    assert r.code == 2 and "which work item? pass --item N (or ITEM_ID)" in r.err
    assert cli("--json", "item", "pick", "--item", "1").data["id"] == 1


def test_global_flags_work_after_the_subcommand(cli: CLI, workspace: Path) -> None:
    cli("item", "create", "one", "--agent", "bob", check=True)
    assert cli("list", "--json", "--agent", "bob").data["item"] == 1
    assert cli("list", "--agent=bob", "--json").data["item"] == 1
    assert cli("item", "show", "--json", "--agent", "bob").data["agent"] == "bob"
    # an option's value that looks like a global flag stays the value
    r = cli("add", "a", "--acceptance", "--json", "--agent", "bob")
    assert r.code == 0 and r.out.startswith("added 'a'")
    assert cli("--json", "list", "--agent", "bob").data["milestones"][0]["acceptance"] == "--json"
    # after `--` nothing moves: it is list's ITEM_ID, and no work item's id
    r = cli("list", "--", "--json")
    assert r.code == 2 and "Invalid value for '[ITEM_ID]': '--json' is not a whole number" in r.err, r.err
    # the error document follows a --json given last, too
    r = cli("list", "--item", "99", "--json")
    assert r.code == 2 and r.data["error"]["type"] == "not_found" and r.err == ""
    r = cli("list", "--json", "--db", f"sqlite:///{workspace}/none.db")
    assert r.code == 3 and r.data["error"]["type"] == "store_not_found"
    r = cli("plan", "export", "--item", "1", "--json", "--agent", "bob", "--format", "json")
    assert r.code == 0 and '"objective": "one"' in r.out


def groups(cmd: click.Command = root, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if not isinstance(cmd, click.Group):
        return []
    return [path] + [p for name, sub in cmd.commands.items() for p in groups(sub, (*path, name))]


@pytest.mark.parametrize("path", groups(), ids=lambda p: " ".join(p) or "milepost")
def test_a_groups_help_lists_each_command_with_its_whole_first_sentence(cli: CLI, path: tuple[str, ...]) -> None:
    """Not cut at the line's end with "...": wrapped, it ends as the
    sentence does (the sentence as click takes it, whole)."""
    r = cli(*path, "--help")
    assert r.code == 0, r.err
    listed = r.out.split("Commands:", 1)[1]
    group = root
    for name in path:
        group = group.commands[name]  # type: ignore[attr-defined]
    for name, sub in group.commands.items():  # type: ignore[attr-defined]
        first = sub.get_short_help_str(limit=1000)
        assert " ".join(first.split()) in " ".join(listed.split()), (name, first)


def test_every_option_says_what_it_does() -> None:
    """Each option of each command has its help text (``drive --task-runner`` had none)."""
    bare = [
        (name or "milepost", p.opts)
        for name, cmd in [("", root), *leaves()]
        for p in cmd.params
        if isinstance(p, click.Option) and not p.hidden and not p.help and "--help" not in p.opts
    ]
    assert bare == [], bare
