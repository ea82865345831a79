"""The store on real databases: a SQLite file and a PostgreSQL server
(the ``any_service`` fixture runs each test on both)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import text, update

from milepost.errors import DatabaseUnreachableError, StaleRevisionError, StoreNotFoundError, TransitionError
from milepost.graph import Action, MilestoneStatus
from milepost.service import Service
from milepost.service._rows import ITEMS
from milepost.service._tx import Tx
from milepost.store import SCHEMA_HEAD, Store

S = MilestoneStatus


def test_migrations_bring_schema_to_head_and_match_the_tables(any_service: Service) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from milepost._schema import metadata

    assert any_service.store.schema_version() == SCHEMA_HEAD
    with any_service.store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": False}), metadata)
    assert diff == []


def test_reopen_keeps_everything(any_service: Service) -> None:
    svc = any_service
    it = svc.create_item("persist me")
    svc.add_milestone("a", gate="true")
    svc.add_milestone("b", ["a"], acceptance="b works")
    svc.start("a")
    r = svc.done("a")
    assert r.passed
    svc.close()
    again = Service(Store.open(svc.store.url, svc.store.home, svc.store.root))
    got = again.get_item(it.id)
    assert [(m.name, m.status, m.deps) for m in got.milestones] == [("a", S.DONE, []), ("b", S.PENDING, ["a"])]
    assert got.milestones[1].acceptance == "b works"
    assert got.revision == 5  # created at 1; add, add, start, gate result (the claim is a lease, not a change)
    assert [r.attempt for r in again.runs("a")] == [1]
    actions = [e["action"] for e in again.events()]
    assert actions == ["create", "add", "add", "start", "done"]
    again.close()


def test_every_write_bumps_revision_and_stale_is_refused(any_service: Service) -> None:
    svc = any_service
    it = svc.create_item("rev")
    r1 = svc.add_milestone("a")
    assert r1.revision == it.revision + 1
    with pytest.raises(StaleRevisionError, match=rf"work item {it.id} is at revision 2, not 1"):
        svc.add_milestone("b", expect_revision=1)
    assert [m.name for m in svc.get_item().milestones] == ["a"]
    svc.add_milestone("b", expect_revision=2)
    assert svc.get_item().revision == 3


def test_gate_runs_are_evidence(any_service: Service) -> None:
    svc = any_service
    svc.create_item("gates")
    svc.add_milestone("flaky", gate="echo try; exit 1", retries=1)
    svc.start("flaky")
    r = svc.done("flaky")
    assert not r.passed and r.milestone.status is S.NEEDS_FIX
    svc.start("flaky")
    r = svc.done("flaky")
    assert r.milestone.status is S.STUCK and r.milestone.attempts == 2
    runs = svc.runs("flaky")
    assert [(x.attempt, x.exit_code, x.reason) for x in runs] == [(1, 1, "exit 1"), (2, 1, "exit 1")]
    assert all("try" in x.tail and Path(x.log_path or "").is_file() for x in runs)
    assert runs[0].log_path != runs[1].log_path


def test_lost_cas_rolls_back_and_reruns(any_service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers lock the item first, so a second writer cannot slip in; the
    revision compare-and-swap stays as the guard. Make it fire: bump the
    revision inside the transaction after the item is read. The CAS finds 0
    rows, the whole transaction (the bump too) rolls back and the operation re-runs."""
    svc = any_service
    it = svc.create_item("race")
    svc.add_milestone("a")
    calls: list[int] = []
    original = Tx.check_revision

    def check_then_interfere(tx: Tx, expect: int | None) -> None:
        original(tx, expect)
        if not calls:
            tx.conn.execute(update(ITEMS).where(ITEMS.c.id == tx.id).values(revision=ITEMS.c.revision + 1))
        calls.append(tx.revision)

    monkeypatch.setattr(Tx, "check_revision", check_then_interfere)
    r = svc.start("a")
    assert calls == [2, 2]  # read twice: the first attempt was rolled back whole
    assert r.revision == 3 and svc.get_item(it.id).revision == 3
    assert [e["action"] for e in svc.events()].count("start") == 1


def test_threads_racing_one_start_exactly_one_wins(any_service: Service) -> None:
    svc = any_service
    svc.create_item("race")
    svc.add_milestone("a")
    item_id = svc.get_item().id
    results: list[str] = []
    barrier = threading.Barrier(6)

    def worker() -> None:
        other = Service(Store(svc.store.url, svc.store.home, svc.store.root))
        barrier.wait()
        try:
            other.start("a", item=item_id)
            results.append("won")
        except TransitionError:
            results.append("refused")
        finally:
            other.close()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["refused"] * 5 + ["won"]
    assert [e["action"] for e in svc.events()].count("start") == 1


