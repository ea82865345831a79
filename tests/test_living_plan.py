"""A living plan (issue 39): an item refined in place by ``plan apply FILE
--item N`` (and ``edit NAME``), on SQLite and PostgreSQL: what is added,
removed and changed, what is proven again, what a dry run, a revision
conflict, a running attempt and the export round trip leave."""

from __future__ import annotations

from pathlib import Path

import pytest

from milepost.errors import StaleRevisionError, TransitionError
from milepost.graph.status import PlanStatus
from milepost.planfile import dump_plan, parse_plan
from milepost.service import Service
from tests.conftest import CLI, InProcessCLI

PLAN = """
objective: refactor
milestones:
  - {name: a, gate: "true"}
  - {name: b, deps: [a], gate: "true"}
  - {name: c, gate: "true", acceptance: c works}
"""

REVISED = """
objective: refactor
plan_status: ready
milestones:
  - {name: a, gate: "true"}
  - {name: b, deps: [a], gate: "test 1 = 1"}
  - {name: d, deps: [b], gate: "true"}
"""


@pytest.fixture
def proven(any_service: Service) -> Service:
    """Item 1: a <- b, and c, all three done by their gates."""
    any_service.apply_plan(parse_plan(PLAN))
    for n in ("a", "b", "c"):
        any_service.start(n)
        assert any_service.done(n).passed
    return any_service


def state(svc: Service) -> dict[str, tuple[str, int, str | None]]:
    return {m.name: (m.status.value, m.attempts, m.fingerprint) for m in svc.get_item(1).milestones}


def test_apply_to_the_item_adds_changes_and_removes_in_one_revision(proven: Service) -> None:
    before = proven.get_item(1)
    r = proven.revise_item(parse_plan(REVISED), item=1, expect_revision=before.revision)
    assert r.changed_anything and not r.dry_run
    assert r.revision == before.revision + 1 == proven.get_item(1).revision
    assert (r.added, r.removed, [e.name for e in r.changed]) == (["d"], ["c"], ["b"])
    assert [(f.field, f.before, f.after) for f in r.changed[0].fields] == [("gate", "true", "test 1 = 1")]
    assert r.changed[0].reprove and r.stale["b"].startswith("done -> pending: the plan changed its gate")
    assert [(f.field, f.after) for f in r.item_fields] == [("plan_status", "ready")]
    after = proven.get_item(1)
    assert after.plan_status.value == "ready"
    ms = {m.name: m for m in after.milestones}
    assert set(ms) == {"a", "b", "d"}
    assert (ms["a"].status.value, ms["a"].attempts) == ("done", 1)  # unchanged: kept with its proof
    assert (ms["b"].status.value, ms["b"].attempts) == ("pending", 0)  # changed gate: proven again
    assert ms["b"].gate[0].run == "test 1 = 1" and "the plan changed its gate" in (ms["b"].reason or "")
    assert (ms["d"].status.value, ms["d"].deps, ms["d"].id) == ("pending", ["b"], 4)
    assert proven.next().milestone.name == "b"  # type: ignore[union-attr]
    # One revision, every event of it at that revision; the revise event names what changed.
    events = [e for e in proven.events(1) if e["revision"] == r.revision]
    kinds = [(e["action"], e["milestone"]) for e in events]
    assert ("revise", None) in kinds and ("add", "d") in kinds and ("remove", "c") in kinds
    assert ("edit", "b") in kinds and ("reopen", "b") in kinds
    revise = next(e for e in events if e["action"] == "revise")
    assert revise["reason"] == "added d; removed c; changed b (gate); item plan_status; to re-prove: b"
    # The removed milestone's run stays readable: its gate run is a work ref, its log on disk.
    refs = [ref for ref in proven.refs(1) if ref.reason.startswith("c attempt 1")]
    assert len(refs) == 1 and (proven.store.root / refs[0].ref).is_file()
    assert next(e for e in events if e["action"] == "remove")["reason"] == "plan revision; 1 run kept as work refs"
    # The changed milestone runs again, then its new dependent.
    proven.start("b")
    assert proven.done("b").passed
    proven.start("d")
    assert proven.done("d").passed


