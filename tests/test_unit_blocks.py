"""Units that know the code they ran (issue 40): a pytest unit runs under
coverage.py, and only a change to a block it executed (or to the test file,
its configuration, or where its imports resolve) runs it again. Real pytest
processes (this interpreter's, which has coverage.py) on a real package in a
temporary git work tree whose ``__init__`` imports every module, so import
analysis alone would run every test file after any edit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from milepost.gates.blocks import MODULE, blocks_of, executed
from milepost.gates.command import run_gate
from milepost.gates.inputs import Snapshot
from milepost.gates.outcome import CachedFrom, CommandResult, Outcome
from milepost.gates.unit_blocks import env_tag, records_path, unit_key, unit_state, watched
from milepost.gates.unit_locks import UnitLocks
from milepost.gates.units import UnitBook, unit_command
from milepost.graph.models import GateCommand
from milepost.planfile import parse_plan
from milepost.service import Service

# (PYTEST_DISABLE_PLUGIN_AUTOLOAD: the plugins installed here, hypothesis first, take seconds to load)
PYTEST = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -p no:cacheprovider {{file}}"

PACKAGE = {
    "pkg/__init__.py": "from pkg.a import fa\nfrom pkg.b import fb\nfrom pkg.c import fc\n\nLIMIT = 10\n",
    "pkg/a.py": "def fa(x):\n    return x + 1\n",
    "pkg/b.py": (
        "def fb(x):\n"
        '    """Double it."""\n'
        "    try:\n"
        "        from pkg import extra\n"
        "    except ImportError:\n"
        "        return x * 2\n"
        "    return extra.twice(x)\n"
    ),
    "pkg/c.py": "def fc(x):\n    return x - 1\n",
    "tests/test_a.py": "from pkg import fa\n\n\ndef test_fa():\n    assert fa(1) == 2\n",
    "tests/test_b.py": "from pkg import fb\n\n\ndef test_fb():\n    assert fb(2) == 4\n",
    "tests/test_limit.py": "import pkg\n\n\ndef test_limit():\n    assert pkg.LIMIT == 10\n",
}
TESTS = ["tests/test_a.py", "tests/test_b.py", "tests/test_limit.py"]


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


class Gates:
    """Gates of one step over the test files, each with its own book, passes kept as the store keeps them."""

    def __init__(self, root: Path, run: str = PYTEST, env: dict[str, str] | None = None, workers: int = 2) -> None:
        self.root = root
        self.workers = workers
        self.run_ = run
        self.env = env or {}
        self.passes: dict[str, CachedFrom] = {}
        self.attempts = 0

    def gate(self, files: list[str] = TESTS) -> list[CommandResult]:
        self.attempts += 1
        origin = CachedFrom(item=1, milestone="m", attempt=self.attempts)
        cmd = GateCommand(name="pytest", run=self.run_, each=files, env=self.env)
        log = self.root / ".milepost" / "logs" / f"{self.attempts}.log"
        r = run_gate([cmd], log, default_cwd=self.root, units=UnitBook(self.passes.get, self.workers), origin=origin)
        for c in r.commands:
            if c.unit and c.outcome is Outcome.PASSED:
                self.passes.setdefault(c.unit, origin)
        return r.commands

    def ran(self, files: list[str] = TESTS) -> dict[str, str]:
        """file -> outcome of the units that ran (not the cached ones)."""
        return {str(c.file): c.outcome.value for c in self.gate(files) if c.outcome is not Outcome.CACHED}


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    write(root, PACKAGE)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text(".milepost/\n")
    return root


@pytest.fixture
def gates(pkg: Path) -> Gates:
    g = Gates(pkg)
    assert g.ran() == dict.fromkeys(TESTS, "passed")
    assert g.ran() == {}  # nothing changed: every unit cached
    return g


def edit(root: Path, rel: str, old: str, new: str) -> None:
    p = root / rel
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))


# -- blocks -------------------------------------------------------------------------------


def test_blocks_are_module_level_code_and_each_body_and_a_comment_changes_none() -> None:
    src = (
        b'"""Mod."""\nX = 1\n\n@dec\ndef f(a=1):\n    """Doc."""\n    return a\n\n\n'
        b"class C:\n    y = 2\n\n    def m(self):\n        return 3\n"
    )
    found = {b.name: b for b in blocks_of(src) or []}
    assert list(found) == [MODULE, "f", "C", "C.m"]
    assert executed(found.values(), [2]) == {MODULE: found[MODULE].fingerprint}
    assert set(executed(found.values(), [7, 14])) == {"f", "C.m"}
    reformatted = src.replace(b"X = 1", b"X = 1  # one\n\n").replace(b"return a", b"return (\n        a\n    )")
    assert [b.fingerprint for b in blocks_of(reformatted) or []] == [b.fingerprint for b in found.values()]
    redoc = {b.name: b.fingerprint for b in blocks_of(src.replace(b"Doc.", b"Docs.")) or []}
    assert [n for n in found if found[n].fingerprint != redoc[n]] == ["f"]  # a docstring counts, in its own block
    moddoc = {b.name: b.fingerprint for b in blocks_of(src.replace(b"Mod.", b"Module.")) or []}
    assert [n for n in found if found[n].fingerprint != moddoc[n]] == [MODULE]
    default = {b.name: b.fingerprint for b in blocks_of(src.replace(b"a=1", b"a=2")) or []}
    assert [n for n in found if found[n].fingerprint != default[n]] == [MODULE]  # run when the module is
    assert blocks_of(b"def (:\n") is None


def test_blocks_kept_on_disk_are_the_blocks_parsed_and_a_bad_file_is_parsed_again(
    pkg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drive reads the blocks of the files it did not change from ``.milepost/cache/blocks/`` instead of
    parsing them (click's 17 modules cost a second a drive); what is read is what a parse finds, and a file
    that is damaged or of another format is parsed again, never trusted."""
    from milepost.gates import unit_blocks
    from milepost.gates.blocks import blocks_from_json, blocks_to_json
    from milepost.gates.inputs import StatCache

    src = (pkg / "pkg" / "b.py").read_bytes()
    found = blocks_of(src)
    assert found is not None and blocks_from_json(blocks_to_json(found)) == found
    assert blocks_from_json(blocks_to_json(found).replace("milepost-blocks-1", "milepost-blocks-0")) is None
    assert blocks_from_json('{"format": "milepost-blocks-1", "blocks": [["f", "x", [[1]]]]}') is None
    parses: list[bytes] = []
    real = unit_blocks.blocks_of
    monkeypatch.setattr(unit_blocks, "blocks_of", lambda source: parses.append(source) or real(source))

    def read() -> object:  # a new process: a stat cache of its own, nothing in memory
        reader = unit_blocks._Reader(Snapshot(pkg, StatCache(None, racy_seconds=0)), "tests/test_b.py")
        return reader.blocks("pkg/b.py")

    assert read() == found and len(parses) == 1
    assert read() == found and len(parses) == 1  # read from disk
    (kept,) = (pkg / ".milepost" / "cache" / "blocks").glob("*.json")
    kept.write_text(kept.read_text()[:-9])
    assert read() == found and len(parses) == 2  # damaged: parsed again (and kept again)
    assert read() == found and len(parses) == 2


