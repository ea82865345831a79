"""The README's walkthroughs run as written: every shell line through the real
entry point, with the exit code its comment promises (`exit N`, else 0) and the
text it quotes; the Python API snippet in a copy of the example refactor."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CLI, EXAMPLES, ROOT

README = (ROOT / "README.md").read_text()
# The walkthrough's first two lines set up a shell; the test gives each line a fresh folder and PATH instead.
SETUP_LINES = {". .venv/bin/activate", "mkdir /tmp/try && cd /tmp/try"}


def block(heading: str, lang: str) -> str:
    """The first ``lang`` code block after the README heading ``heading``."""
    section = README.split(f"\n## {heading}\n", 1)[1]
    return section.split(f"```{lang}\n", 1)[1].split("```", 1)[0]


def shell_lines(heading: str) -> list[tuple[str, str]]:
    out = []
    for raw in block(heading, "sh").splitlines():
        cmd, _, comment = raw.partition("  #")
        cmd = cmd.strip()
        if cmd and not cmd.startswith("#"):
            out.append((cmd, comment.strip()))
    return out


@pytest.fixture
def shell(milepost_bin: Path, workspace: Path) -> CLI:
    """``milepost`` on PATH as this interpreter's entry point, in a fresh workspace."""
    cli = CLI(workspace)
    cli.extra["PATH"] = f"{milepost_bin}:{cli.env['PATH']}"
    return cli


def run_walkthrough(shell: CLI, heading: str) -> list[str]:
    ran = []
    for cmd, comment in shell_lines(heading):
        if cmd in SETUP_LINES:
            continue
        p = subprocess.run(["bash", "-c", cmd], cwd=shell.cwd, env=shell.env, capture_output=True, text=True)
        expected = int(m.group(1)) if (m := re.search(r"\bexit (\d+)", comment)) else 0
        assert p.returncode == expected, f"README line {cmd!r}: exit {p.returncode}, not {expected}\n{p.stderr}"
        for quoted in re.findall(r'"([^"]+)"', comment):
            assert quoted in p.stdout + p.stderr, f"README line {cmd!r} promises {quoted!r}:\n{p.stdout}{p.stderr}"
        ran.append(cmd)
    return ran


def test_the_five_minute_walkthrough_runs_as_written(shell: CLI) -> None:
    ran = run_walkthrough(shell, "Five minutes with the CLI")
    assert "milepost init" in ran and "milepost history" in ran
    shown = {m["name"]: m for m in shell.json("list")["milestones"]}
    assert shown["analyze-a"]["status"] == shown["analyze-b"]["status"] == "done"
    # Failed twice into stuck, then reset by the operator: needs_fix with a fresh budget, next in line again.
    assert (shown["merge"]["status"], shown["merge"]["attempts"]) == ("needs_fix", 0)
    assert shell.json("next")["milestone"]["name"] == "merge"
    assert [r["outcome"] for r in shell.json("runs", "merge")["runs"]] == ["failed", "failed"]


def test_the_work_item_walkthrough_runs_as_written(shell: CLI) -> None:
    shell("init", check=True)
    run_walkthrough(shell, "Work items across days")
    items = {i["id"]: i for i in shell.json("item", "list", "--filter", "all")["items"]}
    assert (items[1]["state"], items[2]["readiness"], items[3]["state"]) == ("completed", "runnable", "cancelled")
    one = shell.json("item", "show", "1")
    assert one["report"] == "Parser rewritten" and one["waits"] == [] and one["blocked_by"] is None
    assert [r["ref"] for r in one["work_refs"] if r["kind"] == "pr"] == ["https://git.example/pr/42"]


def test_the_python_api_snippet_runs_in_a_copy_of_the_example(tmp_path: Path) -> None:
    ws = tmp_path / "refactor"
    shutil.copytree(EXAMPLES / "refactor", ws)
    cli = CLI(ws)
    cli("init", check=True)
    p = subprocess.run(
        [sys.executable, "-c", block("Python API", "python")], cwd=ws, env=cli.env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    names = [m["name"] for m in cli.json("list")["milestones"]]
    assert p.stdout.split() == [w for n in names for w in (n, "passed")]
    assert all(m["status"] == "done" for m in cli.json("list")["milestones"])


def test_the_proof_walkthrough_runs_as_written(shell: CLI) -> None:
    ran = run_walkthrough(shell, "Done means proven on the code as it is now")
    assert ran[-1] == "milepost runs leaf"
    runs = shell.json("runs", "leaf")["runs"]
    # proven, re-proven after the edit, failed on the bad edit, proven after the fix: four executions.
    assert [r["outcome"] for r in runs] == ["passed", "passed", "failed", "passed"]
    assert shell.json("list")["milestones"][0]["view"] == "done"


def test_the_plan_file_example_is_a_valid_plan() -> None:
    from milepost.planfile import parse_plan

    ms = {m.name: m for m in parse_plan(block("Plan files", "yaml")).to_milestones()}
    assert ms["extract-a"].inputs == ["src/a/**", "tests/test_a.py"] and ms["analyze-a"].inputs == []
