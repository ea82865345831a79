"""Import cycles, honestly: ``plan scaffold`` gives a milestone only to a cycle
that exists at import time (named after its most imported module, explained
with the module-level imports that close it, split with ``--split-cycles``
into a cut whose gate fails until the cycle is gone, then one milestone per
module). A cycle that closes only through ``TYPE_CHECKING`` or function-level
imports is reported as no import-time cycle and its modules keep their own
milestones. ``plan cycles`` is the check: packages generated here, real files."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, InProcessCLI
from tests.test_scaffold import by_name, make_package, plan_of
from tests.test_scaffold_real import checkout


@pytest.fixture(autouse=True)
def _no_active_virtualenv(monkeypatch: pytest.MonkeyPatch) -> None:
    """An activated virtualenv would add the scaffold's note on it to the outputs compared here."""
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)


def test_an_import_cycle_is_named_after_its_most_imported_module_and_explained(tmp_path: Path) -> None:
    make_package(
        tmp_path,
        "loop",
        {
            "": "",
            "a": "from loop import b\n",
            "b": "import loop.a\n",
            "c": "from loop.a import x\n",
            "leaf": "",
        },
    )
    cli = InProcessCLI(tmp_path)
    r = cli("plan", "scaffold", "loop", "--path", "src")
    assert r.code == 0, r.err
    # loop.a has two importers (b, c), loop.b one: the cycle is named after loop.a.
    assert (
        "import cycle loop.a-cycle (2 modules): loop.a -> loop.b -> loop.a; closed by 1 module-level import:" in r.err
    )
    # A tie (one import each way) goes to the module placed first by name: loop.a's import is cut.
    assert "  src/loop/a.py:1 from loop import b\n" in r.err
    assert "#   import cycle loop.a-cycle (2 modules): loop.a -> loop.b -> loop.a" in r.out
    ms = by_name(plan_of(r.out))
    assert set(ms) == {"loop", "loop.a-cycle", "loop.c", "loop.leaf"}
    assert ms["loop.c"]["deps"] == ["loop.a-cycle"]
    assert ms["loop.a-cycle"]["gate"] == "python3 -m compileall -q src/loop/a.py src/loop/b.py"
    assert ms["loop.a-cycle"]["acceptance"].startswith("loop.a loop.b ")


TYPE_CHECKING_ONLY = {
    "": "",
    "model": "from tc.store import save\n",
    "store": """\
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from tc.model import Model
        """,
    "hints": """\
        import typing

        if typing.TYPE_CHECKING:
            from tc import model
        """,  # no cycle: a TYPE_CHECKING import still orders the plan
}


def test_a_cycle_closed_only_under_type_checking_is_no_import_time_cycle(tmp_path: Path) -> None:
    make_package(tmp_path, "tc", TYPE_CHECKING_ONLY)
    cli = InProcessCLI(tmp_path)
    for split in ([], ["--split-cycles"]):
        r = cli("plan", "scaffold", "tc", "--path", "src", *split)
        assert r.code == 0, r.err
        line = (
            "no import-time cycle among 2 modules around tc.model (tc.model -> tc.store -> tc.model): it closes only"
            " through 1 import under TYPE_CHECKING or in a function; each module keeps its own milestone, ordered by"
            " its import-time imports"
        )
        assert r.err.splitlines()[0] == line
        assert "# import cycles: none at import time\n#   " + line + "\n" in r.out
        ms = by_name(plan_of(r.out))
        assert set(ms) == {"tc", "tc.model", "tc.store", "tc.hints"}  # no cycle or cut milestone
        assert "deps" not in ms["tc.store"]  # its TYPE_CHECKING import would close the cycle: no dep
        assert ms["tc.model"]["deps"] == ["tc.store"]
        assert ms["tc.hints"]["deps"] == ["tc.model"]
    (cycle,) = cli.json("plan", "scaffold", "tc", "--path", "src")["cycles"]
    assert cycle["milestone"] is None and cycle["import_time"] is False and cycle["cut"] == []
    assert cycle["deferred"] == [
        {"file": "src/tc/store.py", "line": 4, "import": "from tc.model import Model", "kind": "TYPE_CHECKING"}
    ]


FUNCTION_LEVEL_ONLY = {
    "": "",
    "a": "from fl import b\n",
    "b": """\
        from fl import c

        class Thing:
            def make(self):
                import fl.a
                return fl.a
        """,
    "c": """\
        def run():
            from fl.a import thing
            return thing
        """,
}


