"""A doer's escapes, caught without Prefect (in `make test-fast`): the doer's
own environment carries no store and no credential, and a protected path it
committed itself is refused before any gate runs. The attempt is made by the
drive's own code (flows/doer_attempts.py, which imports no Prefect) on a real
git repository and a real store; the Prefect drive tests (tests/flows/
test_doers.py) prove the same through whole drives."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from milepost.flows.doer_attempts import Doing, DoStart
from milepost.gates.outcome import GateResult, Outcome
from milepost.planfile import parse_plan
from milepost.results import Claim
from milepost.service import Service


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def attempt(service: Service, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Doing, DoStart, Claim]:
    """The first attempt of a doer milestone of an item whose doers may not touch tests/, started."""
    monkeypatch.setenv("MILEPOST_DB", "sqlite:////srv/the-store.db")  # (no credentials: the name alone must do)
    monkeypatch.setenv("STORE_MIRROR", "postgresql+psycopg://milepost:hunter2@db/milepost")
    monkeypatch.setenv("MIRROR_URL", "https://user:s3cret@example.invalid/simple")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    monkeypatch.setenv("KUBECONFIG", "/root/.kube/config")
    (workspace / "src").mkdir()
    (workspace / "tests").mkdir()
    (workspace / "src" / "a.py").write_text("A = 1\n")
    (workspace / "tests" / "test_a.py").write_text("from src.a import A\n\ndef test_a():\n    assert A == 1\n")
    (workspace / ".gitignore").write_text(".milepost/\n")
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "add", "-A")
    git(workspace, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    plan = "objective: o\ndoer: {protect: ['tests/**']}\nmilestones:\n  - {name: a, do: 'true', gate: 'true'}\n"
    item = service.apply_plan(parse_plan(plan)).id
    claim = service.drive_session(item, "test-driver").claim_next()
    assert claim is not None
    doing = Doing.open(service, item, 1)
    start = doing.start(claim)
    assert isinstance(start, DoStart)
    return doing, start, claim


def test_a_doers_environment_carries_no_store_and_no_credential(attempt: tuple[Doing, DoStart, Claim]) -> None:
    _, start, _ = attempt
    assert "MILEPOST_DB" not in start.env and "MIRROR_URL" not in start.env and "STORE_MIRROR" not in start.env
    assert not any("the-store.db" in v for v in start.env.values())
    assert "SSH_AUTH_SOCK" not in start.env and "KUBECONFIG" not in start.env
    assert not any("hunter2" in v or "s3cret" in v for v in start.env.values())
    assert start.env["MILEPOST_AGENT"] == "doer" and start.env["MILEPOST_MILESTONE"] == "a"


def test_the_judges_gate_starts_from_the_doers_scrubbed_environment(attempt: tuple[Doing, DoStart, Claim]) -> None:
    """The environment the judge's set-up and gate start from (the drive's
    loop gives it whole: inherit_env False) carries no more than the doer's."""
    doing, _, claim = attempt
    judged = doing.judge_order(claim, [])
    assert judged is not None
    env = judged.env
    assert "MILEPOST_DB" not in env and "MIRROR_URL" not in env and "STORE_MIRROR" not in env
    assert not any("the-store.db" in v for v in env.values())
    assert "SSH_AUTH_SOCK" not in env and "KUBECONFIG" not in env
    assert not any("hunter2" in v or "s3cret" in v for v in env.values())
    assert env["MILEPOST_AGENT"] == "doer" and "PATH" in env


def test_a_protected_path_the_doer_committed_itself_is_refused_before_any_gate(
    attempt: tuple[Doing, DoStart, Claim], workspace: Path
) -> None:
    doing, start, claim = attempt
    wt = start.cwd
    assert not wt.resolve().is_relative_to(workspace.resolve())  # (worktrees live outside the workspace)
    (wt / "src" / "a.py").write_text("A = 2\n")
    (wt / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")  # the judge's own test, loosened
    git(wt, "add", "-A")
    git(wt, "-c", "user.name=doer", "-c", "user.email=d@d", "commit", "-qm", "my work")
    now = datetime.now(UTC)
    ran = GateResult(outcome=Outcome.PASSED, reason="exit 0", exit_code=0, started_at=now, finished_at=now)
    outcome, run = doing.after_do(claim, ran)
    assert isinstance(outcome, GateResult) and outcome.outcome is Outcome.FAILED, outcome
    assert "protected paths (tests/test_a.py)" in outcome.reason and run.outcome == "refused"
    assert "assert A == 1" in (workspace / "tests" / "test_a.py").read_text()
    assert git(workspace, "log", "--format=%s", "main").splitlines() == ["start"]  # nothing merged


def test_an_attempt_the_drive_ends_before_its_merge_is_never_done(attempt: tuple[Doing, DoStart, Claim]) -> None:
    """A drive that stops, or loses the store or the Prefect API, with a doer's
    task or its gate ended: the doer's own exit 0 is no verdict, and a passed
    gate whose work was never merged is interrupted (the next attempt's gate
    judges the branch again, then merges it); a failed gate stands."""
    doing, _, claim = attempt
    now = datetime.now(UTC)
    passed = GateResult(outcome=Outcome.PASSED, reason="exit 0", exit_code=0, started_at=now, finished_at=now)
    failed = passed.model_copy(update={"outcome": Outcome.FAILED, "reason": "exit 1", "exit_code": 1})
    doer = doing.ended_without_merge(claim, passed, "the drive stopped", doer_task=True)
    assert doer.outcome is Outcome.INTERRUPTED and doer.reason.endswith("before its gate ran"), doer
    gate = doing.ended_without_merge(claim, passed, "the drive ended (prefect_unreachable)", doer_task=False)
    assert gate.outcome is Outcome.INTERRUPTED and "after its gate passed, before its merge" in gate.reason
    assert doing.ended_without_merge(claim, failed, "the drive stopped", doer_task=False) == failed


def test_only_the_commit_its_gate_judged_is_merged(attempt: tuple[Doing, DoStart, Claim], workspace: Path) -> None:
    """A doer process that outlives its task (or anyone) committing on the
    branch after the judge checked it out: the merge is refused, not made of
    unjudged commits."""
    doing, start, claim = attempt
    (start.cwd / "src" / "a.py").write_text("A = 2\n")
    now = datetime.now(UTC)
    ran = GateResult(outcome=Outcome.PASSED, reason="exit 0", exit_code=0, started_at=now, finished_at=now)
    outcome, _ = doing.after_do(claim, ran)
    assert outcome == start.cwd  # its change committed: its gate runs next
    assert doing.judge_order(claim, []) is not None  # the judge takes the branch's tip
    (start.cwd / "src" / "a.py").write_text("A = 'never judged'\n")
    git(start.cwd, "-c", "user.name=doer", "-c", "user.email=d@d", "commit", "-qam", "after the judge")
    merged = doing.after_gate(claim, ran)
    assert merged.outcome is Outcome.FAILED and "moved after its gate judged" in merged.reason, merged
    assert git(workspace, "log", "--format=%s", "main").splitlines() == ["start"]  # nothing merged
