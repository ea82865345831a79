"""Small promises of issue 32: ``-o FILE`` says what it wrote, refusals
agree in number."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import CLI


def test_graph_o_says_what_it_wrote(cli: CLI, workspace: Path) -> None:
    cli("item", "create", "one", check=True)
    cli("add", "a", check=True)
    for fmt in ("html", "svg", "mermaid"):
        r = cli("graph", "--format", fmt, "-o", f"dag.{fmt}")
        size = (workspace / f"dag.{fmt}").stat().st_size
        assert r.code == 0 and r.out == "" and r.err == f"wrote dag.{fmt} ({fmt}, {size:,} bytes)\n"
    r = cli("plan", "export", "-o", "plan.yaml")
    assert r.code == 0 and r.err == "wrote plan.yaml\n"


def test_remove_refusals_agree_in_number(cli: CLI) -> None:
    cli("item", "create", "one", check=True)
    cli("add", "a", check=True)
    cli("add", "b", "--deps", "a", check=True)
    r = cli("remove", "a")
    assert r.code == 2 and "cannot remove 'a': b depends on it; remove it first" in r.err
    cli("add", "c", "--deps", "a", check=True)
    r = cli("remove", "a")
    assert r.code == 2 and "cannot remove 'a': b, c depend on it; remove those first" in r.err