# -- selection ------------------------------------------------------------------------------


def test_a_comment_edit_runs_no_test_file(gates: Gates, pkg: Path) -> None:
    edit(pkg, "pkg/a.py", "    return x + 1\n", "    # one more\n    return x + 1  # the sum\n\n")
    edit(pkg, "pkg/__init__.py", "LIMIT = 10\n", "LIMIT = 10  # the limit\n")
    assert gates.ran() == {}


def test_a_function_only_some_test_files_call_runs_only_them(gates: Gates, pkg: Path) -> None:
    edit(pkg, "pkg/a.py", "    return x + 1\n", "    x = x\n    return x + 1\n")
    results = {c.file: c for c in gates.gate()}
    assert {f for f, c in results.items() if c.outcome is Outcome.PASSED} == {"tests/test_a.py"}
    assert results["tests/test_a.py"].ran_because == "pkg/a.py: fa changed"  # the evidence names the block
    log = (pkg / ".milepost" / "logs" / "3.log").read_text()
    assert "milepost: tests/test_a.py runs: pkg/a.py: fa changed" in log
    # A function no test calls: nothing runs.
    edit(pkg, "pkg/c.py", "    return x - 1\n", "    y = 0\n    return x - 1 + y\n")
    assert gates.ran() == {}
    # A break in fa: its test file fails, the others stay cached.
    edit(pkg, "pkg/a.py", "return x + 1", "return x + 2")
    assert gates.ran() == {"tests/test_a.py": "failed"}
    # Put back as proven: nothing runs (an older record matches).
    write(pkg, {"pkg/a.py": PACKAGE["pkg/a.py"], "pkg/c.py": PACKAGE["pkg/c.py"]})
    assert gates.ran() == {}


def test_module_level_code_every_test_runs(gates: Gates, pkg: Path) -> None:
    edit(pkg, "pkg/c.py", "def fc", "SCALE = 3\n\n\ndef fc")
    assert gates.ran() == dict.fromkeys(TESTS, "passed")
    edit(pkg, "pkg/__init__.py", "LIMIT = 10", "LIMIT = 11")
    assert gates.ran() == {"tests/test_a.py": "passed", "tests/test_b.py": "passed", "tests/test_limit.py": "failed"}


def test_a_session_fixture_counts_for_every_file_a_function_fixture_for_its_own(pkg: Path) -> None:
    """In one pytest session, a session fixture set up during the first file's test serves the next file:
    what its set-up ran counts for every file; a function fixture's set-up counts for its file only."""
    write(
        pkg,
        {
            "pkg/d.py": "def fd(x):\n    return x * 3\n\n\ndef fe(x):\n    return x\n",
            "tests/conftest.py": (
                "import pytest\n\nfrom pkg.d import fd, fe\n\n\n"
                '@pytest.fixture(scope="session")\ndef base():\n    return fd(5)\n\n\n'
                "@pytest.fixture\ndef ident():\n    return fe(1)\n"
            ),
        },
    )
    edit(pkg, "tests/test_a.py", "def test_fa", "def test_base(base):\n    assert base == 15\n\n\ndef test_fa")
    uses_both = "def test_ident(ident, base):\n    assert ident + base == 16\n\n\ndef test_fb"
    edit(pkg, "tests/test_b.py", "def test_fb", uses_both)
    g = Gates(pkg, workers=1)  # one session: test_a first sets `base` up, test_b is served it
    assert g.ran() == dict.fromkeys(TESTS, "passed")
    edit(pkg, "pkg/d.py", "    return x * 3\n", "    pass\n    return x * 3\n")
    assert {"tests/test_a.py", "tests/test_b.py"} <= set(g.ran())
    edit(pkg, "pkg/d.py", "    return x\n", "    pass\n    return x\n")
    assert g.ran() == {"tests/test_b.py": "passed"}


def test_a_module_imported_lazily_by_an_earlier_file_of_the_session_counts_for_the_later_ones(pkg: Path) -> None:
    """A fixture imports a module when first used: in one session its module-level code runs in the first
    file's context only, yet the later files run its functions, which read that code's values. A change to
    it must run them all (run alone, each file would have executed it)."""
    write(
        pkg,
        {
            "pkg/lazy.py": "RATE = 2\n\n\ndef make(x):\n    return x * RATE\n",
            "tests/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef app():\n    from pkg.lazy import make\n\n"
            "    return make\n",
        },
    )
    edit(pkg, "tests/test_a.py", "def test_fa", "def test_app(app):\n    assert app(2) == 4\n\n\ndef test_fa")
    edit(pkg, "tests/test_b.py", "def test_fb", "def test_app_b(app):\n    assert app(3) == 6\n\n\ndef test_fb")
    g = Gates(pkg, workers=1)  # one session: test_a imports pkg.lazy, test_b finds it imported
    assert g.ran() == dict.fromkeys(TESTS, "passed")
    edit(pkg, "pkg/lazy.py", "RATE = 2", "RATE = 3")
    assert g.ran() == {"tests/test_a.py": "failed", "tests/test_b.py": "failed"}


