"""The do runs milepost keeps (milepost.service.do_evidence), read and
written through the service on a real store: what a resumed agent session's
report is charged."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from milepost.gates.outcome import GateResult, Outcome
from milepost.planfile import parse_plan
from milepost.results import Claim
from milepost.service import Service
from milepost.service._find import milestone_pk
from milepost.service.do_evidence import do_run_of, do_runs, record_do_run


def _claim(service: Service, item: int, name: str, attempt: int, logs: Path) -> Claim:
    with service.ctx.store.read() as conn:
        pk = milestone_pk(conn, item, name)
    m = next(m for m in service.get_item(item).milestones if m.name == name)
    log = str(logs / f"{name}-{attempt}.log")
    return Claim(item=item, pk=pk, milestone=m, attempt=attempt, owner="t", log_path=log)


def _codex_ran(claim: Claim, thread: str, totals: list[tuple[int, int]]) -> None:
    """The do log of a ``codex exec --json`` run: its thread, then each turn's usage (the thread's total so far)."""
    events = [{"type": "thread.started", "thread_id": thread}]
    events += [{"type": "turn.completed", "usage": {"input_tokens": i, "output_tokens": o}} for i, o in totals]
    Path(claim.log_path.removesuffix(".log") + ".do.log").write_text("".join(json.dumps(e) + "\n" for e in events))


def _passed() -> GateResult:
    now = datetime.now(UTC)
    return GateResult(outcome=Outcome.PASSED, reason="exit 0", exit_code=0, started_at=now, finished_at=now)


def test_a_resumed_codex_thread_is_charged_only_what_it_grew_by(service: Service, tmp_path: Path) -> None:
    """Codex's turn.completed usage is its thread's running total: a retry that
    resumes the thread reports its earlier attempts' tokens again."""
    plan = "objective: o\nmilestones:\n  - {name: a, retries: 3, do: ./agent, gate: 'true'}\n"
    plan += "  - {name: b, do: ./agent, gate: 'true'}\n"
    item = service.apply_plan(parse_plan(plan)).id

    def run(name: str, attempt: int, thread: str, totals: list[tuple[int, int]]) -> int | None:
        claim = _claim(service, item, name, attempt, tmp_path)
        _codex_ran(claim, thread, totals)
        done = do_run_of(claim, _passed(), "codex-json", ctx=service.ctx, host="here")
        record_do_run(service.ctx, claim, done)
        return done.tokens

    assert run("a", 1, "th-1", [(1000, 10), (2000, 20)]) == 2020  # the last total, not the sum of the turns
    assert run("a", 2, "th-1", [(5000, 50)]) == 5050 - 2020  # resumed: only its growth
    assert run("a", 3, "th-1", [(5500, 60)]) == 5560 - 5050
    assert run("b", 1, "th-2", [(300, 3)]) == 303  # another thread: all of it
    assert run("a", 4, "th-1", [(400, 4)]) == 404  # a total below what was recorded: counted afresh
    assert [r.tokens for r in do_runs(service.ctx, "a", item)] == [2020, 3030, 510, 404]


def test_a_session_is_resumed_only_on_the_host_that_reported_it(
    service: Service, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a shared store a retry may run on another machine, whose agent
    cannot find a session kept on the first one's disk: it starts a new
    session there, and its do run says so."""
    from milepost.flows import doer_attempts
    from milepost.flows.doer_attempts import Doing, DoStart

    plan = "objective: o\ndoer: {isolate: none}\nmilestones:\n  - {name: a, retries: 5, do: ./agent, gate: 'true'}\n"
    item = service.apply_plan(parse_plan(plan)).id
    logs = workspace / "logs"
    logs.mkdir()
    doing = Doing.open(service, item, 1)

    def attempt(n: int, host: str, reports: str | None) -> tuple[DoStart, str]:
        """Attempt ``n`` on ``host`` (its doer reporting ``reports``): what its doer is given, its do run's reason."""
        monkeypatch.setattr(doer_attempts, "host_identity", lambda: {"host": host, "boot": "b"})
        claim = _claim(service, item, "a", n, logs)
        start = doing.start(claim)
        assert isinstance(start, DoStart)
        if reports is not None:
            result = {"type": "result", "session_id": reports, "total_cost_usd": 0.01}
            Path(start.log_path).write_text(json.dumps(result) + "\n")
        _, run = doing.after_do(claim, _passed())
        doing.forget(claim)
        return start, run.reason

    start, reason = attempt(1, "alpha", "s-1")
    assert "MILEPOST_DOER_SESSION" not in start.env and reason == "exit 0"
    start, reason = attempt(2, "alpha", None)  # the same host: resumed
    assert start.env["MILEPOST_DOER_SESSION"] == "s-1" and reason == "exit 0"
    start, reason = attempt(3, "beta", "s-2")  # another host: a new session, said in its do run
    assert "MILEPOST_DOER_SESSION" not in start.env
    assert reason == (
        "exit 0; a new agent session started: the milestone's session s-1 was reported on alpha, not on beta"
        " (an agent resumes only its own machine's sessions)"
    )
    start, _ = attempt(4, "beta", None)  # the session beta's doer reported: resumed on beta
    assert start.env["MILEPOST_DOER_SESSION"] == "s-2"
    start, reason = attempt(5, "alpha", None)
    assert "MILEPOST_DOER_SESSION" not in start.env and "s-2 was reported on beta, not on alpha" in reason


def test_the_items_prices_reach_its_doers_watch_and_its_do_run(service: Service, workspace: Path) -> None:
    """``doer.prices``: handed to the watch (MILEPOST_DO_PRICES, read by the gate
    task) and used for the do run of a doer stopped before its result line."""
    from milepost.flows.doer_attempts import Doing, DoStart
    from milepost.gates.prices import prices_from_env

    plan = "objective: o\ndoer: {isolate: none, prices: {claude-nova-9: {input: 2, output: 10}}}\n"
    plan += "milestones:\n  - {name: a, do: ./agent, gate: 'true'}\n"
    item = service.apply_plan(parse_plan(plan)).id
    (workspace / "logs").mkdir()
    doing = Doing.open(service, item, 1)
    claim = _claim(service, item, "a", 1, workspace / "logs")
    start = doing.start(claim)
    assert isinstance(start, DoStart)
    assert prices_from_env(start.env["MILEPOST_DO_PRICES"])["claude-nova-9"].output == 10.0
    usage = {"input_tokens": 0, "output_tokens": 20000}
    message = {"id": "m1", "role": "assistant", "model": "claude-nova-9-20270101", "content": [], "usage": usage}
    Path(start.log_path).write_text(json.dumps({"type": "assistant", "message": message, "session_id": "s"}) + "\n")
    _, run = doing.after_do(claim, _passed())
    assert run.cost_usd == 0.2 and run.usage_warning is not None and "estimate" in run.usage_warning


def test_a_doer_block_this_version_cannot_read_whole_still_gives_its_usage_form(service: Service) -> None:
    """A doer taken over after its driver died is read in the item's usage form; a stored doer block with a
    field this version refuses (written by another version) must not lose that form."""
    from sqlalchemy import update

    from milepost.service._rows import ITEMS
    from milepost.service.takeover import _item_doer

    item = service.create_item("doers").id
    with service.ctx.store.write() as conn:
        conn.execute(update(ITEMS).where(ITEMS.c.id == item).values(doer={"usage": "claude-json", "prices": 7}))
    assert _item_doer(service.ctx, item).usage == "claude-json"
