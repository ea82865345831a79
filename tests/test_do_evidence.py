"""The do runs milepost keeps (milepost.service.do_evidence), read and
written through the service on a real store: what a resumed agent session's
report is charged."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

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
