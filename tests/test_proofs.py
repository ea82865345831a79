"""Proofs bound to inputs, through the service, on a real SQLite file and a
real PostgreSQL server: the stale view and its reasons, ``verify``, the gate
cache, no blind retries, and re-proofs that are interrupted or reclaimed.
Every gate appends its milestone's name to a ledger outside the workspace,
so the tests count real executions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from milepost.errors import NotFoundError, TransitionError
from milepost.gates.outcome import Outcome
from milepost.graph import MilestoneStatus
from milepost.planfile import parse_plan
from milepost.results import Claim
from milepost.service import Service, interrupted_result
from milepost.service._rows import MILESTONES
from milepost.service._tx import Tx, write
from milepost.service.leases import take_lease

S = MilestoneStatus


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"  # outside the workspace: never an input


def runs_of(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def plan(ledger: Path, objective: str = "proofs") -> str:
    """A leaf module, a module importing it, and a final step without inputs."""
    log = f"echo $MILEPOST_MILESTONE >> {ledger}"
    return f"""
objective: {objective}
milestones:
  - name: leaf
    gate: "{log} && grep -q ok src/leaf.py"
    inputs: [src/leaf.py]
  - name: user
    deps: [leaf]
    gate: "{log} && grep -q ok src/user.py"
    inputs: [src/user.py, src/leaf.py]
  - name: ship
    deps: [user]
    gate: "{log}"