def test_a_cycle_closed_only_in_functions_is_no_import_time_cycle(tmp_path: Path) -> None:
    make_package(tmp_path, "fl", FUNCTION_LEVEL_ONLY)
    cli = InProcessCLI(tmp_path)
    data = cli.json("plan", "scaffold", "fl", "--path", "src", "--split-cycles")
    (cycle,) = data["cycles"]
    assert cycle["import_time"] is False and cycle["milestone"] is None
    assert cycle["modules"] == ["fl.a", "fl.b", "fl.c"]
    assert [(d["file"], d["line"], d["kind"]) for d in cycle["deferred"]] == [
        ("src/fl/b.py", 5, "in a function"),
        ("src/fl/c.py", 2, "in a function"),
    ]
    ms = by_name(data["plan"])
    assert set(ms) == {"fl", "fl.a", "fl.b", "fl.c"}
    assert [m["name"] for m in data["plan"]["milestones"]] == ["fl", "fl.c", "fl.b", "fl.a"]
    assert ms["fl.a"]["deps"] == ["fl.b"] and ms["fl.b"]["deps"] == ["fl.c"] and "deps" not in ms["fl.c"]
    r = cli("plan", "cycles", "fl", "--path", "src", "--check")
    assert r.code == 0, r.err
    assert r.out.splitlines()[0] == "fl (4 modules, read from src/fl): no import-time cycle"


CYCLE = {
    "": "",
    "base": "",
    "model": """\
        from typing import TYPE_CHECKING

        from cyc import base
        from cyc.store import save

        if TYPE_CHECKING:
            from cyc.view import View
        """,
    "store": """\
        try:
            from cyc.model import Model
        except ImportError:
            Model = None

        def save(m):
            from cyc import view
            return view
        """,
    "view": "from cyc.model import Model\nfrom cyc.store import save\n",
    "app": "from cyc.view import View\n",
}


def test_a_real_cycle_inside_a_deferred_one_is_the_only_cycle_milestone(tmp_path: Path) -> None:
    make_package(tmp_path, "cyc", CYCLE)
    data = InProcessCLI(tmp_path).json("plan", "scaffold", "cyc", "--path", "src")
    real, deferred = data["cycles"]
    # model <-> store at module level (a try block runs at import time): a real cycle.
    assert real["modules"] == ["cyc.model", "cyc.store"] and real["import_time"] is True
    assert real["milestone"] == "cyc.model-cycle"  # two importers each: ties by name
    assert real["path"] == "cyc.model -> cyc.store -> cyc.model"
    assert [(c["file"], c["line"], c["kind"]) for c in real["cut"]] == [("src/cyc/model.py", 4, "module level")]
    # view closes a larger cycle only through model's TYPE_CHECKING and store's function-level import.
    assert deferred["modules"] == ["cyc.model", "cyc.store", "cyc.view"] and deferred["milestone"] is None
    assert deferred["summary"].startswith("no import-time cycle beyond the import-time cycle at cyc.model among 3")
    assert [(d["file"], d["line"]) for d in deferred["deferred"]] == [("src/cyc/model.py", 7), ("src/cyc/store.py", 7)]
    ms = by_name(data["plan"])
    assert set(ms) == {"cyc", "cyc.base", "cyc.model-cycle", "cyc.view", "cyc.app"}
    assert ms["cyc.model-cycle"]["deps"] == ["cyc.base"]  # not cyc.view: those imports are deferred
    assert ms["cyc.view"]["deps"] == ["cyc.model-cycle"]
    assert ms["cyc.app"]["deps"] == ["cyc.view"]


def test_split_cycles_cuts_only_the_import_time_imports_then_one_milestone_per_module(tmp_path: Path) -> None:
    make_package(tmp_path, "cyc", CYCLE)
    cli = InProcessCLI(tmp_path)
    cli("init", check=True)
    data = cli.json("plan", "scaffold", "cyc", "--path", "src", "--split-cycles", "--apply")
    ms = by_name(data["plan"])
    names = [m["name"] for m in data["plan"]["milestones"]]
    cut_ms = ms["cyc.model-cycle-cut"]
    assert cut_ms["deps"] == ["cyc.base"]  # what the cycle imports outside itself
    assert "(src/cyc/model.py:4 from cyc.store import save)" in cut_ms["acceptance"]
    assert "model.py:7" not in cut_ms["acceptance"] and "store.py:7" not in cut_ms["acceptance"]
    assert cut_ms["gate"][0] == {
        "name": "cycles",
        "run": "milepost plan cycles cyc --path src --check --through cyc.model,cyc.store",
    }
    assert ms["cyc.model"]["deps"] == ["cyc.base", "cyc.model-cycle-cut"]
    assert ms["cyc.store"]["deps"] == ["cyc.model-cycle-cut", "cyc.model"]  # the import it keeps
    assert ms["cyc.view"]["deps"] == ["cyc.model", "cyc.store"]
    assert names.index("cyc.model-cycle-cut") < names.index("cyc.model") < names.index("cyc.store")
    assert data["item"] == 1 and len(cli.json("list")["milestones"]) == len(names)