def test_a_changed_dep_reopens_what_was_built_on_it(proven: Service) -> None:
    text = PLAN.replace('{name: b, deps: [a], gate: "true"}', '{name: b, deps: [a, c], gate: "true"}')
    text += '  - {name: e, deps: [b], gate: "true"}\n'
    r = proven.revise_item(parse_plan(text), item=1)
    assert [(e.name, [f.field for f in e.fields], e.reprove) for e in r.changed] == [("b", ["deps"], True)]
    assert state(proven)["b"][:2] == ("pending", 0) and state(proven)["a"][:2] == ("done", 1)


def test_a_dry_run_writes_nothing(proven: Service, workspace: Path) -> None:
    before, events = proven.get_item(1), proven.events(1)
    r = proven.revise_item(parse_plan(REVISED), item=1, dry_run=True)
    assert r.dry_run and r.changed_anything and r.revision == before.revision
    assert (r.added, r.removed, list(r.stale)) == (["d"], ["c"], ["b"])
    after = proven.get_item(1)
    assert after.model_dump(exclude={"updated_at"}) == before.model_dump(exclude={"updated_at"})
    assert proven.events(1) == events


def test_a_concurrent_change_is_a_conflict_and_changes_nothing(proven: Service) -> None:
    read_at = proven.get_item(1).revision
    proven.add_milestone("x")  # someone else's change in between
    before = proven.get_item(1)
    with pytest.raises(StaleRevisionError, match=f"is at revision {read_at + 1}, not {read_at}") as e:
        proven.revise_item(parse_plan(REVISED), item=1, expect_revision=read_at)
    assert e.value.exit_code == 2
    assert proven.get_item(1) == before


def test_export_then_apply_changes_nothing(proven: Service) -> None:
    proven.edit_milestone("a", {"retries": 5, "inputs": ["src/**"], "timeout": 30})
    before, events = proven.get_item(1), proven.events(1)
    for fmt in ("yaml", "json"):
        text = dump_plan(proven.export_plan(1), fmt)
        r = proven.revise_item(parse_plan(text, f"plan.{fmt}"), item=1)
        assert not r.changed_anything and r.revision == before.revision, r
    assert proven.get_item(1) == before and proven.events(1) == events


EVERY_FIELD = """
objective: round trip
plan_status: needs_input
defaults: {retries: 4, timeout: 30, fix: "echo fix", retry_delay: 1, inputs: ["src/**"]}
doer: {isolate: none, setup: "echo setup", protect: ["tests/**"], env: [HOME], budget_usd: 3}
milestones:
  - {name: a, gate: "true", hypothesis: true, acceptance: "x"}
  - name: b
    deps: [a]
    gate:
      - {name: one, run: "true", cwd: ".", env: {A: "1"}, timeout: 5}
      - {name: two, run: "echo {file}", each: [src/x.py]}
    retries: 1
    review: true
    cache: false
    flaky: true
    inputs: ["!src/y.py", "src/**"]
    do: "echo do"
    do_timeout: 10
    do_budget_usd: 1.5
    do_usage: claude-json
  - {name: c, deps: [a, b]}
"""


def test_a_plan_with_every_field_round_trips(any_service: Service) -> None:
    any_service.apply_plan(parse_plan(EVERY_FIELD))
    before, events = any_service.get_item(1), any_service.events(1)
    for fmt in ("yaml", "json"):
        r = any_service.revise_item(parse_plan(dump_plan(any_service.export_plan(1), fmt), f"p.{fmt}"), item=1)
        assert not r.changed_anything, r
    assert any_service.get_item(1) == before and any_service.events(1) == events
    changed = EVERY_FIELD.replace("retries: 4", "retries: 5").replace("budget_usd: 3}", "budget_usd: 4}")
    r = any_service.revise_item(parse_plan(changed), item=1)
    assert [f.field for f in r.item_fields] == ["defaults", "doer"]
    assert [(e.name, [f.field for f in e.fields]) for e in r.changed] == [("a", ["retries"]), ("c", ["retries"])]
    assert any_service.get_item(1).doer.budget_usd == 4 and r.stale == {}
    r = any_service.revise_item(parse_plan(changed.replace("do_usage: claude-json", "do_usage: codex-json")), item=1)
    assert [(e.name, [f.field for f in e.fields]) for e in r.changed] == [("b", ["do_usage"])]
    assert any_service.get_item(1).milestones[1].do_usage == "codex-json"


