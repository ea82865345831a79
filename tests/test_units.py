"""Units of proof: a gate command with ``each:`` runs once per file, and each
run is kept under the digest of its command and its inputs, shared by every
gate that runs it. Real subprocess gates on a real package in a temporary git
work tree, through the service on a real SQLite file and a real PostgreSQL
server. Every unit appends its file to a ledger outside the workspace, so the
tests count real executions."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from milepost.errors import PlanFileError
from milepost.gates.command import run_gate
from milepost.gates.outcome import CachedFrom, Outcome
from milepost.gates.units import AheadJob, UnitBook
from milepost.graph.models import GateCommand
from milepost.planfile import parse_plan
from milepost.service import Service
from milepost.service.ahead import Ahead
from tests.conftest import wait_until


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


PACKAGE = {
    "src/shop/__init__.py": "",
    "src/shop/prices.py": "def price(x):\n    return x * 2\n",
    "src/shop/cart.py": "from shop.prices import price\n\ndef total(xs):\n    return sum(price(x) for x in xs)\n",
    "tests/test_prices.py": "from shop.prices import price\n\ndef test_price():\n    assert price(2) == 4\n",
    "tests/test_cart.py": "from shop.cart import total\n\ndef test_total():\n    assert total([1, 2]) == 6\n",
}


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "units.txt"


@pytest.fixture
def pkg(workspace: Path) -> Path:
    write(workspace, PACKAGE)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    return workspace


def ran(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def plan(ledger: Path, *, check: str = "grep -q def {file}", objective: str = "units") -> str:
    run = f"echo {{file}} >> {ledger} && {check}"
    return f"""
objective: {objective}
milestones:
  - name: prices
    gate:
      - {{name: tests, run: "{run}", each: [tests/test_prices.py]}}
    inputs: ["module:shop.prices", "module:tests/test_prices.py"]
  - name: cart
    deps: [prices]
    gate:
      - {{name: tests, run: "{run}", each: [tests/test_cart.py, tests/test_prices.py]}}
    inputs: ["module:shop.cart", "module:tests/test_cart.py"]
  - name: all
    deps: [cart]
    gate:
      - {{name: tests, run: "{run}", each: [tests/test_cart.py, tests/test_prices.py]}}
    inputs: ["src/", "tests/"]