def test_the_cut_milestones_gate_fails_until_the_cycle_is_cut_in_the_files(tmp_path: Path, milepost_bin: Path) -> None:
    pkg = make_package(
        tmp_path,
        "loop",
        {
            "": "",
            "a": "from loop import b\n\ndef f():\n    return b\n",
            "b": "import loop.a\n",
            "other": "import loop.more\n",
            "more": "import loop.other\n",  # a second cycle, not the one the milestone cuts
        },
    )
    cli = InProcessCLI(tmp_path)
    cli.extra["PATH"] = f"{milepost_bin}:{cli.env['PATH']}"
    cli("init", check=True)
    cli("plan", "scaffold", "loop", "--path", "src", "--split-cycles", "--apply", check=True)
    r = cli("plan", "cycles", "loop", "--path", "src", "--check", "--through", "loop.a,loop.b")
    assert r.code == 1
    assert r.err == "import-time cycle remains in loop through loop.a, loop.b: cut src/loop/a.py:1 from loop import b\n"
    assert cli("plan", "cycles", "loop", "--path", "src", "--check", "--through", "loop.more").code == 1
    cli("start", "loop.a-cycle-cut", check=True)
    failed = cli("--json", "done", "loop.a-cycle-cut")
    assert failed.code == 1 and failed.data["milestone"]["status"] == "needs_fix", failed.out
    check = failed.data["gate_run"]["commands"][0]
    assert check["name"] == "cycles" and check["exit_code"] == 1
    assert "import-time cycle remains in loop through loop.a, loop.b: cut src/loop/a.py:1" in check["tail"]
    # The cycle is cut: a's import moves into the function that uses it.
    (pkg / "a.py").write_text("def f():\n    from loop import b\n\n    return b\n")
    r = cli("plan", "cycles", "loop", "--path", "src", "--check", "--through", "loop.a,loop.b")
    assert r.code == 0, r.err
    assert r.out.startswith("loop (5 modules, read from src/loop): no import-time cycle through loop.a, loop.b\n")
    assert cli("plan", "cycles", "loop", "--path", "src", "--check").code == 1  # loop.more's cycle is still there
    cli("start", "loop.a-cycle-cut", check=True)
    passed = cli("--json", "done", "loop.a-cycle-cut")
    assert passed.code == 0 and passed.data["milestone"]["status"] == "done", passed.out