def test_a_docstring_edit_runs_the_test_files_executing_it(gates: Gates, pkg: Path) -> None:
    edit(pkg, "pkg/b.py", "Double it.", "Double it, twice.")
    assert gates.ran() == {"tests/test_b.py": "passed"}


def test_the_test_files_own_changes_run_it(gates: Gates, pkg: Path) -> None:
    edit(pkg, "tests/test_a.py", "def test_fa", "# a note on the test\ndef test_fa")
    assert gates.ran() == {"tests/test_a.py": "passed"}
    edit(pkg, "tests/test_b.py", "== 4", "== 5")
    assert gates.ran() == {"tests/test_b.py": "failed"}
    write(pkg, {"tests/conftest.py": "X = 1\n"})  # its configuration: a conftest file pytest reads for it
    assert gates.ran() == dict.fromkeys(TESTS, "passed") | {"tests/test_b.py": "failed"}


def test_a_new_module_imported_by_executed_code_runs_it(gates: Gates, pkg: Path) -> None:
    write(pkg, {"pkg/extra.py": "def twice(x):\n    return x * 3\n"})  # fb's import now finds it: fb breaks
    results = {c.file: c for c in gates.gate()}
    assert {f: c.outcome.value for f, c in results.items() if c.outcome is not Outcome.CACHED} == {
        "tests/test_b.py": "failed"
    }
    assert results["tests/test_b.py"].ran_because == "pkg/b.py: its imports now resolve to other files (pkg/extra.py)"


def test_a_damaged_record_is_run_again_never_trusted(gates: Gates, pkg: Path) -> None:
    cmd = GateCommand(name="pytest", run=PYTEST, each=TESTS)
    path = records_path(pkg, unit_key(cmd, "tests/test_a.py", None, env_tag(Snapshot(pkg), cmd)))
    data = json.loads(path.read_text())
    # A record that drops a block it depends on (its digest no longer its content's) is not trusted.
    rec = data["records"][0]
    del rec["blocks"]["pkg/a.py"]
    path.write_text(json.dumps(data))
    edit(pkg, "pkg/a.py", "return x + 1", "return x + 2")
    results = {c.file: c for c in gates.gate()}
    assert results["tests/test_a.py"].outcome is Outcome.FAILED
    assert results["tests/test_a.py"].ran_because == "its record of the code it ran could not be read"
    write(pkg, {"pkg/a.py": PACKAGE["pkg/a.py"]})
    path.write_text("{not json")
    assert gates.ran() == {"tests/test_a.py": "passed"}
    assert gates.ran() == {}  # recorded afresh


@pytest.mark.slow  # real pytest processes for seconds (the fast ones above catch the planted bugs)
def test_a_command_that_is_not_pytest_keeps_its_import_derived_inputs(pkg: Path) -> None:
    g = Gates(pkg, run=f"{sys.executable} -m unittest -q {{file}}")
    assert g.ran() == dict.fromkeys(TESTS, "passed")
    edit(pkg, "pkg/a.py", "    return x + 1\n", "    return x + 1  # a comment\n")
    assert g.ran() == dict.fromkeys(TESTS, "passed")  # every test file imports pkg, which imports pkg.a
    assert not (pkg / ".milepost" / "cache" / "units").exists()


def test_a_command_line_that_sets_its_own_pythonpath_keeps_its_import_derived_inputs(pkg: Path) -> None:
    """(The plugin's folder would be hidden from pytest: 'Error importing plugin', exit 4.)"""
    g = Gates(pkg, run=f"PYTHONPATH=. {PYTEST}")
    assert g.ran() == dict.fromkeys(TESTS, "passed")
    assert not (pkg / ".milepost" / "cache" / "units").exists()


def test_coverage_missing_in_the_test_interpreter_is_one_line_naming_the_install(pkg: Path) -> None:
    shim = pkg.parent / "shim"
    write(shim, {"coverage/__init__.py": "raise ImportError('no coverage here')\n"})
    g = Gates(pkg, env={"PYTHONPATH": str(shim)})
    results = g.gate(["tests/test_a.py"])
    assert results[0].outcome is Outcome.FAILED
    assert f"coverage.py is not installed in {sys.executable}" in results[0].tail
    assert f"{sys.executable} -m pip install coverage" in results[0].tail


def test_a_data_file_the_unit_read_is_an_input_by_content(gates: Gates, pkg: Path) -> None:
    test = (
        "from pathlib import Path\n\nfrom pkg import fa\n\n\ndef test_cases():\n"
        "    n = int((Path(__file__).parent / 'data' / 'cases.txt').read_text())\n    assert fa(n) == 3\n"
    )
    write(pkg, {"tests/data/cases.txt": "2\n", "tests/test_data.py": test})
    files = [*TESTS, "tests/test_data.py"]
    assert gates.ran(files) == {"tests/test_data.py": "passed"}
    assert gates.ran(files) == {}
    write(pkg, {"tests/data/cases.txt": "3\n"})
    results = {c.file: c for c in gates.gate(files) if c.outcome is not Outcome.CACHED}
    assert list(results) == ["tests/test_data.py"] and results["tests/test_data.py"].outcome is Outcome.FAILED
    assert results["tests/test_data.py"].ran_because == "tests/data/cases.txt changed (read when it ran)"


@pytest.mark.slow  # real pytest processes for seconds (the fast ones above catch the planted bugs)
@pytest.mark.parametrize("files", [["tests/test_a.py"], ["tests/test_a.py", "tests/test_b.py"]])
def test_cache_false_runs_every_unit_every_time(service: Service, pkg: Path, files: list[str]) -> None:
    """(Two files run in one pytest session: that path must not look up nor offer either.)"""
    step = f"    gate:\n      - {{name: t, run: '{PYTEST}', each: [{', '.join(files)}]}}\n"
    service.apply_plan(
        parse_plan(
            "objective: o\nmilestones:\n"
            f"  - name: fresh\n    cache: false\n{step}  - name: again\n    cache: false\n{step}"
            f"  - name: kept\n{step}  - name: shared\n{step}"
        )
    )
    # (a cache: false gate's units are neither looked up nor offered: kept runs its own, shared takes kept's)
    outcomes = [
        ("fresh", Outcome.PASSED),
        ("again", Outcome.PASSED),
        ("kept", Outcome.PASSED),
        ("shared", Outcome.CACHED),
    ]
    for name, outcome in outcomes:
        service.start(name)
        assert service.done(name).passed
        assert [c.outcome for c in service.runs(name)[-1].commands] == [outcome] * len(files), name