"""


def finish(svc: Service, *names: str, item: int | None = None) -> None:
    for n in names:
        svc.start(n, item=item)
        r = svc.done(n, item=item)
        assert r.passed, r


def units_of(svc: Service, name: str, item: int | None = None) -> list[tuple[str | None, str, str | None]]:
    run = svc.runs(name, item=item)[-1]
    return [(c.file, c.outcome.value, c.cached_from.milestone if c.cached_from else None) for c in run.commands]


def test_a_unit_runs_once_per_state_whichever_gates_include_it(any_service: Service, pkg: Path, ledger: Path) -> None:
    svc = any_service
    svc.apply_plan(parse_plan(plan(ledger)))
    finish(svc, "prices", "cart", "all")
    assert ran(ledger) == ["tests/test_prices.py", "tests/test_cart.py"]
    assert units_of(svc, "cart") == [
        ("tests/test_cart.py", "passed", None),
        ("tests/test_prices.py", "cached", "prices"),
    ]
    assert units_of(svc, "all") == [
        ("tests/test_cart.py", "cached", "cart"),
        ("tests/test_prices.py", "cached", "prices"),
    ]
    last = svc.runs("all")[-1]
    assert last.reason == "all passed: 2 units (2 cached)"
    # An edit re-runs exactly the units whose inputs it touches.
    write(pkg, {"src/shop/cart.py": PACKAGE["src/shop/cart.py"] + "# edited\n"})
    assert {v.name: v.view for v in svc.milestone_views()[1]} == {"prices": "done", "cart": "stale", "all": "stale"}
    r = svc.verify()
    assert r.ok, r.message
    assert ran(ledger)[2:] == ["tests/test_cart.py"]
    assert units_of(svc, "all") == [
        ("tests/test_cart.py", "cached", "cart"),
        ("tests/test_prices.py", "cached", "prices"),
    ]


def test_a_changed_command_or_env_is_a_new_unit(any_service: Service, pkg: Path, ledger: Path) -> None:
    svc = any_service
    first = svc.apply_plan(parse_plan(plan(ledger))).id
    finish(svc, "prices", item=first)
    # The same files under another command: run again, not taken from the other's pass.
    other = svc.apply_plan(parse_plan(plan(ledger, check="grep -q price {file}", objective="other"))).id
    finish(svc, "prices", item=other)
    assert ran(ledger) == ["tests/test_prices.py", "tests/test_prices.py"]
    # Another env: a new unit too.
    env_plan = plan(ledger, objective="env").replace(
        "each: [tests/test_prices.py]}", 'each: [tests/test_prices.py], env: {SHOP: "1"}}', 1
    )
    third = svc.apply_plan(parse_plan(env_plan)).id
    finish(svc, "prices", item=third)
    assert ran(ledger).count("tests/test_prices.py") == 3
    # The same command and env in a fourth item: the first item's pass stands in.
    fourth = svc.apply_plan(parse_plan(plan(ledger, objective="again"))).id
    svc.start("prices", item=fourth)
    r = svc.done("prices", item=fourth, use_cache=False)  # the milestone-level cache off: the unit level decides
    assert r.passed and ran(ledger).count("tests/test_prices.py") == 3
    assert units_of(svc, "prices", fourth) == [("tests/test_prices.py", "cached", "prices")]


def test_a_failed_unit_is_not_kept_and_fails_its_gate(any_service: Service, pkg: Path, ledger: Path) -> None:
    svc = any_service
    write(pkg, {"tests/test_prices.py": "from shop.prices import price\n"})  # no 'def': the check fails
    svc.apply_plan(parse_plan(plan(ledger)))
    svc.start("prices")
    r = svc.done("prices")
    assert not r.passed and r.gate_run is not None
    assert r.gate_run.reason == "exit 1"
    svc.start("prices")
    assert not svc.done("prices").passed
    assert ran(ledger) == ["tests/test_prices.py"] * 2  # a failure is run again in a later gate


def test_every_unit_of_a_command_runs_and_the_next_commands_are_skipped(pkg: Path, tmp_path: Path) -> None:
    cmds = [
        GateCommand(
            name="t", run="test {file} != tests/test_cart.py", each=["tests/test_cart.py", "tests/test_prices.py"]
        ),
        GateCommand(name="after", run="true"),
    ]
    r = run_gate(cmds, tmp_path / "a.log", default_cwd=pkg)
    assert [(c.name, c.file, c.outcome) for c in r.commands] == [
        ("t", "tests/test_cart.py", Outcome.FAILED),
        ("t", "tests/test_prices.py", Outcome.PASSED),
        ("after", None, Outcome.SKIPPED),
    ]
    assert r.reason == "t tests/test_cart.py: exit 1"


def test_gates_of_one_book_share_a_unit_running_in_another_thread(pkg: Path, tmp_path: Path, ledger: Path) -> None:
    book = UnitBook()
    cmd = GateCommand(name="t", run=f"echo {{file}} >> {ledger} && sleep 1", each=["tests/test_cart.py"])
    results = {}

    def gate(name: str) -> None:
        results[name] = run_gate(
            [cmd],
            tmp_path / f"{name}.log",
            default_cwd=pkg,
            units=book,
            origin=CachedFrom(item=1, milestone=name, attempt=1),
        )

    threads = [threading.Thread(target=gate, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ran(ledger) == ["tests/test_cart.py"]
    outcomes = sorted(r.commands[0].outcome.value for r in results.values())
    assert outcomes == ["cached", "passed"] and all(r.passed for r in results.values())
    assert (book.ran, book.reused) == (1, 1)


def test_each_is_checked_when_the_plan_is_read(pkg: Path) -> None:
    def bad(command: str) -> str:
        with pytest.raises(PlanFileError) as e:
            parse_plan(f"objective: o\nmilestones:\n  - name: a\n    gate:\n      - {command}\n")
        return str(e.value)

    assert "each: is empty" in bad("{run: 'pytest {file}', each: []}")
    assert "run has no {file}" in bad("{run: 'pytest -q', each: [tests/test_a.py]}")
    assert "not a file path relative to the workspace root" in bad("{run: 'pytest {file}', each: [/etc/passwd]}")


def test_plan_export_writes_each_back(any_service: Service, pkg: Path, ledger: Path) -> None:
    svc = any_service
    svc.apply_plan(parse_plan(plan(ledger)))
    exported = svc.export_plan()
    gate = exported["milestones"][1]["gate"]
    assert gate[0]["each"] == ["tests/test_cart.py", "tests/test_prices.py"]
    assert exported["milestones"][1]["inputs"] == ["module:shop.cart", "module:tests/test_cart.py"]
    again = parse_plan(__import__("yaml").safe_dump(exported))
    assert again.take_milestones()[1].gate[0].each == ["tests/test_cart.py", "tests/test_prices.py"]


def test_a_store_that_cannot_answer_makes_the_unit_run_not_fail(pkg: Path, tmp_path: Path, ledger: Path) -> None:
    def lookup(digest: str) -> CachedFrom | None:
        raise OSError("connection lost")

    book = UnitBook(lookup)
    cmd = GateCommand(name="t", run=f"echo {{file}} >> {ledger}", each=["tests/test_cart.py"])
    origin = CachedFrom(item=1, milestone="a", attempt=1)
    r = run_gate([cmd], tmp_path / "a.log", default_cwd=pkg, units=book, origin=origin)
    assert r.passed and ran(ledger) == ["tests/test_cart.py"]
    # and a second gate of the book takes the result without asking the store again
    again = run_gate([cmd], tmp_path / "b.log", default_cwd=pkg, units=book)
    assert again.passed and again.commands[0].outcome is Outcome.CACHED and ran(ledger) == ["tests/test_cart.py"]
    # A gate run with no origin (the Python API's run_gate) runs its units and shares nothing it cannot name.
    plain = UnitBook()
    for log in ("c.log", "d.log"):
        assert run_gate([cmd], tmp_path / log, default_cwd=pkg, units=plain).passed
    assert ran(ledger).count("tests/test_cart.py") == 3


def test_units_of_one_step_run_side_by_side_within_the_books_workers(pkg: Path, tmp_path: Path) -> None:
    files = ["tests/test_cart.py", "tests/test_prices.py", "src/shop/cart.py", "src/shop/prices.py"]
    for n in range(3):
        (tmp_path / f"x{n}").mkdir()
    trace = tmp_path / "trace.txt"
    cmd = GateCommand(
        name="t",
        run=f"echo start >> {trace}; echo out-{{file}}; sleep 0.5; echo more-{{file}}; echo end >> {trace}",
        each=files,
    )

    def most_at_once() -> int:
        at, top = 0, 0
        for word in trace.read_text().split():
            at += 1 if word == "start" else -1
            top = max(top, at)
        trace.unlink()
        return top

    origin = CachedFrom(item=1, milestone="m", attempt=1)
    r = run_gate([cmd], tmp_path / "x0" / "a.log", default_cwd=pkg, units=UnitBook(workers=2), origin=origin)
    assert r.passed and [c.file for c in r.commands] == files  # in the step's order, whatever ended first
    assert most_at_once() == 2
    # The attempt's log holds each unit's output whole, after its header (not interleaved), and no part files.
    log = (tmp_path / "x0" / "a.log").read_text().splitlines()
    for f in files:
        i = log.index(f"=== [t] $ {cmd.unit_run(f)}")
        assert log[i + 1 : i + 3] == [f"out-{f}", f"more-{f}"]
    assert not [p.name for p in (tmp_path / "x0").iterdir() if ".unit-" in p.name]
    run_gate([cmd], tmp_path / "x1" / "a.log", default_cwd=pkg, units=UnitBook(workers=1), origin=origin)
    assert most_at_once() == 1
    # Two gates of one book share its workers: never more than that many units at once.
    book = UnitBook(workers=2)
    cmds = [cmd.model_copy(update={"run": cmd.run + f" # gate {g}"}) for g in range(2)]
    threads = [
        threading.Thread(
            target=run_gate,
            args=([c], tmp_path / "x2" / f"{g}.log"),
            kwargs={"default_cwd": pkg, "units": book, "origin": origin},
        )
        for g, c in enumerate(cmds)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most_at_once() == 2 and book.ran == 8


def test_an_interrupted_step_stops_every_unit_running_side_by_side(pkg: Path, tmp_path: Path) -> None:
    stop = threading.Event()
    cmd = GateCommand(name="t", run="sleep 30", each=["tests/test_cart.py", "tests/test_prices.py", "src/shop/cart.py"])
    threading.Timer(1.0, stop.set).start()
    r = run_gate(
        [cmd],
        tmp_path / "a.log",
        default_cwd=pkg,
        units=UnitBook(workers=2),
        stop=stop,
        origin=CachedFrom(item=1, milestone="m", attempt=1),
    )
    assert r.outcome is Outcome.INTERRUPTED and r.duration < 15
    assert sorted(c.outcome.value for c in r.commands) == ["interrupted", "interrupted", "skipped"]


def test_the_progress_line_counts_the_units_and_the_cached_ones(service: Service, pkg: Path, ledger: Path) -> None:
    import io

    from milepost.events import LineReporter
    from milepost.results import Claim

    service.apply_plan(parse_plan(plan(ledger)))
    finish(service, "prices")
    service.start("cart")
    done = service.done("cart")
    out = io.StringIO()
    claim = Claim(item=1, pk=2, milestone=done.milestone, attempt=1, owner="t", log_path="t.log")
    LineReporter(out).gate_finished(claim, done)
    assert out.getvalue().split(" ", 1)[1].startswith("done   cart (attempt 1 in ")
    assert out.getvalue().endswith(" s; 2 units, 1 cached)\n")


# -- units run ahead of their gates ------------------------------------------------------


def ahead_jobs(cmd: GateCommand, *names: str) -> list[AheadJob]:
    return [AheadJob(cmd=cmd, path=p, milestone=n, timeout=None) for n in names for p in cmd.each]


def test_an_idle_worker_runs_a_later_gates_unit_ahead_and_that_gate_takes_it(
    service: Service, pkg: Path, tmp_path: Path, ledger: Path
) -> None:
    book = UnitBook(workers=2)
    later = GateCommand(name="t", run=f"echo {{file}} >> {ledger}", each=["tests/test_prices.py"])
    ahead = Ahead(service.ctx, 1, tmp_path / "ahead")
    busy = GateCommand(name="slow", run=f"sleep 1 && test -s {ledger}", each=["tests/test_cart.py"])
    with book.ahead(ahead_jobs(later, "b"), ahead.digest, ahead.run):
        # A gate holds one worker for 1 s; the other runs b's unit meanwhile (the gate sees it in the ledger).
        first = run_gate(
            [busy], tmp_path / "a.log", default_cwd=pkg, units=book, origin=CachedFrom(item=1, milestone="a", attempt=1)
        )
        assert first.passed, first.reason
        taken = run_gate(
            [later],
            tmp_path / "b.log",
            default_cwd=pkg,
            units=book,
            origin=CachedFrom(item=1, milestone="b", attempt=1),
        )
        again = run_gate(
            [later],
            tmp_path / "c.log",
            default_cwd=pkg,
            units=book,
            origin=CachedFrom(item=1, milestone="c", attempt=1),
        )
    assert ran(ledger) == ["tests/test_prices.py"]  # once, ahead
    unit = taken.commands[0]
    assert unit.outcome is Outcome.PASSED and unit.cached_from is None and "ran ahead of its gate" in unit.reason
    assert "ran ahead of this gate" in (tmp_path / "b.log").read_text()
    assert again.commands[0].outcome is Outcome.CACHED and again.commands[0].cached_from is not None
    assert again.commands[0].cached_from.milestone == "b"  # the gate that took it, as for any unit
    assert book.ran_ahead == 1 and not list((tmp_path / "ahead").glob("*.log"))


def test_a_unit_that_fails_ahead_is_run_again_by_its_gate(service: Service, pkg: Path, tmp_path: Path) -> None:
    # It fails until a marker exists (what a dependency's gate might prepare): the gate's own run passes.
    marker = tmp_path / "prepared"
    cmd = GateCommand(name="t", run=f"test -e {marker}", each=["tests/test_prices.py"])
    book = UnitBook(workers=2)
    ahead = Ahead(service.ctx, 1, tmp_path / "ahead")
    with book.ahead(ahead_jobs(cmd, "b"), ahead.digest, ahead.run):
        deadline = time.monotonic() + 10
        while book.ran_ahead == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        marker.touch()
        r = run_gate(
            [cmd], tmp_path / "b.log", default_cwd=pkg, units=book, origin=CachedFrom(item=1, milestone="b", attempt=1)
        )
    assert book.ran_ahead == 1
    assert r.passed and "ran ahead" not in r.commands[0].reason


def test_nothing_runs_ahead_with_one_worker_and_a_unit_running_ahead_stops_with_the_block(
    service: Service, pkg: Path, tmp_path: Path, ledger: Path
) -> None:
    cmd = GateCommand(name="t", run=f"echo {{file}} >> {ledger} && sleep 30", each=["tests/test_prices.py"])
    ahead = Ahead(service.ctx, 1, tmp_path / "ahead")
    with UnitBook(workers=1).ahead(ahead_jobs(cmd, "b"), ahead.digest, ahead.run):
        time.sleep(0.5)
    assert ran(ledger) == []
    book = UnitBook(workers=2)
    started = time.monotonic()
    with book.ahead(ahead_jobs(cmd, "b"), ahead.digest, ahead.run):
        while not ran(ledger) and time.monotonic() - started < 10:
            time.sleep(0.05)
    assert ran(ledger) == ["tests/test_prices.py"]
    assert time.monotonic() - started < 10  # stopped, not waited for
    assert book.ran_ahead == 1 and book.begin("x" * 64) is None  # dropped: nothing kept for a gate


def test_a_drives_jobs_are_its_milestones_yet_to_run_with_their_cache_on(
    any_service: Service, pkg: Path, ledger: Path
) -> None:
    svc = any_service
    svc.apply_plan(parse_plan(plan(ledger)))
    finish(svc, "prices")
    _, g = svc.graph()
    # prices is done and cart ready (its gate starts now): all's units, each once.
    jobs = Ahead.jobs(g, None)
    assert [(j.milestone, j.path) for j in jobs] == [("all", "tests/test_cart.py"), ("all", "tests/test_prices.py")]
    assert [j.milestone for j in Ahead.jobs(g, {"prices", "cart"})] == []
    # prices, done but stale: the drive re-proves it, its units run ahead with the rest (one session, not one
    # process per re-proven gate: click's four files after a no-op edit ran in four).
    assert [(j.milestone, j.path) for j in Ahead.jobs(g, None, {"prices"})] == [
        ("prices", "tests/test_prices.py"),
        ("all", "tests/test_cart.py"),
    ]
    uncached = plan(ledger, objective="no cache").replace("  - name: cart\n", "  - name: cart\n    cache: false\n")
    item = svc.apply_plan(parse_plan(uncached))
    _, g2 = svc.graph(item.id)  # prices ready; cart's cache off: all's units
    assert [(j.milestone, j.path) for j in Ahead.jobs(g2, None)] == [
        ("all", "tests/test_cart.py"),
        ("all", "tests/test_prices.py"),
    ]


def test_a_drives_jobs_put_the_stale_milestones_units_first(service: Service, pkg: Path, ledger: Path) -> None:
    """A drive re-proves its stale milestones before it goes on: their units run ahead first, whatever their
    ids (a waiting milestone's before them would take the idle workers the re-proof needs)."""
    run = f"echo {{file}} >> {ledger} && grep -q def {{file}}"
    text = f"""
objective: order
milestones:
  - name: waiting
    deps: [ready]
    gate: [{{name: tests, run: "{run}", each: [tests/test_cart.py]}}]
  - name: ready
    gate: "true"
  - name: stale
    gate: [{{name: tests, run: "{run}", each: [tests/test_prices.py]}}]
"""
    item = service.apply_plan(parse_plan(text)).id
    finish(service, "stale", item=item)
    _, g = service.graph(item)
    assert [j.milestone for j in Ahead.jobs(g, None)] == ["waiting"]
    assert [(j.milestone, j.path) for j in Ahead.jobs(g, None, {"stale"})] == [
        ("stale", "tests/test_prices.py"),
        ("waiting", "tests/test_cart.py"),
    ]


class Recorded:
    """An ``AheadRun`` that records the runs it was given (the book's scheduling, not a command: the real
    session is tests/test_unit_blocks.py's); each unit passes, under a record digest of its own when
    ``records``, unless its path says fail."""

    def __init__(self, records: bool = False) -> None:
        self.runs: list[list[str]] = []
        self.lock = threading.Lock()
        self.records = records

    def __call__(self, jobs, digests, stop):  # type: ignore[no-untyped-def]
        from milepost.gates.outcome import CommandResult

        with self.lock:
            self.runs.append([j.path for j in jobs])
        return [
            (
                CommandResult(
                    name="t",
                    run=j.path,
                    outcome=Outcome.FAILED if "fail" in j.path else Outcome.PASSED,
                    reason="exit 0",
                    unit=("r" + d[1:]) if self.records else d,
                ),
                None,
            )
            for j, d in zip(jobs, digests, strict=True)
        ]


def batch_jobs(*paths: str) -> list[AheadJob]:
    cmd = GateCommand(name="t", run="pytest {file}", each=list(paths))
    return [AheadJob(cmd=cmd, path=p, milestone=f"m{n}", timeout=None) for n, p in enumerate(paths)]


def run_ahead_until(book: UnitBook, jobs: list[AheadJob], run: Recorded, n: int, together=None) -> None:  # type: ignore[no-untyped-def]
    digest = lambda j: j.path.ljust(64, "x")  # noqa: E731
    with book.ahead(jobs, digest, run, together or (lambda j: "py" if j.path.endswith(".py") else None)):
        deadline = time.monotonic() + 30
        while book.ran_ahead < n and time.monotonic() < deadline:
            time.sleep(0.01)
    assert book.ran_ahead == n


def test_units_that_may_share_a_run_run_ahead_together_split_over_the_idle_workers() -> None:
    from milepost.gates.units import AHEAD_BATCH

    files = [f"t{n}.py" for n in range(5)]
    run = Recorded()
    book = UnitBook(workers=2)
    with book.worker():  # one worker busy: one run of all five
        run_ahead_until(book, batch_jobs(*files), run, 5)
    assert run.runs == [files]
    run = Recorded()
    run_ahead_until(UnitBook(workers=2), batch_jobs(*files), run, 5)  # both idle: two runs side by side
    assert sorted(map(sorted, run.runs)) == [["t0.py", "t2.py", "t4.py"], ["t1.py", "t3.py"]]
    run = Recorded()
    book = UnitBook(workers=2)
    with book.worker():
        run_ahead_until(book, batch_jobs("a.py", "data.csv", "b.py"), run, 3)
    assert run.runs == [["a.py", "b.py"], ["data.csv"]]  # one that may not share a run runs alone
    many = [f"t{n}.py" for n in range(AHEAD_BATCH + 3)]
    run = Recorded()
    book = UnitBook(workers=2)
    with book.worker():
        run_ahead_until(book, batch_jobs(*many), run, len(many))
    assert [len(r) for r in run.runs] == [AHEAD_BATCH, 3]  # at most AHEAD_BATCH in one run


def test_a_batch_is_split_by_weight_the_heaviest_first_into_the_lightest_run() -> None:
    """(click's no-op in ``termui.confirm``: test_termui.py, 70 KB, ran with test_echo.py while two small files
    ran side by side; the drive waited on the heavy pair.)"""
    from milepost.gates.units import split

    jobs = batch_jobs("termui.py", "confirm.py", "echo.py", "prompt.py")
    sizes = {"termui.py": 70, "confirm.py": 1, "echo.py": 5, "prompt.py": 3}
    batch = [(j, j.path) for j in jobs]

    def paths(parts: list[list[tuple[AheadJob, str]]]) -> list[list[str]]:
        return [[d for _, d in part] for part in parts]

    assert paths(split(batch, 2, None)) == [["termui.py", "echo.py"], ["confirm.py", "prompt.py"]]  # in turn
    by_size = split(batch, 2, lambda j: sizes[j.path])
    assert paths(by_size) == [["termui.py"], ["confirm.py", "echo.py", "prompt.py"]]  # each keeps the batch's order
    assert paths(split(batch, 3, lambda j: sizes[j.path])) == [["termui.py"], ["echo.py"], ["confirm.py", "prompt.py"]]
    assert paths(split(batch[:1], 2, lambda j: 1.0)) == [["termui.py"]]  # never an empty run
    even = split(batch, 2, lambda j: 1.0)  # equal weights: in turn, as without
    assert paths(even) == [["termui.py", "echo.py"], ["confirm.py", "prompt.py"]]
    # A drive weighs by the file's size: the book splits what it is given.
    run = Recorded()
    digest = lambda j: j.path.ljust(64, "x")  # noqa: E731
    book = UnitBook(workers=2)
    with book.ahead(jobs, digest, run, lambda j: "py", lambda j: float(sizes[j.path])):
        deadline = time.monotonic() + 30
        while book.ran_ahead < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sorted(run.runs) == [["confirm.py", "echo.py", "prompt.py"], ["termui.py"]]


def test_a_unit_whose_record_a_gate_is_writing_is_not_run_ahead(tmp_path: Path) -> None:
    """A gate's session ended (its worker free: the scan ahead wakes) and it writes its units' records, each
    digest held first: a scan that reads such a record finds its digest held by the book, not free to run
    (its pass is told a moment later). It ran the unit again (click's first drive, one file twice)."""
    from milepost.gates.unit_locks import UnitLocks

    book = UnitBook(workers=2)
    book.shared = UnitLocks(tmp_path)
    book.hold("a.py".ljust(64, "x"))  # a.py's record is being written
    run = Recorded()
    run_ahead_until(book, batch_jobs("a.py", "b.py"), run, 1)
    assert run.runs == [["b.py"]]
    book.close()
    assert not book.shared.recording


def test_a_pass_run_ahead_is_found_under_its_record_digest_and_a_failure_is_dropped() -> None:
    run = Recorded(records=True)
    book = UnitBook(workers=2)
    with book.worker():
        run_ahead_until(book, batch_jobs("a.py", "fail.py"), run, 2)
    a, fail = "a.py".ljust(64, "x"), "fail.py".ljust(64, "x")
    assert book.begin(fail) is None  # dropped: its gate runs it
    book.end(fail, None, None)
    adopted = book.begin("r" + a[1:])  # the gate computes its digest from the record the run left
    assert adopted.__class__.__name__ == "Adopted"
    book.end("r" + a[1:], None, None)  # that gate was interrupted: the unit is nobody's
    done = threading.Event()
    asked: list[object] = []
    threading.Thread(target=lambda: (asked.append(book.begin(a)), done.set()), daemon=True).start()
    assert done.wait(5) and asked == [None]  # under its first digest too: run it (no waiting for ever)


def test_a_books_unit_locks_are_let_go_when_its_drive_ends(tmp_path: Path) -> None:
    """A pass run ahead that no gate took holds its digest's lock and its record's (taken before the record
    was written) until its gate takes it; once the drive ends (its book closes), another driver, or the next
    drive of this process (the MCP server's), must not wait on them."""
    from milepost.gates.outcome import CommandResult
    from milepost.gates.unit_locks import UnitLocks

    book = UnitBook(workers=2)
    book.shared = UnitLocks(tmp_path)

    def run(jobs, digests, stop):  # type: ignore[no-untyped-def]
        out = []
        for j, d in zip(jobs, digests, strict=True):
            book.hold("r" + d[1:])  # (as Watch.keep does before writing the record)
            out.append(
                (CommandResult(name="t", run=j.path, outcome=Outcome.PASSED, reason="exit 0", unit="r" + d[1:]), None)
            )
        return out

    run_ahead_until(book, batch_jobs("a.py"), run, 1)  # type: ignore[arg-type]
    digest = "a.py".ljust(64, "x")
    other = UnitLocks(tmp_path)
    assert not other.take(digest, wait=False) and not other.take("r" + digest[1:], wait=False)  # its gate's, still
    book.close()
    assert other.take(digest, wait=False) and other.take("r" + digest[1:], wait=False)


def test_wait_started_returns_once_the_first_run_ahead_started_or_there_is_none() -> None:
    """A drive's early start waits for the units run ahead to take the idle workers first (flows/early.py):
    ``wait_started`` returns when their first run has started, while it still runs, and at once when there
    is nothing to run ahead (one worker, no jobs)."""
    release = threading.Event()
    started: list[list[str]] = []

    def run(jobs, digests, stop):  # type: ignore[no-untyped-def]
        started.append([j.path for j in jobs])
        release.wait(30)
        return [(None, None)] * len(jobs)

    digest = lambda j: j.path.ljust(64, "x")  # noqa: E731
    book = UnitBook(workers=2)
    with book.ahead(batch_jobs("a.py", "b.py", "c.py"), digest, run, lambda j: "py"):
        assert book.wait_started(30)
        assert not book.slots.acquire(blocking=False)  # both workers are the runs' already: a gate's unit waits
        wait_until(lambda: len(started) == 2, timeout=30)
        assert sorted(map(sorted, started)) == [["a.py", "c.py"], ["b.py"]]  # both runs began, neither ended
        assert book.ran_ahead == 0
        release.set()
    for idle in (UnitBook(workers=1), UnitBook(workers=2)):
        with idle.ahead(batch_jobs("a.py") if idle.workers == 1 else [], digest, run):
            assert idle.wait_started(0)
    never = threading.Event()
    book = UnitBook(workers=2)
    busy = lambda jobs, digests, stop: never.wait(30) and []  # noqa: E731
    with book.worker(), book.worker(), book.ahead(batch_jobs("a.py"), digest, busy):  # no worker idle: no run
        assert not book.wait_started(0.2)