def test_sqlite_pragmas(service: Service) -> None:
    with service.store.engine.connect() as c:
        assert c.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert c.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert c.execute(text("PRAGMA busy_timeout")).scalar() == 30000


def test_unreachable_database_masks_password(tmp_path: Path) -> None:
    url = "postgresql+psycopg://bob:s3cret-pw@127.0.0.1:1/nothing"
    with pytest.raises(
        DatabaseUnreachableError, match=r"cannot reach database postgresql\+psycopg://bob:\*\*\*@127.0.0.1:1/nothing"
    ) as e:
        Service.open(db=url, cwd=tmp_path)
    assert "s3cret" not in str(e.value)
    assert e.value.exit_code == 3


def test_missing_store(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match=r"no milepost store found in .* run `milepost init`"):
        Service.open(cwd=tmp_path)


def test_processes_racing_through_the_cli(tmp_path: Path) -> None:
    """Eight real processes start the same milestone at once on one SQLite file."""
    ws = tmp_path / "race"
    ws.mkdir()
    run = [sys.executable, "-m", "milepost"]
    subprocess.run([*run, "init"], cwd=ws, check=True, capture_output=True)
    subprocess.run([*run, "item", "create", "race"], cwd=ws, check=True, capture_output=True)
    subprocess.run([*run, "add", "a"], cwd=ws, check=True, capture_output=True)
    procs = [
        subprocess.Popen([*run, "start", "a"], cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(8)
    ]
    for p in procs:
        p.communicate(timeout=120)
    codes = sorted(p.returncode for p in procs)
    assert codes == [0] + [2] * 7


def test_actions_on_stored_graph(any_service: Service) -> None:
    svc = any_service
    svc.create_item("actions")
    svc.add_milestone("a")
    svc.add_milestone("b", ["a"])
    svc.act("a", Action.START)
    svc.act("a", Action.NEEDS_FIX, reason="found a bug")
    svc.act("a", Action.RESET, reason="operator")
    svc.act("b", Action.LOCK, reason="vendor")
    views = {v.name: v for v in svc.milestone_views()[1]}
    assert views["a"].view == "needs_fix" and views["b"].status is S.LOCKED
    assert svc.next().milestone.name == "a"  # type: ignore[union-attr]


def test_an_old_schema_is_migrated_on_open_and_keeps_its_data(tmp_path: Path) -> None:
    """A store made by the first schema (0001) opens with the current code:
    the migration runs on open and every row survives."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    db = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).resolve().parent.parent / "milepost" / "migrations"))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(
            text(
                "INSERT INTO work_items (id, agent, objective, state, plan_status, todo_list, defaults, revision,"
                " created_at, updated_at) VALUES (1, 'default', 'old', 'open', 'draft', '[]', '{}', 3,"
                " '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO milestones (id, item_id, seq, name, acceptance, gate, retries, review, status, attempts,"
                " created_at, updated_at) VALUES (1, 1, 1, 'legacy', 'works', '[]', 2, 0, 'pending', 0,"
                " '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            )
        )
    engine.dispose()
    svc = Service(Store.open(f"sqlite:///{db}", tmp_path, tmp_path))
    assert svc.store.schema_version() == SCHEMA_HEAD
    item = svc.get_item(1)
    assert item.objective == "old" and item.revision == 3
    assert [(m.name, m.acceptance, m.awaiting_review, m.retry_delay) for m in item.milestones] == [
        ("legacy", "works", False, None)
    ]
    # The connection the migration used goes back to the pool with foreign keys on again.
    with svc.store.engine.connect() as c:
        assert c.execute(text("PRAGMA foreign_keys")).scalar() == 1
    svc.close()


def test_concurrent_claims_never_hand_out_one_milestone_twice(any_service: Service) -> None:
    """Two drivers' claim loops on one item (SQLite: the write lock; PostgreSQL:
    the revision compare-and-swap): every milestone is claimed exactly once."""
    svc = any_service
    item = svc.create_item("claims").id
    for i in range(12):
        svc.add_milestone(f"m{i}")
    claimed: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(3)

    def driver(n: int) -> None:
        other = Service(Store(svc.store.url, svc.store.home, svc.store.root))
        barrier.wait()
        try:
            session = other.drive_session(item, f"driver-{n}")
            while (c := session.claim_next()) is not None:
                with lock:
                    claimed.append(c.milestone.name)
        finally:
            other.close()

    threads = [threading.Thread(target=driver, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(f"m{i}" for i in range(12))
    assert all(m.status is S.IN_PROGRESS for m in svc.get_item(item).milestones)


def test_a_passed_record_claims_the_next_gate_in_its_transaction(any_service: Service) -> None:
    """``DriveSession.record_and_claim_next`` (the drive, after a passed gate):
    the run stored, the milestone done and the next ready one leased, in one
    write (one revision, where record and claim made two); nothing ready:
    the record alone."""
    from datetime import UTC, datetime

    from milepost.gates.outcome import GateResult, Outcome

    svc = any_service
    item = svc.create_item("chain").id
    svc.add_milestone("a", gate="true")
    svc.add_milestone("b", ["a"], gate="true")
    session = svc.drive_session(item, "driver-1")

    def passed(log_path: str) -> GateResult:
        now = datetime.now(UTC)
        return GateResult(outcome=Outcome.PASSED, reason="exit 0", log_path=log_path, started_at=now, finished_at=now)

    a = session.claim_next()
    assert a is not None and a.milestone.name == "a"
    before = svc.get_item(item).revision
    done, b = session.record_and_claim_next(a, passed(a.log_path))
    assert done.passed and done.milestone.status is S.DONE
    assert b is not None and b.milestone.name == "b" and b.owner == "driver-1"
    got = svc.get_item(item)
    assert got.revision == before + 1
    assert {m.name: m.status for m in got.milestones} == {"a": S.DONE, "b": S.IN_PROGRESS}
    assert [r.outcome for r in svc.runs("a", item)] == [Outcome.PASSED]
    done, none = session.record_and_claim_next(b, passed(b.log_path))
    assert none is None and done.milestone.status is S.DONE
    assert all(m.status is S.DONE for m in svc.get_item(item).milestones)


def test_a_claim_never_takes_a_live_lease(any_service: Service) -> None:
    """A milestone sent back by hand while its gate runs keeps that driver's
    lease: no drive starts it again, neither another nor the one running it
    (its claim is refused, writes nothing, and the milestone is held for that
    drive, with the reason); the running driver's record then keeps its run
    as evidence, and the free lease can be taken."""
    from datetime import UTC, datetime

    from milepost.gates.outcome import GateResult, Outcome
    from milepost.graph.status import Action

    svc = any_service
    item = svc.create_item("one").id
    svc.add_milestone("a", gate="true")
    first = svc.drive_session(item, "driver-1")
    a = first.claim_next()
    assert a is not None
    svc.act("a", Action.NEEDS_FIX, reason="seen broken by hand", item=item)
    before = svc.get_item(item)
    for owner in ("driver-2", "driver-1"):
        session = first if owner == "driver-1" else svc.drive_session(item, owner)
        assert session.claim_next() is None
        assert session.busy["a"].startswith("cannot run the gate of 'a': it is already running (driver-1")
        after = svc.get_item(item)
        assert after.revision == before.revision and after.milestones[0].status is S.NEEDS_FIX
    now = datetime.now(UTC)
    done = first.record(
        a, GateResult(outcome=Outcome.PASSED, reason="exit 0", log_path=a.log_path, started_at=now, finished_at=now)
    )
    assert done.note is not None and "became needs_fix while its gate ran" in done.note
    assert [r.outcome for r in svc.runs("a", item)] == [Outcome.PASSED]
    again = svc.drive_session(item, "driver-3").claim_next()  # the lease is free now
    assert again is not None and again.owner == "driver-3" and again.attempt == 2


def test_a_plan_applies_as_it_reads_back(any_service: Service) -> None:
    """``plan apply`` returns the item from what it wrote (validated once,
    inserted in batches): the same item, field for field, as reading it back."""
    from milepost.planfile import parse_plan

    plan = parse_plan(
        "objective: as written\n"
        "plan_status: ready\n"
        "defaults: {retries: 1, timeout: 30, inputs: ['src/**']}\n"
        "milestones:\n"
        "  - {name: a, gate: 'true', acceptance: first}\n"
        "  - name: b\n"
        "    deps: [a]\n"
        "    gate:\n"
        "      - {name: one, run: 'echo 1', env: {X: '1'}, timeout: 5}\n"
        "      - {run: 'echo 2', cwd: sub}\n"
        "    review: true\n"
        "    retries: 3\n"
        "  - {name: c, deps: [a, b], hypothesis: true, fix: make fix, retry_delay: 2.5, flaky: true, cache: false}\n"
        "  - {name: d, deps: [c, a], inputs: [], gate: 'false', timeout: 600}\n"
    )
    made = any_service.apply_plan(plan)
    assert made.model_dump(mode="json") == any_service.get_item(made.id).model_dump(mode="json")
    assert [m.deps for m in made.milestones] == [[], ["a"], ["a", "b"], ["c", "a"]]
    # A plan built in code (not read from a file) is validated when applied.
    again = any_service.apply_plan(plan.model_copy(update={"objective": "again"}))
    assert (
        again.model_dump(mode="json")["milestones"]
        == any_service.get_item(again.id).model_dump(mode="json")["milestones"]
    )


def test_a_gate_commands_row_value_is_its_json_dump() -> None:
    from milepost.graph.models import GateCommand, Milestone
    from milepost.service._rows import MILESTONE_ROW_FIELDS, milestone_row

    gate = [GateCommand(name="a", run="true", cwd="src", env={"X": "1"}, timeout=3), GateCommand(run="false")]
    row = dict(zip(MILESTONE_ROW_FIELDS, milestone_row(Milestone(id=1, name="m", gate=gate)), strict=True))
    assert row["gate"] == [c.model_dump(mode="json") for c in gate]


def test_a_large_plan_is_written_in_file_order_with_its_deps(tmp_path: Path) -> None:
    from milepost.planfile import parse_plan

    lines = ["objective: many", "milestones:"]
    for i in range(3000):
        lines += [f"- name: m{i}", f"  gate: echo {i}"] + ([f"  deps: [m{i - 1}, m{i // 2}]"] if i else [])
    svc = Service(Store.open(f"sqlite:///{tmp_path / 'm.db'}", tmp_path, tmp_path, create=True), "t")
    item = svc.apply_plan(parse_plan("\n".join(lines) + "\n", "plan.yaml"))
    svc.close()
    again = Service(Store.open(f"sqlite:///{tmp_path / 'm.db'}", tmp_path, tmp_path), "t").get_item(item.id)
    assert [m.name for m in again.milestones] == [f"m{i}" for i in range(3000)]
    assert again.milestones[2999].deps == ["m2998", "m1499"]
    assert again.milestones[7].gate[0].run == "echo 7"


@pytest.mark.parametrize("dialect_name", ["sqlite", "postgresql"])
def test_many_rows_get_the_values_one_row_gets(dialect_name: str) -> None:
    """Prepared's row functions (one per fields and shared names, Boolean
    values looked up) make what the statement's own processors make of one
    row at a time, on both dialects' processors."""
    import datetime

    from sqlalchemy.dialects import sqlite
    from sqlalchemy.dialects.postgresql import psycopg

    from milepost.graph.models import GateCommand, Milestone
    from milepost.service import _rows as rows
    from milepost.service._prepared import _Compiled

    dialect = sqlite.dialect() if dialect_name == "sqlite" else psycopg.dialect()
    now = datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.UTC)
    ms = [
        Milestone(id=1, name="a", gate=[GateCommand(run="x", env={"K": "v"})], review=True, timeout=3),
        Milestone(id=2, name="b", deps=["a"], cache=False, flaky=True, inputs=["src/**"], retry_delay=0.5),
        Milestone(id=3, name="c", fix="make fix", acceptance="it works"),
    ]
    c = _Compiled(rows.ADD_MILESTONES.stmt, dialect)
    same = {"item_id": 7, "created_at": now, "updated_at": now}

    def plain(v: object) -> object:
        return getattr(v, "obj", v)  # psycopg's Json wrapper compares by identity

    for _ in range(2):  # the second call takes the row function made by the first
        many = list(c.args_many(rows.MILESTONE_ROW_FIELDS, [rows.milestone_row(m) for m in ms], same))
        for got, m in zip(many, ms, strict=True):
            one = c.args({**dict(zip(rows.MILESTONE_ROW_FIELDS, rows.milestone_row(m), strict=True)), **same})
            if isinstance(one, dict):
                assert isinstance(got, dict)
                assert {k: plain(v) for k, v in got.items()} == {k: plain(v) for k, v in one.items()}
            else:
                assert list(got) == list(one)