@pytest.mark.slow  # real pytest processes for seconds (the fast ones above catch the planted bugs)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_steps_units_run_in_one_pytest_session_per_worker_each_file_its_own_unit(
    pkg: Path, tmp_path: Path, workers: int
) -> None:
    pids = tmp_path / "pids"
    conftest = f"import os\n\nwith open({str(pids)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
    write(pkg, {"tests/conftest.py": conftest, "tests/test_broken.py": "import nowhere_to_be_found\n"})
    edit(pkg, "tests/test_b.py", "== 4", "== 5")
    files = [*TESTS, "tests/test_broken.py"]
    g = Gates(pkg, workers=workers)
    results = {c.file: c for c in g.gate(files)}
    assert {f: c.outcome.value for f, c in results.items()} == {
        "tests/test_a.py": "passed",
        "tests/test_b.py": "failed",
        "tests/test_limit.py": "passed",
        "tests/test_broken.py": "failed",
    }
    assert len(set(pids.read_text().split())) == workers  # one pytest process per worker, not one per file
    assert "test_fb" in results["tests/test_b.py"].tail and "assert 4 == 5" in results["tests/test_b.py"].tail
    assert "nowhere_to_be_found" in results["tests/test_broken.py"].tail
    assert results["tests/test_a.py"].reason.startswith("exit 0 (one pytest session of")
    # Each file is its own unit: the passes stand, the failures run again.
    assert g.ran(files) == {"tests/test_b.py": "failed", "tests/test_broken.py": "failed"}
    # And each keeps its own record: a function only test_a calls runs test_a alone.
    edit(pkg, "pkg/a.py", "    return x + 1\n", "    x = x\n    return x + 1\n")
    assert g.ran([*TESTS]) == {"tests/test_a.py": "passed", "tests/test_b.py": "failed"}


DRIVER = """
import json, sys
from pathlib import Path
from milepost.gates.command import run_gate
from milepost.gates.outcome import CachedFrom
from milepost.gates.unit_locks import UnitLocks
from milepost.gates.units import UnitBook
from milepost.graph.models import GateCommand

root, name, run, workers = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
book = UnitBook(None, workers)  # no store here: the other driver's pass is found through the workspace
book.shared = UnitLocks(root)
cmd = GateCommand(name="pytest", run=run, each=sys.argv[5:])
origin = CachedFrom(item=1, milestone=name, attempt=1)
r = run_gate([cmd], root / ".milepost" / f"{name}.log", default_cwd=root, units=book, origin=origin)
print(json.dumps({c.file: [c.outcome.value, c.cached_from.milestone if c.cached_from else None] for c in r.commands}))
sys.stdout.flush()
sys.stdin.read()  # alive until told: a driver's pass counts while it lives (its attempt not yet recorded)
"""


@pytest.mark.slow  # real pytest processes for seconds (the fast ones above catch the planted bugs)
@pytest.mark.parametrize("workers", [1, 2])
def test_two_drivers_run_no_test_file_twice(pkg: Path, tmp_path: Path, workers: int) -> None:
    ledger = tmp_path / "ran.txt"
    for rel in TESTS:
        note = f"def test_ledger():\n    open({str(ledger)!r}, 'a').write({rel!r} + ' ')\n\n\n"
        edit(pkg, rel, "def test_", note + "def test_")
    drivers = [
        subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(pkg), name, PYTEST, str(workers), *TESTS],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("one", "two")
    ]
    try:
        found = [json.loads(d.stdout.readline()) for d in drivers if d.stdout is not None]
    finally:
        for d in drivers:
            d.communicate("")
    assert sorted(ledger.read_text().split()) == TESTS  # each test file ran once, in one driver or the other
    for f in TESTS:
        outcomes = sorted(tuple(r[f]) for r in found)
        assert outcomes[0][0] == "cached" and outcomes[1] == ("passed", None), outcomes


def test_a_driver_that_reads_a_fresh_record_waits_for_its_pass_not_runs_it_again(pkg: Path) -> None:
    """Two drivers: the first ran a unit and wrote its record; its pass is not yet told. The second, whose
    digest comes from that record, must wait for the pass rather than run the unit (it ran a file twice
    under load, one time in four: test_two_drivers_run_no_test_file_twice)."""
    one, two = UnitBook(None, 1), UnitBook(None, 1)
    one.shared, two.shared = UnitLocks(pkg), UnitLocks(pkg)
    cmd = GateCommand(name="pytest", run=PYTEST, each=["tests/test_a.py"])
    snap = Snapshot(pkg)
    before = unit_state(snap, cmd, "tests/test_a.py", None).digest
    assert before is not None and one.begin(before) is None  # the first driver runs it
    watch = watched(pkg, cmd, "tests/test_a.py", None, env_tag(snap, cmd), one.hold)
    assert watch is not None
    one_unit = unit_command(cmd, "tests/test_a.py")
    ran = run_gate([one_unit], pkg / ".milepost" / "one.log", default_cwd=pkg, env=watch.env(os.environ))
    r = watch.finish(ran.commands[0])
    after = unit_state(Snapshot(pkg), cmd, "tests/test_a.py", None).digest
    assert r.outcome is Outcome.PASSED and after == r.unit != before  # the record is there, its pass not told
    assert two.begin(after, wait=False) is False  # another driver runs it: not run here
    origin = CachedFrom(item=1, milestone="one", attempt=1)
    one.end(before, r, origin)
    one.also(after, r, origin)
    assert two.begin(after) == (Outcome.PASSED, origin)