def test_a_running_attempt_is_neither_changed_nor_removed(any_service: Service) -> None:
    any_service.apply_plan(parse_plan(PLAN))
    any_service.start("a")
    any_service.start("c")
    before, events = any_service.get_item(1), any_service.events(1)
    text = REVISED.replace('{name: a, gate: "true"}', '{name: a, gate: "false"}')
    with pytest.raises(TransitionError) as e:
        any_service.revise_item(parse_plan(text), item=1)
    problems = e.value.details["problems"]
    assert len(problems) == 2, problems  # both, in one pass
    assert problems[0].startswith("cannot remove 'c' runs attempt 1")
    assert problems[1].startswith("cannot change gate of 'a' runs attempt 1")
    assert any_service.get_item(1) == before and any_service.events(1) == events


BROKEN = """
objective: refactor
milestones:
  - {name: a, gate: "false"}
  - {name: b, deps: [a, zz], gate: "true"}
  - {name: x, deps: [y]}
  - {name: y, deps: [x]}
"""


def test_a_broken_plan_and_running_attempts_are_refused_in_one_pass(any_service: Service) -> None:
    """A plan with an unknown dep and a cycle that also removes a running
    milestone and reopens another: one refusal names every problem."""
    from milepost.agent.tools import call_tool
    from milepost.errors import InputError

    any_service.apply_plan(parse_plan(PLAN))
    any_service.start("a")
    assert any_service.done("a").passed
    any_service.start("b")  # b runs, built on a, whose gate the plan changes
    any_service.start("c")  # c runs, and the plan removes it
    before, events = any_service.get_item(1), any_service.events(1)
    for refine in (
        lambda: any_service.revise_text(BROKEN, "broken.yaml", item=1),
        lambda: any_service.revise_text(BROKEN, "broken.yaml", item=1, dry_run=True),
        lambda: call_tool(any_service, "work_item", {"action": "revise", "id": 1, "plan": BROKEN}),
    ):
        with pytest.raises(InputError) as e:
            refine()
        message = e.value.message
        assert "depends on unknown milestone 'zz'" in message and "form a cycle" in message, message
        assert "cannot remove 'c' runs attempt 1" in message, message
        assert "cannot re-prove 'a': it would reopen 'b' runs attempt 1" in message, message
        assert e.value.exit_code == 2
        said = [p["message"] for p in e.value.details["problems"]]
        assert any(m.startswith("cannot remove 'c'") for m in said) and any("cycle" in m for m in said), said
    assert any_service.get_item(1) == before and any_service.events(1) == events


def test_edit_and_add_on_a_ready_plan_are_revisions(proven: Service) -> None:
    proven.update_item(1, plan_status=PlanStatus.READY)
    r = proven.edit_milestone("c", {"gate": "test 2 = 2", "deps": ["a"]})
    assert [f.field for f in r.changed[0].fields] == ["deps", "gate"]
    assert state(proven)["c"][:2] == ("pending", 0)
    added = proven.add_milestone("z", ["c"])
    assert added.milestone.status.value == "pending"
    assert [e["action"] for e in proven.events(1)][-4:] == ["edit", "reopen", "revise", "add"]


# -- the CLI ---------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_cli(request: pytest.FixtureRequest, workspace: Path) -> CLI:
    """The CLI in this process, in a workspace initialized on a SQLite file or
    on a PostgreSQL database of the test's own (``MILEPOST_DB``)."""
    env = {}
    if request.param == "postgresql":
        name = "mp_lp_" + request.node.name.lower().replace("[", "_").replace("]", "").replace("-", "_")[:50]
        env["MILEPOST_DB"] = request.getfixturevalue("postgres").create_db(name)
    c = InProcessCLI(workspace, env)
    c("init", check=True)
    assert (workspace / ".milepost" / "milepost.db").exists() is (request.param == "sqlite")  # the store it says
    return c


@pytest.fixture
def applied(store_cli: CLI, workspace: Path) -> CLI:
    cli = store_cli
    (workspace / "plan.yaml").write_text(PLAN)
    cli("plan", "apply", "plan.yaml", check=True)
    for n in ("a", "b"):
        cli("start", n, check=True)
        cli("done", n, check=True)
    return cli


