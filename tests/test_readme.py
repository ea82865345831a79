"""The README's and the docs' examples run as written: every shell line of a
walkthrough through the real entry point, with the exit code its comment
promises (`exit N`, else 0) and the text it quotes; the Python API snippet
in a copy of the example refactor; the plan files as plans, the JSON as JSON.
Every shell block of the README and the docs is run here, or is named below
as shown only, with the reason."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CLI, EXAMPLES, ROOT

PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
# The walkthrough's first two lines set up a shell; the test gives each line a fresh folder and PATH instead.
SETUP_LINES = {". .venv/bin/activate", "mkdir /tmp/try && cd /tmp/try", "mkdir /tmp/try-proofs && cd /tmp/try-proofs"}
# (page, heading) of every shell block the tests below run.
RUN = {
    ("README.md", "Five minutes with the CLI"),
    ("README.md", "Done means proven on the code as it is now"),
    ("docs/work-items.md", "Work items across days"),
    ("docs/agents.md", "Using milepost from an agent"),
    ("docs/scaffold.md", "Plan a refactor from your imports"),  # tests/test_scaffold.py
}
# Shell blocks shown, not run here, and why.
SHOWN = {
    ("README.md", "The two commands"): "make demo and make test are what CI runs (tests/test_demo.py runs the demo)",
    ("README.md", "Driving a DAG as a Prefect flow"): "needs a Prefect server; tests/flows drive for real",
    ("docs/benchmarks.md", "Benchmarks"): "make bench takes minutes; the benchmarks are scripts of their own",
    ("docs/plan-files.md", "How a plan changes"): "an editor in the middle; tests/test_living_plan.py takes each"
    " step (export, apply --item with --dry-run and --expect-revision, edit, add)",
    ("docs/doers.md", "Try it: `examples/doers`"): "tests/flows/test_doers.py::test_the_example_as_a_user_runs_it"
    " takes these steps on a real Prefect server",
    ("docs/benchmarks.md", "`bench_exact.py`: exact proofs on jinja2, against its own suite (2026-12-03)"): "fetches"
    " jinja2 with pip and runs its suite several times; a benchmark script of its own",
    (
        "docs/benchmarks.md",
        "A living plan, tried as a new user: toolz revised twice while driven (issue 39, 2026-12-05)",
    ): "a record of a trial by hand (a drive in the background, edits while it runs);"
    " tests/flows/test_living_plan_drive.py takes the same steps on a real Prefect server",
}


def text(page: str) -> str:
    return (ROOT / page).read_text()


def sections(page: str) -> list[tuple[str, str]]:
    """(heading, text under it up to the next heading) of ``page``, at any
    level; a ``#`` line inside a code block is code, not a heading."""
    out: list[tuple[str, list[str]]] = [("", [])]
    fenced = False
    for line in text(page).splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"#{1,6} (.+)\n", line) if not fenced else None
        if heading:
            out.append((heading.group(1).strip(), []))
        else:
            out[-1][1].append(line)
    return [(title, "".join(body)) for title, body in out]


def section(page: str, heading: str) -> str:
    for title, body in sections(page):
        if title == heading:
            return body
    raise AssertionError(f"{page} has no heading {heading!r}")


def block(page: str, heading: str, lang: str) -> str:
    """The first ``lang`` code block under ``heading`` of ``page``."""
    return section(page, heading).split(f"```{lang}\n", 1)[1].split("```", 1)[0]


def shell_lines(page: str, heading: str) -> list[tuple[str, str]]:
    out = []
    for raw in block(page, heading, "sh").splitlines():
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


def run_walkthrough(shell: CLI, page: str, heading: str) -> list[str]:
    ran = []
    for cmd, comment in shell_lines(page, heading):
        if cmd in SETUP_LINES:
            continue
        p = subprocess.run(["bash", "-c", cmd], cwd=shell.cwd, env=shell.env, capture_output=True, text=True)
        expected = int(m.group(1)) if (m := re.search(r"\bexit (\d+)", comment)) else 0
        assert p.returncode == expected, f"{page} line {cmd!r}: exit {p.returncode}, not {expected}\n{p.stderr}"
        for quoted in re.findall(r'"([^"]+)"', comment):
            assert quoted in p.stdout + p.stderr, f"{page} line {cmd!r} promises {quoted!r}:\n{p.stdout}{p.stderr}"
        ran.append(cmd)
    return ran


def test_the_five_minute_walkthrough_runs_as_written(shell: CLI) -> None:
    ran = run_walkthrough(shell, "README.md", "Five minutes with the CLI")
    assert "milepost init" in ran and "milepost history" in ran
    shown = {m["name"]: m for m in shell.json("list")["milestones"]}
    assert shown["analyze-a"]["status"] == shown["analyze-b"]["status"] == "done"
    # Failed twice into stuck, then reset by the operator: needs_fix with a fresh budget, next in line again.
    assert (shown["merge"]["status"], shown["merge"]["attempts"]) == ("needs_fix", 0)
    assert shell.json("next")["milestone"]["name"] == "merge"
    assert [r["outcome"] for r in shell.json("runs", "merge")["runs"]] == ["failed", "failed"]