@pytest.mark.slow  # real pytest processes for seconds (the fast ones above catch the planted bugs)
def test_tests_run_in_other_processes_leave_no_record_and_keep_import_inputs(pkg: Path) -> None:
    g = Gates(pkg, run=PYTEST.replace(" {file}", " -p xdist.plugin -n 2 {file}"), workers=1)
    assert g.ran() == dict.fromkeys(TESTS, "passed")  # pytest-xdist: the outcomes, from its workers' reports
    assert not (pkg / ".milepost" / "cache" / "units").exists()  # what ran is not all in this process: no record
    edit(pkg, "pkg/c.py", "    return x - 1\n", "    return x - 1  # c\n")
    assert g.ran() == dict.fromkeys(TESTS, "passed")  # the import-derived inputs decide: pkg.c is everyone's


def test_a_unit_run_ahead_keeps_its_record_where_its_gate_looks(service: Service, pkg: Path) -> None:
    """A unit a drive runs ahead of its gate records the code it ran under the
    same key (its environment's) as the gate reads: its pass then stands for
    the gate's state after a comment edit too."""
    import threading

    from milepost.gates.units import AheadJob
    from milepost.service.ahead import Ahead

    cmd = GateCommand(name="pytest", run=PYTEST, each=["tests/test_a.py"])
    ahead = Ahead(service.ctx, 1, pkg / ".milepost" / "ahead-test")
    job = AheadJob(cmd=cmd, path="tests/test_a.py", milestone="m", timeout=None)
    digest = ahead.digest(job)
    assert digest is not None
    [(done, _)] = ahead.run([job], [digest], threading.Event())
    assert done is not None
    assert done.outcome is Outcome.PASSED and done.unit is not None
    key = unit_key(cmd, "tests/test_a.py", None, env_tag(Snapshot(pkg), cmd))
    assert records_path(pkg, key).is_file()  # where unit_state looks for the gate
    edit(pkg, "pkg/a.py", "    return x + 1\n", "    return x + 1  # a comment\n")
    assert ahead.digest(job) == done.unit  # the record stands: the gate would find the pass run ahead


SESSIONS = """\
import os


def pytest_sessionstart(session):
    with open(os.environ["SESSIONS_LEDGER"], "a") as f:
        f.write(" ".join(session.config.args) + "\\n")
"""


def test_units_run_ahead_together_share_one_pytest_session_and_each_gate_takes_its_own(
    service: Service, pkg: Path, tmp_path: Path
) -> None:
    """Units of several milestones' gates, run ahead while a worker is idle, run
    in one pytest session (one start-up, one import of the package), each
    file still its own unit: each gate takes its pass, a failing file is
    dropped and its gate runs it again, and each record stands for its gate."""
    from milepost.gates.units import AheadJob
    from milepost.service.ahead import Ahead

    sessions = tmp_path / "sessions"
    write(
        pkg,
        {"conftest.py": SESSIONS, "tests/test_c.py": "from pkg import fc\n\n\ndef test_fc():\n    assert fc(1) == 5\n"},
    )
    env = {"SESSIONS_LEDGER": str(sessions)}
    files = [*TESTS, "tests/test_c.py"]
    cmds = {f: GateCommand(name="pytest", run=PYTEST, each=[f], env=env) for f in files}
    ahead = Ahead(service.ctx, 1, pkg / ".milepost" / "ahead-test")
    jobs = [AheadJob(cmd=cmds[f], path=f, milestone=f"m{n}", timeout=None) for n, f in enumerate(files)]
    assert len({Ahead.together(j) for j in jobs}) == 1  # one step, one timeout: they may share a run
    book = UnitBook(workers=2)
    # One worker busy (a gate's unit): the other is the one idle.
    with book.worker(), book.ahead(jobs, ahead.digest, ahead.run, ahead.together):
        deadline = time.monotonic() + 120
        while book.ran_ahead < len(files) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert book.ran_ahead == len(files)
        ran = sessions.read_text().splitlines()
        assert len(ran) == 1 and sorted(ran[0].split()) == sorted(files)  # one session for all four
        got = {}
        for n, f in enumerate(files):
            origin = CachedFrom(item=1, milestone=f"m{n}", attempt=1)
            r = run_gate([cmds[f]], tmp_path / f"{n}.log", default_cwd=pkg, units=book, origin=origin)
            got[f] = r.commands[0]
    for f in TESTS:
        assert got[f].outcome is Outcome.PASSED and "ran ahead of its gate" in got[f].reason, got[f]
        assert "one pytest session of 4 test files" in got[f].reason
    assert got["tests/test_c.py"].outcome is Outcome.FAILED and "ran ahead" not in got["tests/test_c.py"].reason
    assert len(sessions.read_text().splitlines()) == 2  # the failing file alone, by its own gate
    log = (tmp_path / "0.log").read_text()
    assert "ran in one pytest session of 4 test files" in log and "ran ahead of this gate" in log
    assert not list((pkg / ".milepost" / "ahead-test").glob("*session*"))  # the session's own log: gone
    edit(pkg, "pkg/a.py", "    return x + 1\n", "    return x + 1  # a comment\n")
    for n, f in enumerate(TESTS):  # each record, kept per file, stands for its gate after a comment
        assert ahead.digest(jobs[n]) == got[f].unit