def test_cli_dry_run_then_apply(applied: CLI, workspace: Path) -> None:
    (workspace / "new.yaml").write_text(REVISED)
    r = applied("plan", "apply", "new.yaml", "--item", "1", "--dry-run")
    assert r.code == 0, r.err
    assert "  + d (added)" in r.out and "  - c (removed)" in r.out and "  ~ b; proven again:" in r.out
    assert "      gate: true -> test 1 = 1" in r.out
    assert "dry run: nothing written" in r.out
    assert applied.json("item", "show")["revision"] == 5
    data = applied.json("plan", "apply", "new.yaml", "--item", "1", "--expect-revision", "5")
    assert data["revision"] == 6 and data["added"] == ["d"]
    r = applied("plan", "apply", "new.yaml", "--item", "1", "--expect-revision", "5")
    assert r.code == 2 and "is at revision 6, not 5" in r.err
    history = applied("history").out
    assert "r6 default: revise (added d; removed c; changed b (gate); item plan_status; to re-prove: b)" in history
    revised = [e for e in applied.json("history")["events"] if e["action"] == "revise"]
    assert [(e["revision"], e["milestone"], e["reason"]) for e in revised] == [
        (6, None, "added d; removed c; changed b (gate); item plan_status; to re-prove: b")
    ]
    exported = applied("plan", "export", "--item", "1", "-o", "e.yaml")
    assert exported.code == 0
    r = applied("plan", "apply", "e.yaml", "--item", "1")
    assert r.code == 0 and "nothing changed (revision 6)" in r.out


def test_cli_bad_revision_reports_every_problem_and_changes_nothing(applied: CLI, workspace: Path) -> None:
    (workspace / "bad.yaml").write_text(
        "objective: refactor\nmilestones:\n  - {name: b, deps: [a], gate: 'true'}\n"
        "  - {name: c, deps: [d]}\n  - {name: d, deps: [c]}\n"
    )
    before = applied.json("item", "show")
    r = applied("plan", "apply", "bad.yaml", "--item", "1")
    assert r.code == 2
    assert (
        "bad.yaml:3: milestone 'b' depends on 'a', a milestone of work item 1 that this plan removes"
        " (keep it, or drop the dep)" in r.err
    )
    assert "milestone deps form a cycle: c -> d -> c" in r.err
    assert applied.json("item", "show") == before


def test_cli_bad_revision_names_running_attempts_too(applied: CLI, workspace: Path) -> None:
    applied("start", "c", check=True)  # c runs; the plan removes it and has a cycle
    (workspace / "bad.yaml").write_text(
        "objective: refactor\nmilestones:\n  - {name: a, gate: 'true'}\n  - {name: b, deps: [a], gate: 'true'}\n"
        "  - {name: x, deps: [y]}\n  - {name: y, deps: [x]}\n"
    )
    before = applied.json("item", "show")
    r = applied("plan", "apply", "bad.yaml", "--item", "1")
    assert r.code == 2, r.err
    assert "milestone deps form a cycle" in r.err and "cannot remove 'c' runs attempt 1" in r.err, r.err
    assert "wait until it ends" in r.err
    assert applied.json("item", "show") == before


def test_cli_remove_of_a_running_milestone_names_its_attempt(applied: CLI) -> None:
    applied("start", "c", check=True)
    before = applied.json("item", "show")
    r = applied("remove", "c")
    assert r.code == 2, r.err
    assert "cannot remove 'c' runs attempt 1" in r.err and "wait until it ends (or stop its drive)" in r.err, r.err
    assert applied.json("item", "show") == before
    applied("done", "c", check=True)
    applied("remove", "c", check=True)
    removed = [e for e in applied.json("history")["events"] if e["action"] == "remove"]
    assert [(e["milestone"], e["reason"]) for e in removed] == [("c", "1 run kept as work refs")]


def test_cli_dry_run_says_what_changed_in_a_long_gate(cli: CLI, workspace: Path) -> None:
    """A gate too long for its line (a scaffold's test files, one unit each)
    shows what changed: the files added to its units, or the command it
    became; not two cut lines that read the same (the new-user trial)."""
    run = "{name: pytest, run: 'python3 -m pytest -q {file}', each: [tests/test_first_one.py, tests/test_second.py]}"
    (workspace / "plan.yaml").write_text(
        f"objective: units\nmilestones:\n  - {{name: a, gate: [{run}]}}\n  - {{name: b, gate: [{run}]}}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    more = run.replace("tests/test_second.py]", "tests/test_second.py, tests/test_third.py]")
    tight = "python3 -m pytest -q -W error -p no:cacheprovider tests/test_first_one.py tests/test_second.py"
    (workspace / "new.yaml").write_text(
        f"objective: units\nmilestones:\n  - {{name: a, gate: [{more}]}}\n  - {{name: b, gate: '{tight}'}}\n"
    )
    r = cli("plan", "apply", "new.yaml", "--item", "1", "--dry-run")
    assert r.code == 0, r.err
    assert "  ~ a; proven again:\n      gate: pytest each: + tests/test_third.py\n" in r.out, r.out
    said = f"      gate: python3 -m pytest -q {{file}} (each of 2 files) -> {tight}\n"
    assert f"  ~ b; proven again:\n{said}" in r.out, r.out