def test_the_proof_walkthrough_runs_as_written(shell: CLI) -> None:
    ran = run_walkthrough(shell, "README.md", "Done means proven on the code as it is now")
    assert ran[-1] == "milepost runs leaf"
    runs = shell.json("runs", "leaf")["runs"]
    # proven, re-proven after the edit, failed on the bad edit, put back as proven (cached: no
    # execution), then run anyway with --fresh --all: four executions.
    assert [r["outcome"] for r in runs] == ["passed", "passed", "failed", "cached", "passed"]
    assert runs[3]["cached_from"] == {"item": 1, "milestone": "leaf", "attempt": 1}
    assert shell.json("list")["milestones"][0]["view"] == "done"


def test_the_work_item_walkthrough_runs_as_written(shell: CLI) -> None:
    shell("init", check=True)
    run_walkthrough(shell, "docs/work-items.md", "Work items across days")
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
    code = block("docs/python-api.md", "Python API", "python")
    p = subprocess.run([sys.executable, "-c", code], cwd=ws, env=cli.env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    names = [m["name"] for m in cli.json("list")["milestones"]]
    assert p.stdout.split() == [w for n in names for w in (n, "passed")]
    assert all(m["status"] == "done" for m in cli.json("list")["milestones"])


def test_the_plan_file_examples_are_valid_plans() -> None:
    from milepost.planfile import parse_plan

    short = {m.name: m for m in parse_plan(block("README.md", "Plan files", "yaml")).to_milestones()}
    assert short["analyze-a"].inputs == ["src/a/**"] and short["extract-a"].review
    full = {m.name: m for m in parse_plan(block("docs/plan-files.md", "Plan files", "yaml")).to_milestones()}
    assert full["extract-a"].inputs == ["src/a/**", "tests/test_a.py"] and full["analyze-a"].inputs == []
    schema_example = parse_plan(block("docs/agents.md", "Using milepost from an agent", "yaml"))
    assert [m.name for m in schema_example.milestones] == ["analyze-a"]


def test_the_doer_block_example_names_every_doer_field() -> None:
    """docs/plan-files.md's ``doer:`` example is a valid block that shows each field a plan may set."""
    from milepost.graph.models import DoerSettings
    from milepost.planfile import parse_plan

    text = (ROOT / "docs" / "plan-files.md").read_text().split("```yaml\ndoer:\n", 1)[1].split("```", 1)[0]
    plan = parse_plan("objective: o\ndoer:\n" + text + "milestones:\n  - {name: a, do: ./agent, gate: 'true'}\n")
    assert plan.doer is not None
    assert set(plan.doer.model_dump(exclude_unset=True)) == set(DoerSettings.model_fields)
    assert plan.doer.usage == "claude-json"


def test_the_mcp_client_entry_is_what_the_server_takes() -> None:
    """The mcpServers entry of the README and of docs/agents.md: the same, and
    its arguments are what `milepost mcp` accepts."""
    entries = [json.loads(block(p, "Using milepost from an agent", "json")) for p in ("README.md", "docs/agents.md")]
    assert entries[0] == entries[1]
    server = entries[0]["mcpServers"]["milepost"]
    assert server["command"] == "milepost" and server["args"][:2] == ["mcp", "--workspace"]
    p = subprocess.run([sys.executable, "-m", "milepost", "mcp", "--help"], capture_output=True, text=True, check=True)
    assert "--workspace" in p.stdout


def test_the_plan_schema_line_writes_the_schema(shell: CLI) -> None:
    run_walkthrough(shell, "docs/agents.md", "Using milepost from an agent")
    schema = json.loads((shell.cwd / "milepost-plan.schema.json").read_text())
    assert {"objective", "milestones"} <= set(schema["properties"])


def test_every_shell_block_is_run_or_says_why_not() -> None:
    found = set()
    for page in PAGES:
        found |= {(page, title) for title, body in sections(page) if "```sh\n" in body}
    assert found == RUN | set(SHOWN), found ^ (RUN | set(SHOWN))


def test_the_readme_is_a_door() -> None:
    """Short enough to read (the reference lives in docs/), and every link of
    the README and the docs leads to a file that is there."""
    assert len(text("README.md")) <= 15_000
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text(page)):
            if "://" in target:
                continue
            assert ((ROOT / page).parent / target).exists(), f"{page} links to {target}, which is not there"


def test_every_setting_is_in_the_settings_table() -> None:
    from milepost.settings import Settings

    table = section("docs/store.md", "The store")
    for name in Settings.model_fields:
        assert f"| `MILEPOST_{name.upper()}` |" in table, name