def test_a_sessions_passes_are_the_books_before_its_worker_is_free(service: Service, pkg: Path, tmp_path: Path) -> None:
    """A gate's units in two pytest sessions (two workers): the units of the
    session that ends first are the book's, under their record's digest, before
    its worker is free, so the drive's idle worker does not run them again ahead
    of a later gate while the other session still runs (before: 14 of click's 34
    test files ran twice in a first drive, docs/benchmarks.md)."""
    import threading

    from milepost.gates.units import AheadJob
    from milepost.service.ahead import Ahead

    sessions, release = tmp_path / "sessions", tmp_path / "release"
    slow = (
        "import time\nfrom pathlib import Path\n\n\ndef test_slow():\n"
        f"    deadline = time.monotonic() + 60\n    while not Path({str(release)!r}).exists():\n"
        "        assert time.monotonic() < deadline\n        time.sleep(0.02)\n"
    )
    write(pkg, {"conftest.py": SESSIONS, "tests/test_slow.py": slow})
    cmd = GateCommand(
        name="pytest",
        run=PYTEST,
        each=["tests/test_slow.py", "tests/test_a.py"],
        env={"SESSIONS_LEDGER": str(sessions)},
    )
    ahead = Ahead(service.ctx, 1, pkg / ".milepost" / "ahead-test")
    ran_ahead: list[str] = []

    def digest(job: AheadJob) -> str | None:
        try:
            return ahead.digest(job)
        finally:
            release.touch()  # test_slow ends once the idle worker has looked at test_a

    def run(jobs, digests, stop):  # type: ignore[no-untyped-def]
        ran_ahead.extend(job.path for job in jobs)
        return ahead.run(jobs, digests, stop)

    book = UnitBook(workers=2)
    got: list[CommandResult] = []
    origin = CachedFrom(item=1, milestone="m", attempt=1)
    gate = threading.Thread(
        target=lambda: got.extend(
            run_gate([cmd], tmp_path / "m.log", default_cwd=pkg, units=book, origin=origin).commands
        )
    )
    gate.start()
    deadline = time.monotonic() + 60
    while len(sessions.read_text().splitlines() if sessions.exists() else []) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)  # both sessions started: both workers taken before anything may run ahead
    assert len(sessions.read_text().splitlines()) == 2
    later = AheadJob(cmd=cmd, path="tests/test_a.py", milestone="later", timeout=None)
    with book.ahead([later], digest, run, ahead.together):
        gate.join(120)
    assert release.exists()  # the idle worker looked at test_a's unit
    assert ran_ahead == [] and book.ran_ahead == 0  # and found it the book's: not run again
    assert {c.file: c.outcome for c in got} == {"tests/test_slow.py": Outcome.PASSED, "tests/test_a.py": Outcome.PASSED}
    assert len(sessions.read_text().splitlines()) == 2


def two_stale_gates(service: Service, pkg: Path, sessions: Path) -> int:
    """An item of two proven milestones whose four units all ran the package's module-level code, made stale
    by an edit of it: first (test_a, test_b) and second (test_limit, and test_c: the heavy file), each pytest
    session writing its files to ``sessions`` (emptied). Its id."""
    write(
        pkg,
        {
            "conftest.py": SESSIONS,
            "tests/test_c.py": "from pkg import fc\n\n\ndef test_fc():\n    assert fc(1) == 0\n" + "# heavy\n" * 100,
        },
    )

    def gate(*files: str) -> str:
        return json.dumps(
            [{"name": "pytest", "run": PYTEST, "each": list(files), "env": {"SESSIONS_LEDGER": str(sessions)}}]
        )

    plan = (
        "objective: re-prove\nmilestones:\n"
        f"  - {{name: first, inputs: ['pkg/**', 'tests/**'], gate: {gate('tests/test_a.py', 'tests/test_b.py')}}}\n"
        f"  - {{name: second, deps: [first], inputs: ['pkg/**', 'tests/**'],"
        f" gate: {gate('tests/test_limit.py', 'tests/test_c.py')}}}\n"
    )
    item = service.apply_plan(parse_plan(plan)).id
    for name in ("first", "second"):
        service.start(name, item=item)
        assert service.done(name, item=item).passed
    edit(pkg, "pkg/__init__.py", "LIMIT = 10\n", "LIMIT = 10\nNOTHING = None\n")  # module-level code: all four ran it
    sessions.unlink()
    return item


