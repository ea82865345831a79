"""``milepost plan scaffold`` on import cycles: named after their most
imported module, explained with the imports that close them (deferred ones
marked), and split with ``--split-cycles`` into a cut and one milestone per
module in an order that holds."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import InProcessCLI
from tests.test_scaffold import by_name, make_package, plan_of


def test_an_import_cycle_is_named_after_its_most_imported_module_and_explained(tmp_path: Path) -> None:
    make_package(tmp_path, "loop", {
        "": "",
        "a": "from loop import b\n",
        "b": "import loop.a\n",
        "c": "from loop.a import x\n",
        "leaf": "",
    })  # fmt: skip
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
        from cyc.model import Model

        def save(m):
            from cyc import view
            return view
        """,
    "view": "from cyc.model import Model\nfrom cyc.store import save\n",
    "app": "from cyc.view import View\n",
}


def test_a_cycle_reports_its_imports_and_which_are_deferred(tmp_path: Path) -> None:
    make_package(tmp_path, "cyc", CYCLE)
    data = InProcessCLI(tmp_path).json("plan", "scaffold", "cyc", "--path", "src")
    (cycle,) = data["cycles"]
    assert cycle["modules"] == ["cyc.model", "cyc.store", "cyc.view"]
    assert cycle["milestone"] == "cyc.view-cycle"  # three importers (model, store, app); the others two
    assert cycle["path"] == "cyc.view -> cyc.model -> cyc.view"
    assert cycle["import_time"] is True  # model <-> store at module level
    # Three two-module cycles need three cuts; only model <-> store needs a module-level one
    # (model's, before store's: ties by name), the other two are the deferred imports.
    assert [(c["file"], c["line"], c["kind"]) for c in cycle["cut"]] == [
        ("src/cyc/model.py", 4, "module level"),
        ("src/cyc/model.py", 7, "TYPE_CHECKING"),
        ("src/cyc/store.py", 4, "in a function"),
    ]
    assert cycle["cut"][1]["import"] == "from cyc.view import View"
    assert cycle["summary"] == "closed by 3 imports: 1 at module level, 2 under TYPE_CHECKING or in a function"


def test_split_cycles_cuts_first_then_one_milestone_per_module_in_an_order_that_holds(tmp_path: Path) -> None:
    make_package(tmp_path, "cyc", CYCLE)
    cli = InProcessCLI(tmp_path)
    cli("init", check=True)
    data = cli.json("plan", "scaffold", "cyc", "--path", "src", "--split-cycles", "--apply")
    ms = by_name(data["plan"])
    names = [m["name"] for m in data["plan"]["milestones"]]
    (cycle,) = data["cycles"]
    assert cycle["milestone"] == "cyc.view-cycle-cut"
    cut_ms = ms["cyc.view-cycle-cut"]
    assert cut_ms["deps"] == ["cyc.base"]  # what the cycle imports outside itself
    assert all(f"{c['file']}:{c['line']}" in cut_ms["acceptance"] for c in cycle["cut"])
    for member in ("cyc.model", "cyc.store", "cyc.view"):
        assert "cyc.view-cycle-cut" in ms[member]["deps"]
    # Every import not cut is honoured: the imported module's milestone comes first.
    cut_pairs = {(c["file"], c["line"]) for c in cycle["cut"]}
    edges = [
        ("cyc.model", "cyc.store", ("src/cyc/model.py", 4)),
        ("cyc.model", "cyc.view", ("src/cyc/model.py", 7)),
        ("cyc.store", "cyc.model", ("src/cyc/store.py", 1)),
        ("cyc.store", "cyc.view", ("src/cyc/store.py", 4)),
        ("cyc.view", "cyc.model", ("src/cyc/view.py", 1)),
        ("cyc.view", "cyc.store", ("src/cyc/view.py", 2)),
    ]
    for importer, imported, where in edges:
        if where not in cut_pairs:
            assert imported in ms[importer].get("deps", []), (importer, imported)
            assert names.index(imported) < names.index(importer)
    assert data["item"] == 1 and len(cli.json("list")["milestones"]) == len(names)