def test_cli_edit_of_a_gate_of_units_keeps_its_files(store_cli: CLI, workspace: Path) -> None:
    """The new-user trial: a scaffold's gate (a command run once per test
    file) tightened by `edit --gate '... {file}'` stays a gate of units with
    its files; it became one command with a literal {file} in it."""
    cli = store_cli
    units = "[{name: pytest, run: 'python3 -m pytest -q {file}', each: [t_one.py, t_two.py]}]"
    (workspace / "plan.yaml").write_text(
        f"objective: units\nmilestones:\n  - {{name: a, gate: {units}}}\n  - {{name: b, gate: 'true'}}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    r = cli("edit", "a", "--gate", "python3 -m pytest -q -W error {file}")
    assert r.code == 0, r.err
    assert "      gate: pytest run: python3 -m pytest -q {file} -> python3 -m pytest -q -W error {file}" in r.out
    a = cli.json("plan", "export")["milestones"][0]
    assert a["gate"] == [
        {"name": "pytest", "run": "python3 -m pytest -q -W error {file}", "each": ["t_one.py", "t_two.py"]}
    ]
    before = cli.json("item", "show")
    r = cli("edit", "b", "--gate", "pytest {file}")
    assert r.code == 2 and "the gate 'pytest {file}' names {file}, filled from a gate command's each: files" in r.err
    assert "milestone 'b''s gate has no command with each: files" in r.err, r.err
    assert cli.json("item", "show") == before


def test_cli_edit(applied: CLI) -> None:
    r = applied("edit", "b", "--gate", "test 3 = 3", "--retries", "4")
    assert r.code == 0, r.err
    assert "  ~ b; proven again:" in r.out and "retries: 2 -> 4" in r.out
    shown = {m["name"]: m for m in applied.json("item", "show")["milestones"]}
    assert shown["b"]["status"] == "pending" and shown["b"]["retries"] == 4
    r = applied("edit", "b", "--deps", "zz")
    assert r.code == 2 and "milestone 'b' depends on unknown milestone 'zz'" in r.err
    r = applied("edit", "nope", "--retries", "1")
    assert r.code == 2 and "no milestone 'nope'" in r.err


# -- the MCP tools ----------------------------------------------------------------------


def test_the_tools_revise_edit_and_remove_within_their_list(proven: Service) -> None:
    from milepost.agent.tools import TOOLS, call_tool

    assert list(TOOLS) == ["work_item", "milestone", "wait", "graph", "drive"]  # no new tool
    seen = call_tool(proven, "work_item", {"action": "revise", "id": 1, "plan": REVISED, "dry_run": True})
    assert seen["revised"]["dry_run"] and seen["revised"]["added"] == ["d"]
    assert proven.get_item(1).revision == 7
    done = call_tool(proven, "work_item", {"action": "revise", "id": 1, "plan": REVISED, "expect_revision": 7})
    assert done["revised"]["revision"] == 8 and "to re-prove: b" in done["revised"]["summary"]
    edited = call_tool(proven, "milestone", {"action": "edit", "name": "d", "gate": "test 4 = 4", "retries": 0})
    assert edited["revised"]["summary"] == "changed d (gate, retries)"
    removed = call_tool(proven, "milestone", {"action": "remove", "name": "d", "expect_revision": 9})
    assert removed["revision"] == 10 and [m.name for m in proven.get_item(1).milestones] == ["a", "b"]


# -- scaffold again ---------------------------------------------------------------------


def test_a_scaffold_again_after_a_new_module_runs_only_its_gate(store_cli: CLI, workspace: Path) -> None:
    cli = store_cli
    from tests.test_scaffold import make_package

    make_package(workspace, "pk", {"": "", "a": "X = 1\n", "b": "from pk import a\n"})
    cli("plan", "scaffold", "pk", "--apply", check=True)
    for name in ("pk", "pk.a", "pk.b"):
        cli("start", name, check=True)
        cli("done", name, check=True)
    cli("edit", "pk.b", "--acceptance", "b reads only a's interface", check=True)  # by hand
    make_package(workspace, "pk", {"c": "Y = 2\n"})  # a new module nothing imports
    data = cli.json("plan", "scaffold", "pk", "--item", "1", "--apply")
    assert data["kept_edits"] == {"pk.b": ["acceptance"]}
    revised = data["revision"]
    assert (revised["added"], revised["removed"], revised["stale"]) == (["pk.c"], [], {})
    assert [e["name"] for e in revised["changed"]] == []  # the hand edit kept: pk.b not changed back
    assert cli.json("drive", "--dry-run")["order"] == ["pk.c"]  # only the new module's gate would run
    cli("start", "pk.c", check=True)
    cli("done", "pk.c", check=True)
    shown = {m["name"]: m for m in cli.json("item", "show")["milestones"]}
    assert {n: (m["status"], m["attempts"]) for n, m in shown.items()} == {
        "pk": ("done", 1),
        "pk.a": ("done", 1),
        "pk.b": ("done", 1),
        "pk.c": ("done", 1),
    }
    assert shown["pk.b"]["acceptance"] == "b reads only a's interface"
    # The module deleted: its milestone goes (the scaffold wrote it), its run stays a work ref.
    (workspace / "src" / "pk" / "c.py").unlink()
    data = cli.json("plan", "scaffold", "pk", "--item", "1", "--apply")
    assert data["revision"]["removed"] == ["pk.c"] and data["revision"]["kept_evidence"] == {"pk.c": 1}
    assert any(r["reason"].startswith("pk.c attempt 1") for r in cli.json("ref", "list")["work_refs"])


def test_a_scaffold_again_is_a_conflict_when_the_item_changed_after_it_was_read(
    store_cli: CLI, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write between the scaffold's read of the item and its apply (here:
    another process's edit, made while the merge runs) is a conflict, not
    merged over and lost; the scaffold applies once run again."""
    cli = store_cli
    from milepost.scaffold import rescaffold
    from tests.conftest import CLI as RealCLI
    from tests.test_scaffold import make_package

    make_package(workspace, "pk", {"": "", "a": "X = 1\n", "b": "from pk import a\n"})
    cli("plan", "scaffold", "pk", "--apply", check=True)
    make_package(workspace, "pk", {"c": "Y = 2\n"})
    read_at = cli.json("item", "show")["revision"]
    merge = rescaffold.merge

    def merge_then_someone_edits(*args: object, **kw: object) -> rescaffold.Merged:
        merged = merge(*args, **kw)  # type: ignore[arg-type]
        RealCLI(workspace, cli.extra)("edit", "pk.a", "--acceptance", "a keeps X", check=True)
        return merged

    monkeypatch.setattr(rescaffold, "merge", merge_then_someone_edits)
    r = cli("plan", "scaffold", "pk", "--item", "1", "--apply")
    assert r.code == 2 and f"is at revision {read_at + 1}, not {read_at}" in r.err, r.err
    shown = {m["name"]: m for m in cli.json("item", "show")["milestones"]}
    assert set(shown) == {"pk", "pk.a", "pk.b"} and shown["pk.a"]["acceptance"] == "a keeps X"  # nothing lost
    monkeypatch.setattr(rescaffold, "merge", merge)
    data = cli.json("plan", "scaffold", "pk", "--item", "1", "--apply")
    assert data["revision"]["added"] == ["pk.c"] and data["kept_edits"] == {"pk.a": ["acceptance"]}


def test_a_scaffold_base_not_kept_leaves_the_revision_applied(
    cli: CLI, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_scaffold import make_package

    make_package(workspace, "pk", {"": "", "a": "X = 1\n"})
    cli("plan", "scaffold", "pk", "--apply", check=True)
    make_package(workspace, "pk", {"c": "Y = 2\n"})

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Service, "keep_scaffold", full)
    r = cli("plan", "scaffold", "pk", "--item", "1", "--apply")
    assert r.code == 0, r.err
    assert "note: the scaffold was applied, but its base for the next `plan scaffold --item 1` was not kept" in r.err
    assert "pk.c" in {m["name"] for m in cli.json("item", "show")["milestones"]}


def test_a_scaffold_of_part_of_a_package_is_not_merged_with_an_item(store_cli: CLI, workspace: Path) -> None:
    cli = store_cli
    r = cli("plan", "scaffold", "pk", "--item", "1", "--affected-by", "HEAD")
    assert r.code == 2 and "--affected-by writes the milestones a change touched, not the whole plan" in r.err