def test_a_reproving_drive_runs_the_stale_gates_changed_units_together_before_its_first_gate(
    service: Service, pkg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drive that re-proves starts the stale milestones' changed units ahead, split over the idle workers
    by their files' sizes, before its first gate takes a worker (flows/early.py, no Prefect yet): before, the
    first gate ran its own changed units and a later gate's ran after them (on click, one no-op edit: three
    sessions in two rounds; docs/benchmarks.md). Each gate then takes its passes, and the milestones are
    re-proven."""
    from milepost.flows.early import start_first_gates
    from tests.conftest import wait_until

    sessions = tmp_path / "sessions"
    item = two_stale_gates(service, pkg, sessions)
    waited: list[bool] = []  # (whether the units run ahead had started when the first gate could start)
    wait_started = UnitBook.wait_started
    monkeypatch.setattr(UnitBook, "wait_started", lambda book, t: waited.append(wait_started(book, t)) or True)
    early = start_first_gates(service, item, max_parallel=2)
    assert early is not None and early.stale == ["first", "second"] and waited == [True]
    try:
        wait_until(lambda: len([g for g in early.gates if g.recorded is not None]) == 2, timeout=120)
    finally:
        early.settle(interrupt=False)
    ran = sorted(sorted(line.split()) for line in sessions.read_text().splitlines())
    # (split by the files' sizes: the heavy one alone, gates/units.py split; in turn it would be a+limit, b+c)
    assert ran == [["tests/test_a.py", "tests/test_b.py", "tests/test_limit.py"], ["tests/test_c.py"]], ran
    for gate_ in early.gates:
        assert gate_.result is not None and gate_.result.passed, gate_.result
        assert all("ran ahead of its gate" in c.reason for c in gate_.result.commands), gate_.result.commands
    assert service.runs("second", item)[-1].outcome is Outcome.PASSED


def test_a_first_drive_runs_later_milestones_units_ahead_while_prefect_loads(service: Service, pkg: Path) -> None:
    """A first drive (nothing stale) lets its first gates take the workers, then runs the units of the
    milestones waiting on them ahead with the idle ones, from its early start (no Prefect yet): before, the
    second worker sat idle until the flow run began (on toolz, 1.8 s of a 4 s first drive;
    docs/benchmarks.md)."""
    from milepost.flows.early import start_first_gates
    from tests.conftest import wait_until

    gate = json.dumps([{"name": "pytest", "run": PYTEST, "each": ["tests/test_limit.py"]}])
    later = json.dumps([{"name": "pytest", "run": PYTEST, "each": ["tests/test_a.py", "tests/test_b.py"]}])
    plan = (
        "objective: first\nmilestones:\n"
        f"  - {{name: first, inputs: ['pkg/**', 'tests/**'], gate: {gate}}}\n"
        f"  - {{name: second, deps: [first], inputs: ['pkg/**', 'tests/**'], gate: {later}}}\n"
    )
    item = service.apply_plan(parse_plan(plan)).id
    early = start_first_gates(service, item, max_parallel=2)
    assert early is not None and early.stale == [] and [g.claim.milestone.name for g in early.gates] == ["first"]
    book = early.session.units
    try:
        wait_until(lambda: book.ran_ahead == 2, timeout=120)  # second's two units, in the idle worker
        wait_until(lambda: all(g.recorded is not None for g in early.gates), timeout=120)
    finally:
        early.settle(interrupt=False)
    assert early.gates[0].result is not None and early.gates[0].result.passed


@pytest.mark.parametrize("workers", [1, 2])
def test_verify_runs_the_stale_gates_changed_units_ahead_together(
    service: Service, pkg: Path, tmp_path: Path, workers: int
) -> None:
    """``verify --max-parallel 2`` re-proves as a drive does: the stale milestones' changed units run ahead,
    split over the workers by their files' sizes, before the first gate starts; each gate then takes its
    passes. Before, each gate ran its own changed units in a session of its own, and a later gate's unit ran
    in a second round (click, a no-op in ``join_options``: three sessions, 4.3 to 5.6 s; docs/benchmarks.md).
    With one worker nothing runs ahead: each gate runs its own."""
    sessions = tmp_path / "sessions"
    item = two_stale_gates(service, pkg, sessions)
    r = service.verify(item=item, max_parallel=workers)
    assert r.ok, r.message
    assert [v.milestone for v in r.verified] == ["first", "second"]
    ran = sorted(sorted(line.split()) for line in sessions.read_text().splitlines())
    if workers == 2:
        assert ran == [["tests/test_a.py", "tests/test_b.py", "tests/test_limit.py"], ["tests/test_c.py"]], ran
        for name in ("first", "second"):
            log = service.log_path(item, name, service.runs(name, item)[-1].attempt).read_text()
            assert log.count("ran ahead of this gate") == 2, log
    else:
        assert ran == [["tests/test_a.py", "tests/test_b.py"], ["tests/test_c.py", "tests/test_limit.py"]], ran
    assert not list((pkg / ".milepost").rglob("ahead/*/*")), "the logs no gate took are left behind"


def test_ctrl_c_during_a_verify_whose_units_run_ahead_stops_them_and_its_gates_at_once(
    service: Service, pkg: Path, tmp_path: Path
) -> None:
    """Ctrl-C while a verify's units run ahead: the runs stop, and a gate that waited for one does not run
    the unit itself (it did, then stopped it: 1 to 2 s more on click); exit 130, the re-proofs recorded
    interrupted, the milestones still done and stale."""
    import signal

    from tests.conftest import CLI, wait_until

    marker = tmp_path / "slow.pid"

    def gate(*files: str) -> str:
        return json.dumps([{"name": "pytest", "run": PYTEST, "each": list(files), "env": {"SLOW_PID": str(marker)}}])

    plan = (
        "objective: stop\nmilestones:\n"
        f"  - {{name: first, inputs: ['pkg/**', 'tests/**'], gate: {gate('tests/test_a.py', 'tests/test_b.py')}}}\n"
        f"  - {{name: second, deps: [first], inputs: ['pkg/**', 'tests/**'], gate: {gate('tests/test_limit.py')}}}\n"
    )
    item = service.apply_plan(parse_plan(plan)).id
    for name in ("first", "second"):
        service.start(name, item=item)
        assert service.done(name, item=item).passed
    slow = "import os, time\n\nfrom pkg import fb\n\n\ndef test_fb():\n"
    slow += "    with open(os.environ['SLOW_PID'], 'w') as f:\n        f.write(str(os.getpid()))\n    time.sleep(120)\n"
    write(pkg, {"tests/test_b.py": slow})
    edit(pkg, "pkg/__init__.py", "LIMIT = 10\n", "LIMIT = 10\nNOTHING = None\n")
    proc = CLI(pkg).popen("verify", "--max-parallel", "2")
    try:
        wait_until(lambda: marker.exists() and marker.read_text().strip(), 120, "the slow unit to run ahead")
        pid = int(marker.read_text())
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (out, err)
    assert time.monotonic() - began < 30  # (not the unit's 120 s: it was stopped, and not run again)

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, 30, "the slow unit's process to end")
    views = {v.name: v.view for v in service.milestone_views(item=item)[1]}
    assert views == {"first": "stale", "second": "stale"}, views
    assert service.runs("first", item)[-1].outcome is Outcome.INTERRUPTED


def test_a_units_records_are_kept_in_the_process_while_the_file_is_as_it_was(
    gates: Gates, pkg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each gate of a drive looks up every one of its units: the records read once are kept while the
    records file's stat is as it was (not for a file written within its racy window), and a file written
    since (another run's record) is read again."""
    from milepost.gates import unit_blocks
    from milepost.gates.inputs import StatCache

    cmd = GateCommand(name="pytest", run=PYTEST, each=["tests/test_a.py"])
    key = unit_key(cmd, "tests/test_a.py", None, env_tag(Snapshot(pkg), cmd))
    parsed: list[str] = []
    real = unit_blocks.Record.from_json
    monkeypatch.setattr(unit_blocks.Record, "from_json", lambda k, r: parsed.append(k) or real(k, r))
    cache = StatCache(None, racy_seconds=0)
    first = unit_blocks.read_records(pkg, key, cache)
    assert first[0] and not first[1] and len(parsed) == len(first[0])
    assert unit_blocks.read_records(pkg, key, cache) == first and len(parsed) == len(first[0])  # kept
    edit(pkg, "pkg/a.py", "    return x + 1\n", "    return 1 + x\n")
    assert gates.ran(["tests/test_a.py"]) == {"tests/test_a.py": "passed"}  # a new record, written first
    now = unit_blocks.read_records(pkg, key, cache)
    assert len(now[0]) == len(first[0]) + 1 and now[0][1:] == first[0]  # read again: the file changed
    fresh = StatCache(None, racy_seconds=3600)  # a file written within the racy window is not kept
    parsed.clear()
    unit_blocks.read_records(pkg, key, fresh)
    unit_blocks.read_records(pkg, key, fresh)
    assert len(parsed) == 2 * len(now[0]) and not fresh.records