def test_plan_cycles_reports_as_json_and_imports_neither_prefect_nor_a_store(tmp_path: Path) -> None:
    make_package(tmp_path, "cyc", CYCLE)
    data = InProcessCLI(tmp_path).json("plan", "cycles", "cyc", "--path", "src")
    assert data["import_time"] == 1 and data["units"] == 6 and data["source"] == "src/cyc"
    assert [c["import_time"] for c in data["cycles"]] == [True, False]
    assert data["cycles"][0]["cut"][0]["line"] == 4
    checked = InProcessCLI(tmp_path)("--json", "plan", "cycles", "cyc", "--path", "src", "--check")
    assert checked.code == 1 and checked.err == "" and checked.data["import_time"] == 1  # the outcome, no error
    script = "import sys\nfrom milepost.cli import main\nmain(['plan', 'cycles', 'cyc', '--path', 'src', '--check'])\n"
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "import-time cycle remains in cyc: cut src/cyc/model.py:4" in p.stderr
    q = subprocess.run(
        [sys.executable, "-c", script.replace(", '--check'", "") + "print(sorted(sys.modules))"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert q.returncode == 0, q.stderr
    loaded = q.stdout.splitlines()[-1]
    assert "'networkx'" in loaded and "'prefect'" not in loaded and "'sqlalchemy'" not in loaded


def test_plan_cycles_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    make_package(tmp_path, "cyc", CYCLE)
    cli = InProcessCLI(tmp_path)
    r = cli("plan", "cycles", "nope", "--path", "src")
    assert r.code == 2 and r.err.count("\n") == 1
    assert "no Python package 'nope' found in src: --path takes the folder that holds nope/__init__.py" in r.err
    r = cli("plan", "cycles", "cyc", "--path", "missing")
    assert r.code == 2 and r.err.count("\n") == 1 and "'missing' does not exist" in r.err
    r = cli("plan", "cycles", "cyc", "--path", "src", "--check", "--through", "cyc.model,cyc.nope")
    assert r.code == 2 and r.err.count("\n") == 1
    assert "--through names cyc.nope: not a module of cyc (read from src/cyc); give some of its 6 modules" in r.err
    r = cli("plan", "cycles", "nope")  # no --path: nowhere to be found
    assert r.code == 2 and "no Python package 'nope' found (in " in r.err and "pass --path DIR" in r.err


def test_a_cycle_between_packages_is_checked_between_packages(tmp_path: Path) -> None:
    make_package(tmp_path, "pk", {"": "", "x.a": "from pk.y import b\n", "y.b": "", "y.c": "from pk.x import a\n"})
    cli = InProcessCLI(tmp_path)
    assert cli("plan", "cycles", "pk", "--path", "src", "--check").code == 0  # no cycle between modules
    data = cli.json("plan", "scaffold", "pk", "--path", "src", "--level", "package", "--split-cycles")
    gate = by_name(data["plan"])["pk.x-cycle-cut"]["gate"][0]["run"]
    assert gate == "milepost plan cycles pk --path src --level package --check --through pk.x,pk.y"
    args = gate.split()[1:]
    r = cli(*args)
    assert r.code == 1 and r.err.endswith("through pk.x, pk.y: cut src/pk/x/a.py:1 from pk.y import b\n")
    (tmp_path / "src/pk/y/c.py").write_text("def later():\n    from pk.x import a\n\n    return a\n")
    assert cli(*args).code == 0


def test_jinja2s_twenty_module_cycle_is_no_import_time_cycle(tmp_path: Path) -> None:
    """Issue 29's package: its 20-module 'cycle' closes only through TYPE_CHECKING and function-level imports;
    --split-cycles asked to cut them all, and the cut's gate passed without a cut."""
    root = checkout(tmp_path, "jinja2")
    cli = InProcessCLI(root)
    data = cli.json("plan", "scaffold", "jinja2", "--path", "src", "--split-cycles")
    (cycle,) = data["cycles"]
    assert cycle["import_time"] is False and cycle["milestone"] is None and len(cycle["modules"]) >= 15
    assert all(d["kind"] != "module level" for d in cycle["deferred"])
    names = [m["name"] for m in data["plan"]["milestones"]]
    assert len(names) == data["modules"] and not [n for n in names if n.endswith(("-cycle", "-cycle-cut"))]
    r = cli("plan", "cycles", "jinja2", "--path", "src", "--check", "--through", ",".join(cycle["modules"]))
    assert r.code == 0, r.err


def test_the_documented_click_example_is_what_the_commands_print(tmp_path: Path) -> None:
    """docs/scaffold.md's click 8.5.1 lines, from the scaffold and from plan cycles --check."""
    if importlib.metadata.version("click") != "8.5.1":
        pytest.skip("the page shows click 8.5.1")
    page = (EXAMPLES.parent / "docs" / "scaffold.md").read_text()
    blocks = page[page.index("In a copy of click 8.5.1's") :].split("```")
    root = checkout(tmp_path, "click")
    cli = InProcessCLI(root)
    r = cli("plan", "scaffold", "click", "--path", "src", "-o", "plan.yaml", check=True)
    assert (r.err + r.out).splitlines() == blocks[1].removeprefix("text\n").splitlines()
    split = cli("plan", "scaffold", "click", "--path", "src", "--split-cycles", check=True).out
    shown = [line for line in blocks[3].removeprefix("yaml\n").splitlines() if line]
    assert "\n".join(shown) in split
    session = blocks[5].removeprefix("text\n").splitlines()
    command = session[0].removeprefix("$ milepost ").split()
    checked = cli(*command)
    assert checked.code == int(session[-1]) == 1
    assert (checked.out + checked.err).splitlines() == session[1:-2]