"""


def code(ws: Path, **files: str) -> None:
    (ws / "src").mkdir(exist_ok=True)
    for name, text in files.items():
        (ws / "src" / f"{name}.py").write_text(text)


def finish(svc: Service, *names: str, item: int | None = None) -> None:
    for n in names:
        svc.start(n, item=item)
        assert svc.done(n, item=item).passed


@pytest.fixture
def done_item(any_service: Service, workspace: Path, ledger: Path) -> Service:
    code(workspace, leaf="ok = 1\n", user="ok = 2\n")
    any_service.apply_plan(parse_plan(plan(ledger)))
    finish(any_service, "leaf", "user", "ship")
    assert runs_of(ledger) == ["leaf", "user", "ship"]
    return any_service


def views(svc: Service) -> dict[str, str]:
    return {v.name: v.view for v in svc.milestone_views()[1]}


def test_editing_a_leaf_makes_it_and_its_importers_stale_and_nothing_else(done_item: Service, workspace: Path) -> None:
    svc = done_item
    assert views(svc) == {"leaf": "done", "user": "done", "ship": "done"}
    (workspace / "src/leaf.py").touch()  # content decides
    assert views(svc) == {"leaf": "done", "user": "done", "ship": "done"}
    code(workspace, leaf="ok = 1  # edited\n")
    _, vs = svc.milestone_views()
    by = {v.name: v for v in vs}
    assert {n: v.view for n, v in by.items()} == {"leaf": "stale", "user": "stale", "ship": "done"}
    assert by["leaf"].stale is not None and by["leaf"].stale.changed == ["src/leaf.py"]
    assert by["leaf"].stale.reason == "changed since proven: src/leaf.py"
    assert by["ship"].stale is None
    # The stored status is unchanged: stale is a view.
    assert [m.status for m in svc.get_item().milestones] == [S.DONE, S.DONE, S.DONE]
    # The graph and the pictures show it too.
    _, g = svc.graph()
    assert g.stale() == ["leaf", "user"]


def test_changed_paths_are_listed_first_few_with_a_count(done_item: Service, workspace: Path, ledger: Path) -> None:
    svc = done_item
    globbed = plan(ledger, "globbed").replace("inputs: [src/leaf.py]", "inputs: ['src/**']")
    other = svc.apply_plan(parse_plan(globbed)).id
    finish(svc, "leaf", item=other)
    for i in range(7):
        (workspace / "src" / f"extra{i}.py").write_text("x\n")
    by = {v.name: v for v in svc.milestone_views(other)[1]}
    stale = by["leaf"].stale
    assert stale is not None and stale.changed_count == 7
    assert stale.changed == [f"src/extra{i}.py" for i in range(5)]
    assert stale.reason == "changed since proven: src/extra0.py, src/extra1.py, src/extra2.py and 4 more"
    assert {v.name: v.view for v in svc.milestone_views(1)[1]}["leaf"] == "done"  # its one file did not change


def test_verify_reruns_exactly_the_stale_ones_and_nothing_when_nothing_is_stale(
    done_item: Service, workspace: Path, ledger: Path
) -> None:
    svc = done_item
    r = svc.verify()
    assert r.ok and r.verified == [] and runs_of(ledger) == ["leaf", "user", "ship"]
    assert (r.unchanged, r.unchecked) == (["leaf", "user"], ["ship"])
    assert r.message == "nothing to re-prove: 2 proven milestones unchanged since proven"
    code(workspace, leaf="ok = 1  # edited\n")
    r = svc.verify()
    assert r.ok and [(v.milestone, v.outcome) for v in r.verified] == [("leaf", "passed"), ("user", "passed")]
    assert r.verified[0].stale is not None and r.verified[0].stale.changed == ["src/leaf.py"]
    assert runs_of(ledger)[3:] == ["leaf", "user"]
    # A passing re-proof spends no budget; its runs are attempts like any other.
    item = svc.get_item()
    assert [(m.name, m.status, m.attempts) for m in item.milestones] == [
        ("leaf", S.DONE, 1),
        ("user", S.DONE, 1),
        ("ship", S.DONE, 1),
    ]
    assert [x.attempt for x in svc.runs("leaf")] == [1, 2]
    assert views(svc) == {"leaf": "done", "user": "done", "ship": "done"}
    # --all re-runs every done gate, stale or not; never from the cache.
    r = svc.verify(all_=True)
    assert r.ok and [v.milestone for v in r.verified] == ["leaf", "user", "ship"]
    assert all(v.outcome == "passed" for v in r.verified) and runs_of(ledger)[5:] == ["leaf", "user", "ship"]
    # Named: only those.
    code(workspace, leaf="ok = 1  # again\n")
    r = svc.verify(["user"])
    assert r.ok and [v.milestone for v in r.verified] == ["user"] and views(svc)["leaf"] == "stale"


def test_a_failing_reproof_is_the_second_verification_and_a_fix_is_proven_by_verify_alone(
    done_item: Service, workspace: Path, ledger: Path
) -> None:
    svc = done_item
    code(workspace, leaf="bad = 1\n")
    r = svc.verify()
    assert not r.ok
    [leaf, user, ship] = r.verified
    assert (leaf.milestone, leaf.outcome, leaf.status) == ("leaf", "failed", S.NEEDS_FIX)
    assert leaf.reopened == ["user", "ship"]
    assert (user.outcome, user.status, user.reason) == (None, S.PENDING, "waits behind leaf (needs_fix)")
    assert (ship.outcome, ship.reason) == (None, "waits behind user (pending)")
    assert runs_of(ledger)[3:] == ["leaf"]  # one execution per change
    item = svc.get_item()
    assert [(m.name, m.status, m.attempts) for m in item.milestones] == [
        ("leaf", S.NEEDS_FIX, 1),
        ("user", S.PENDING, 0),
        ("ship", S.PENDING, 0),
    ]
    # (the failing re-proof is the first attempt of a fresh budget: the work is open again)
    assert views(svc) == {"leaf": "needs_fix", "user": "blocked", "ship": "blocked"}
    # Its inputs did not change since it failed: not retried blindly, and CI stays red.
    by = {v.name: v for v in svc.milestone_views()[1]}
    assert by["leaf"].waiting_for_change == "failed at attempt 2; inputs unchanged since: waiting for a change"
    again = svc.verify()
    assert not again.ok and runs_of(ledger)[4:] == []
    assert again.verified[0].reason == by["leaf"].waiting_for_change
    # Fixed: verify alone proves it and what waited behind it.
    code(workspace, leaf="ok = 1  # fixed\n")
    assert {v.name: v.waiting_for_change for v in svc.milestone_views()[1]}["leaf"] is None
    fixed = svc.verify()
    assert fixed.ok, fixed.message
    assert [(v.milestone, v.outcome) for v in fixed.verified] == [(n, "passed") for n in ("leaf", "user", "ship")]
    assert runs_of(ledger)[4:] == ["leaf", "user", "ship"]


def test_verify_refuses_what_it_cannot_verify_before_running_anything(done_item: Service, ledger: Path) -> None:
    svc = done_item
    with pytest.raises(NotFoundError, match=r"no milestone 'nope'"):
        svc.verify(["nope"])
    fresh = svc.apply_plan(parse_plan(plan(ledger, "never run"))).id
    with pytest.raises(TransitionError, match=r"cannot verify 'leaf': it was never proven \(status ready\)"):
        svc.verify(["leaf"], item=fresh)
    assert runs_of(ledger) == ["leaf", "user", "ship"]
    # Nothing proven yet: nothing to verify, and that is not a failure.
    r = svc.verify(item=fresh)
    assert r.ok and r.verified == []


def test_a_second_item_on_unchanged_code_runs_no_gate(done_item: Service, workspace: Path, ledger: Path) -> None:
    svc = done_item
    other = svc.apply_plan(parse_plan(plan(ledger, "the same again"))).id
    svc.start("leaf", item=other)
    r = svc.done("leaf", item=other)
    assert r.passed and r.gate_run is not None and r.gate_run.outcome is Outcome.CACHED
    assert r.gate_run.cached_from is not None and r.gate_run.cached_from.milestone == "leaf"
    assert r.milestone.attempts == 0  # no budget spent
    assert "cached: passed as item 1 'leaf' attempt 1" in r.gate_run.reason
    finish(svc, "user", item=other)
    svc.start("ship", item=other)
    svc.done("ship", item=other)  # no inputs: never cached
    assert runs_of(ledger)[3:] == ["ship"]
    [cached] = svc.runs("leaf", other)
    assert cached.outcome is Outcome.CACHED and cached.cached_from is not None
    # A cached proof is a proof: edit the leaf and it is stale in the other item too.
    code(workspace, leaf="ok = 1  # edited\n")
    assert {v.name: v.view for v in svc.milestone_views(other)[1]}["leaf"] == "stale"
    assert {v.name: v.view for v in svc.milestone_views(1)[1]}["leaf"] == "stale"


def test_no_cache_and_cache_false_run_the_gate(done_item: Service, ledger: Path) -> None:
    svc = done_item
    other = svc.apply_plan(parse_plan(plan(ledger, "again"))).id
    svc.start("leaf", item=other)
    r = svc.done("leaf", item=other, use_cache=False)
    assert r.gate_run is not None and r.gate_run.outcome is Outcome.PASSED
    off = plan(ledger, "cache off").replace("inputs: [src/leaf.py]", "inputs: [src/leaf.py]\n    cache: false")
    third = svc.apply_plan(parse_plan(off)).id
    svc.start("leaf", item=third)
    assert svc.done("leaf", item=third).gate_run.outcome is Outcome.PASSED  # type: ignore[union-attr]
    assert runs_of(ledger)[3:] == ["leaf", "leaf"]


def reproof_claim(svc: Service, item: int, owner: str) -> Claim:
    """Claim the stale milestone ``leaf`` for a re-proof by ``owner``, as a drive does."""

    def claim(tx: Tx) -> Claim:
        from milepost.graph import Action
        from milepost.graph.steps import act

        pk, m = tx.find("leaf")
        change = act(m, Action.REPROVE)
        tx.save(pk, [change])
        return take_lease(tx, pk, change.after, owner, reproof=True)

    return write(svc.ctx, item, claim)


def test_an_interrupted_reproof_leaves_the_milestone_done_and_still_stale(done_item: Service, workspace: Path) -> None:
    svc = done_item
    code(workspace, leaf="ok = 1  # edited\n")
    item = svc.get_item().id

    c = reproof_claim(svc, item, "test-owner")
    assert c.reproof and svc.get_item().milestones[0].status is S.IN_PROGRESS
    r = svc.record(c, interrupted_result(c, datetime.now(UTC)))
    assert r.milestone.status is S.DONE and r.milestone.attempts == 1
    assert views(svc)["leaf"] == "stale"


def test_an_expired_reproof_lease_is_reclaimed_as_done(done_item: Service, workspace: Path) -> None:
    svc = done_item
    code(workspace, leaf="ok = 1  # edited\n")
    item = svc.get_item().id

    c = reproof_claim(svc, item, "dead-driver")
    with svc.store.write() as conn:  # its driver died long ago
        conn.execute(
            update(MILESTONES)
            .where(MILESTONES.c.id == c.pk)
            .values(lease_expires=datetime.now(UTC) - timedelta(minutes=5), lease_info={"reproof": True})
        )
    [r] = svc.reclaim_expired(item, "reclaimer")
    assert r.milestone.status is S.DONE and r.gate_run is not None and r.gate_run.outcome is Outcome.INTERRUPTED
    assert views(svc)["leaf"] == "stale"


def test_a_proof_taken_on_an_unreadable_file_reads_as_stale(done_item: Service, workspace: Path, ledger: Path) -> None:
    import os

    svc = done_item
    os.mkfifo(workspace / "src/extra.py")
    extra = plan(ledger, "globbed").replace("inputs: [src/leaf.py]", "inputs: ['src/*.py']")
    other = svc.apply_plan(parse_plan(extra)).id
    svc.start("leaf", item=other)
    r = svc.done("leaf", item=other)
    assert r.passed and r.gate_run is not None and r.gate_run.fingerprint is None
    by = {v.name: v for v in svc.milestone_views(other)[1]}
    assert by["leaf"].view == "stale" and by["leaf"].stale is not None
    assert "unreadable: src/extra.py (not a regular file)" in by["leaf"].stale.reason


def test_a_stale_item_cannot_be_completed_until_it_is_proven_again(done_item: Service, workspace: Path) -> None:
    from milepost.errors import TransitionError as Refused

    svc = done_item
    code(workspace, leaf="ok = 1  # edited\n")
    with pytest.raises(Refused, match=r"cannot complete work item 1: milestones stale .*leaf \(changed since proven"):
        svc.complete("all done")
    assert svc.get_item().state == "open"
    assert svc.verify().ok
    assert svc.complete("all done").item.state == "completed"


def test_a_gate_that_rewrites_its_own_inputs_leaves_its_milestone_stale_and_says_so(
    any_service: Service, workspace: Path
) -> None:
    svc = any_service
    code(workspace, leaf="ok = 1\n")
    gate = 'echo "# formatted" >> src/leaf.py'
    fmt = f"objective: fmt\nmilestones:\n  - {{name: fmt, gate: '{gate}', inputs: [src/leaf.py]}}\n"
    svc.apply_plan(parse_plan(fmt))
    svc.start("fmt")
    r = svc.done("fmt")
    assert r.passed and r.gate_run is not None and r.gate_run.rewrote == ["src/leaf.py"]
    [v] = svc.milestone_views()[1]
    assert v.view == "stale" and v.stale is not None
    assert v.stale.reason == "changed since proven: src/leaf.py; its own gate changes its inputs"


def test_readiness_says_when_every_milestone_is_done_but_some_are_stale(done_item: Service, workspace: Path) -> None:
    svc = done_item
    it, _ = svc.graph()
    assert it.readiness_state == "awaiting_report"
    code(workspace, leaf="ok = 1  # edited\n")
    it, _ = svc.graph()
    assert it.readiness == "runnable" and it.readiness_state == "stale"
    assert it.readiness_reason == "every milestone is done, but stale: leaf, user; re-prove them (verify)"
    assert svc.milestone_views()[0].readiness_state == "stale"