def test_a_units_answer_is_kept_in_the_process_while_what_it_read_is_as_it_was(
    gates: Gates, pkg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit whose record matched is answered again without going through its record while its records, its
    own files and every file the record names are as they were (with the folders its import index looked
    in: a new module is seen there); any of them changed, it is looked at again. The interpreters of a step's
    command are looked for once per snapshot, not once per unit."""
    from milepost.gates import inputs, unit_blocks
    from milepost.gates.inputs import StatCache

    write(pkg, {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-q"\n'})  # pytest's configuration
    assert gates.ran() == dict.fromkeys(TESTS, "passed")  # (a new input of every unit)
    cache = StatCache(None, racy_seconds=0)  # (no racy window: the folders' import facts are kept at once)
    cmd = GateCommand(name="pytest", run=PYTEST, each=TESTS)
    went: list[str] = []
    real = unit_blocks.first_change
    monkeypatch.setattr(unit_blocks, "first_change", lambda r, rec, s: went.append(rec.digest) or real(r, rec, s))
    looked: list[str] = []
    real_entries = inputs.gate_entries
    monkeypatch.setattr(inputs, "gate_entries", lambda *a: looked.append(a[0]) or real_entries(*a))

    def state(path: str = "tests/test_a.py") -> unit_blocks.UnitState:
        return unit_state(Snapshot(pkg, cache), cmd, path, None)

    proven = state()
    assert proven.why is None and proven.digest is not None and len(went) == 1
    assert state() == proven and len(went) == 1  # kept
    snap, looked[:] = Snapshot(pkg, cache), []
    assert [unit_state(snap, cmd, p, None).why for p in TESTS] == [None, None, None] and looked == [PYTEST]
    went.clear()
    # A block's file: looked at again, and the change named; put back, the record matches again.
    edit(pkg, "pkg/a.py", "return x + 1", "return x + 10")
    assert state().why == "pkg/a.py: fa changed" and went
    write(pkg, {"pkg/a.py": PACKAGE["pkg/a.py"]})
    assert state() == proven
    went.clear()
    assert state() == proven and not went
    # The unit's own file (a comment in the test file is its own input, by content).
    edit(pkg, "tests/test_a.py", "def test_fa", "# a note\ndef test_fa")
    assert state().why == "tests/test_a.py changed"
    write(pkg, {"tests/test_a.py": PACKAGE["tests/test_a.py"]})
    assert state() == proven
    # Pytest's configuration, read by no executed code: one of the unit's own inputs.
    write(pkg, {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-q -x"\n'})
    assert (state().why or "").startswith("pyproject.toml")
    write(pkg, {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-q"\n'})
    assert state() == proven
    # Its records: a newer one that matches too (another driver's run) is the answer.
    assert proven.key is not None
    rec = unit_blocks.read_records(pkg, proven.key)[0][0]
    data = {**rec.data, "pkg/c.py": str(Snapshot(pkg).content_digest("pkg/c.py"))}
    other = unit_blocks.Record(
        unit_blocks.Record.digest_of(proven.key, rec.static, rec.blocks, rec.imports, data),
        rec.static,
        rec.blocks,
        rec.imports,
        data,
    )
    unit_blocks._write_records(pkg, proven.key, other)
    assert state().digest == other.digest
    # A file an import of the executed code resolves to now (a new module: its folder changed).
    went.clear()
    write(pkg, {"pkg/extra.py": "def twice(x):\n    return x * 3\n"})
    assert state("tests/test_b.py").why == "pkg/b.py: its imports now resolve to other files (pkg/extra.py)"
    (pkg / "pkg" / "extra.py").unlink()
    # A run after a change writes a new record: it is gone through, and matches.
    went.clear()
    edit(pkg, "pkg/a.py", "    return x + 1\n", "    return 1 + x\n")
    assert gates.ran(["tests/test_a.py"]) == {"tests/test_a.py": "passed"}
    newer = state()
    assert newer.why is None and newer.digest not in (proven.digest, other.digest) and went


def test_a_gate_that_ran_no_unit_takes_its_inputs_fingerprint_once(
    gates: Gates, pkg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before and after a gate its inputs are fingerprinted (a gate that changed them leaves its milestone
    stale); a gate whose every unit was answered without running ran nothing that could change them. Its
    first step's units take their digests from the snapshot of the fingerprint before (nothing ran since)."""
    from milepost.gates import command, unit_runs

    taken: list[int] = []
    real = command.gate_fingerprint
    monkeypatch.setattr(command, "gate_fingerprint", lambda *a, **k: taken.append(1) or real(*a, **k))
    snaps: list[Path] = []
    for module in (command, unit_runs):
        monkeypatch.setattr(module, "Snapshot", lambda root, *a: snaps.append(root) or Snapshot(root, *a))
    book = UnitBook(gates.passes.get, 2)
    cmd = GateCommand(name="pytest", run=PYTEST, each=TESTS)

    def gate(n: int) -> list[CommandResult]:
        origin = CachedFrom(item=1, milestone="m", attempt=n)
        log = pkg / ".milepost" / "logs" / f"fp-{n}.log"
        r = run_gate([cmd], log, default_cwd=pkg, inputs=["pkg/**"], root=pkg, units=book, origin=origin)
        assert r.passed and r.fingerprint is not None, r
        return r.commands

    assert all(c.outcome is Outcome.CACHED for c in gate(1)) and len(taken) == 1 and len(snaps) == 1
    edit(pkg, "pkg/a.py", "    return x + 1\n", "    return 1 + x\n")  # test_a's code
    taken.clear()
    assert any(c.outcome is Outcome.PASSED for c in gate(2)) and len(taken) == 2
