"""``plan scaffold`` on real packages of different layouts, copied from what
is installed in this environment (never downloaded) into a checkout-like
folder:

- click, in a ``src/`` layout: a package milepost itself imports (the copy
  in ``sys.modules`` must never be read), with an import cycle of 11 modules;
- toolz, flat, its tests moved to ``./tests`` (as a package, and not);
- zict, in a ``src/`` layout with its tests inside the package
  (``conftest.py`` and a ``utils_test.py`` helper among them).

Each plan is checked against the packages' real imports, read here
independently with :mod:`ast`: the dependencies, the cycles and their cuts,
the test mapping, the paths, and that two runs are byte-identical.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from milepost.gates.inputs import Snapshot
from milepost.scaffold import scaffold
from tests.conftest import CLI
from tests.test_scaffold import commit_all


def installed(package: str) -> Path:
    """The folder of an installed package (found here only to copy it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed in this environment")
    return Path(next(iter(spec.submodule_search_locations)))


def checkout(root: Path, package: str, src: str = "src", tests_out: bool = False, tests_package: bool = True) -> Path:
    """A copy of the installed ``package`` under ``root/src`` (or flat); with
    ``tests_out`` its ``tests`` folder is moved to ``root/tests``."""
    dest = root / src / package if src else root / package
    shutil.copytree(installed(package), dest, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
    if tests_out:
        shutil.move(dest / "tests", root / "tests")
        if not tests_package:
            (root / "tests" / "__init__.py").unlink()
    return root


def module_files(folder: Path) -> dict[str, Path]:
    out = {}
    for f in sorted(folder.rglob("*.py")):
        parts = list(f.relative_to(folder.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def imported_by_node(node: ast.Import | ast.ImportFrom, own: str | None, is_pkg: bool) -> set[str]:
    """The names one import statement imports (modules or not), absolute."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if node.level:
        if own is None:
            return set()
        parts = own.split(".") if is_pkg else own.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        src = ".".join([*parts, node.module] if node.module else parts)
    else:
        src = node.module or ""
    return {src, *(f"{src}.{a.name}" for a in node.names)}


def real_imports(path: Path, own: str | None, modules: set[str]) -> set[str]:
    """The modules of ``modules`` a file imports, anywhere in it (a whole-file
    ast walk: independent of the scaffold's own reading)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found |= imported_by_node(node, own, path.name == "__init__.py")
    return {m for m in found if m in modules and m != own}


def import_time_nodes(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a file that run as it is imported: an ast
    walk that skips function bodies and ``if TYPE_CHECKING:`` blocks."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [ast.parse(path.read_bytes())]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            assert not ast.unparse(node.test).startswith("not"), path  # none in the packages read here
            stack += node.orelse
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        stack += ast.iter_child_nodes(node)
    return found


def import_time_imports(path: Path, own: str | None, modules: set[str]) -> set[str]:
    """The modules of ``modules`` a file imports as it is imported."""
    found: set[str] = set()
    for node in import_time_nodes(path):
        found |= imported_by_node(node, own, path.name == "__init__.py")
    return {m for m in found if m in modules and m != own}


def plan_facts(result: Any) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Milestones by name, and the milestone of each module."""
    ms = {m["name"]: m for m in result.plan["milestones"]}
    cycles = {c["milestone"] for c in result.cycles if c["milestone"]}  # import-time cycles only
    of = {name: name for name in ms if name not in cycles}
    for cycle in result.cycles:
        if cycle["milestone"]:
            of |= dict.fromkeys(cycle["modules"], cycle["milestone"])
    return ms, of


def check_paths(result: Any, root: Path) -> None:
    """Every path in gates and inputs is inside the checkout, relative, and there."""
    for m in result.plan["milestones"]:
        gate = m.get("gate", [])
        runs = [gate] if isinstance(gate, str) else [g["run"] for g in gate]
        for run in runs:
            assert "site-packages" not in run and str(root) not in run, run
            for word in run.split():
                if word.endswith(".py"):
                    assert (root / word).is_file(), word
        for pattern in m.get("inputs", []):
            assert not pattern.startswith("/") and ".." not in pattern
            if pattern.startswith("module:"):  # a module of the checkout: it names files that are there
                found, missing = Snapshot(root).resolve([pattern])
                assert found and not missing, pattern
                continue
            if pattern.startswith("env:"):  # the interpreter its gate runs: there, with its distributions
                keys, why = Snapshot(root).environment(pattern, os.environ)
                assert pattern in keys and why is None, (pattern, why)
                continue
            literal = pattern.rstrip("/").replace("/*.py", "")
            assert (root / literal).exists(), pattern
        for g in gate if isinstance(gate, list) else []:
            assert all((root / f).is_file() for f in g.get("each", [])), g


def steps_units(gate: Any, tool: str = "pytest") -> list[str]:
    """The test files a scaffolded gate's step runs, one unit each."""
    if isinstance(gate, str):
        return []
    return next((list(g.get("each", [])) for g in gate if g["name"] == tool), [])


def named_after(test: Path, modules: set[str]) -> list[str]:
    """The modules a test file is named after (the scaffold maps it to them alone)."""
    stem = test.stem.removeprefix("test_").removesuffix("_test")
    return [m for m in modules if m.rsplit(".", 1)[-1] == stem]


def test_click_in_a_src_layout_is_read_from_the_checkout_not_from_the_imported_copy(tmp_path: Path) -> None:
    import click  # milepost's own dependency, imported in this process

    root = checkout(tmp_path, "click")
    result = scaffold("click", paths=[root / "src"], base=root)
    assert result.source == "src/click" and Path(click.__file__).parent != root / "src/click"
    check_paths(result, root)
    ms, of = plan_facts(result)
    files = module_files(root / "src/click")
    assert result.modules == len(files)

    # The cycles: the strongly connected components of the real imports, read here with ast. Those of the
    # imports that run at import time get a milestone, named after their most-imported member; the others
    # (click's 11 modules) are reported as no import-time cycle.
    def graph_of(read: Any) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(files)
        g.add_edges_from((m, i) for m, p in files.items() for i in read(p, m, set(files)) if not m.startswith(i + "."))
        return g

    real, timed = graph_of(real_imports), graph_of(import_time_imports)

    def components(g: nx.DiGraph) -> list[list[str]]:
        return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)

    assert (
        [c["modules"] for c in result.cycles if c["import_time"]]
        == components(timed)
        == [["click._compat", "click._winconsole"]]
    )
    deferred = [c for c in components(real) if c not in components(timed)]
    assert [c["modules"] for c in result.cycles if not c["import_time"]] == deferred and len(deferred[0]) == 11
    assert all(c["milestone"] is None for c in result.cycles if not c["import_time"])
    biggest = max(result.cycles, key=lambda c: len(c["modules"]))
    importers = {m: real.in_degree(m) for m in biggest["modules"]}
    assert importers[biggest["head"]] == max(importers.values())
    # Every module's dependencies are the milestones of what it really imports (imports of an enclosing
    # package aside), but for an import that runs only later and closes a cycle of the whole graph.
    inside = {m: i for i, c in enumerate(components(real)) for m in c}

    def gives_dep(m: str, i: str) -> bool:
        return timed.has_edge(m, i) or m not in inside or inside[m] != inside.get(i)

    for name, entry in ms.items():
        members = [m for m, n in of.items() if n == name and m in files]
        wanted = {of[i] for m in members for i in real.successors(m) if gives_dep(m, i)}
        assert set(entry.get("deps", [])) == wanted - {name}, name
    # Each cut import is where the report says, as the report says.
    for cycle in result.cycles:
        for cut in cycle["cut"]:
            line = (root / cut["file"]).read_text().splitlines()[cut["line"] - 1]
            assert cut["import"] in line.strip() or line.strip().startswith(cut["import"].split(" import ")[0])
            assert cut["kind"] == "module level"


def test_click_split_cycles_gives_an_order_that_holds_once_the_cut_imports_are_gone(tmp_path: Path) -> None:
    root = checkout(tmp_path, "click")
    result = scaffold("click", paths=[root / "src"], base=root, split_cycles=True)
    ms = {m["name"]: m for m in result.plan["milestones"]}
    order = [m["name"] for m in result.plan["milestones"]]
    files = module_files(root / "src/click")
    (cycle,) = [c for c in result.cycles if c["import_time"]]  # click's 11-module one is not: no cut
    cut_lines = {(c["file"], c["line"]) for c in cycle["cut"]}
    for m in cycle["modules"]:
        assert cycle["milestone"] in ms[m]["deps"]  # the cut comes first
        assert order.index(cycle["milestone"]) < order.index(m)
    # Every import inside the cycle that runs at import time and is not cut is honoured by the order.
    for m in cycle["modules"]:
        for node in import_time_nodes(files[m]):
            imported = {i for i in imported_by_node(node, m, files[m].name == "__init__.py") if i in files} - {m}
            where = (f"src/click/{files[m].name}", node.lineno)
            for i in imported & set(cycle["modules"]):
                if where not in cut_lines:
                    assert order.index(i) < order.index(m), (m, i, where)
    assert len(result.plan["milestones"]) == result.modules + 1


def test_click_affected_by_sees_an_edit_of_the_checkout(tmp_path: Path) -> None:
    root = checkout(tmp_path, "click")
    commit_all(root)
    core = root / "src/click/core.py"
    core.write_text(core.read_text() + "\n# an edit\n")
    (root / "src/click/extra.py").write_text("from click.core import Context\n")  # untracked
    result = scaffold("click", paths=[root / "src"], base=root, affected_by="HEAD")
    _, of = plan_facts(result)
    kept = {m["name"] for m in result.plan["milestones"]}
    assert {of["click.core"], "click.extra", "click", "click.testing"} <= kept
    assert of["click._compat"] not in kept and result.left_out > 0
    assert result.plan["objective"].startswith("Refactor click where it changed since HEAD, leaves first (")


def test_without_path_the_scaffold_names_the_copy_it_read(tmp_path: Path) -> None:
    result = scaffold("click", base=tmp_path)
    assert result.notes[0].startswith(f"read click from {installed('click')} (found on sys.path;")
    assert any(n.startswith("no inputs: click is read from") for n in result.notes)
    assert "inputs" not in result.text


@pytest.mark.parametrize("tests_package", [True, False], ids=["tests-package", "tests-folder"])
def test_toolz_flat_with_its_tests_beside_it(tmp_path: Path, tests_package: bool) -> None:
    root = checkout(tmp_path, "toolz", src="", tests_out=True, tests_package=tests_package)
    result = scaffold("toolz", tests=[root / "tests"], base=root, gates=["python3 -m pytest -q {tests}"])
    assert result.source == "toolz"
    check_paths(result, root)
    ms, of = plan_facts(result)
    files = {m: p for m, p in module_files(root / "toolz").items() if ".tests" not in m}
    tests_of = {name: set(steps_units(m.get("gate", ""))) for name, m in ms.items()}
    found = sorted((root / "tests").rglob("test_*.py"))
    assert found
    for t in found:
        own = "tests." + t.stem if tests_package else None
        named = named_after(t, set(files))
        # Named after a module: that module's test, whatever else it imports; else mapped by its imports.
        for m in named or real_imports(t, own, set(files)):
            if m in of:
                assert t.relative_to(root).as_posix() in tests_of[of[m]], (t.name, m)
        if named:
            assert {n for n, ts in tests_of.items() if t.relative_to(root).as_posix() in ts} == {of[m] for m in named}
    assert "tests/test_signatures.py" in tests_of[of["toolz._signatures"]]  # `import toolz._signatures as _sigs`
    assert "tests/test_dicttoolz.py" in tests_of["toolz.dicttoolz"]
    assert not any("__init__" in t for ts in tests_of.values() for t in ts)
    # The in-package tests of toolz.sandbox are tests too, not milestones.
    assert not [n for n in ms if ".tests" in n]


def test_zict_with_its_tests_inside_the_package(tmp_path: Path) -> None:
    root = checkout(tmp_path, "zict")
    gates = ["python3 -m compileall -q {path}", "python3 -m pytest -q {tests}"]
    result = scaffold("zict", paths=[root / "src"], base=root, gates=gates)
    check_paths(result, root)
    ms, of = plan_facts(result)
    assert not [n for n in ms if n.startswith("zict.tests")]
    in_tests = len(list((root / "src/zict/tests").glob("*.py")))
    assert f"{in_tests} modules of zict are tests or their helpers: no milestones" in result.notes

    def tests_of(name: str) -> list[str]:
        return steps_units(ms[name].get("gate", []))

    every = {t for name in ms for t in tests_of(name)}
    assert "src/zict/tests/conftest.py" not in every and "src/zict/tests/utils_test.py" not in every
    # `from zict import Buffer`: the name zict re-exports from zict.buffer.
    assert "src/zict/tests/test_buffer.py" in tests_of("zict.buffer")
    assert "src/zict/tests/test_buffer.py" not in tests_of("zict.file")
    # The helpers and conftest the tests read are inputs of the milestones running them.
    buffer_reads, _ = Snapshot(root).resolve(ms["zict.buffer"]["inputs"])
    assert {"src/zict/tests/conftest.py", "src/zict/tests/utils_test.py"} <= buffer_reads
    files = {m: p for m, p in module_files(root / "src/zict").items() if not m.startswith("zict.tests")}
    for t in sorted((root / "src/zict/tests").glob("test_*.py")):
        for m in named_after(t, set(files)) or real_imports(t, "zict.tests." + t.stem, set(files)):
            assert t.relative_to(root).as_posix() in tests_of(of[m]), (t.name, m)


def test_two_processes_give_byte_identical_plans(tmp_path: Path) -> None:
    root = checkout(tmp_path / "click-co", "click")
    checkout(root, "zict")
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        runs = []
        for args in (["click", "--split-cycles"], ["zict", "--gate", "python3 -m pytest {tests}"]):
            p = subprocess.run(
                [sys.executable, "-m", "milepost", "plan", "scaffold", *args, "--path", "src"],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert p.returncode == 0, p.stderr
            runs.append((p.stdout, p.stderr))
        outs.append(runs)
    assert outs[0] == outs[1]
    assert "import cycle click." in outs[0][0][1]
    again = scaffold("click", paths=[root / "src"], base=root, split_cycles=True)
    assert again.text == outs[0][0][0]  # in-process: the same text


def test_the_cli_reads_the_checkout_of_a_package_milepost_imports(tmp_path: Path) -> None:
    """The issue's report: `--path src` in a click checkout wrote gates for site-packages."""
    root = checkout(tmp_path, "click")
    r = CLI(root)("plan", "scaffold", "click", "--path", "src", "--gate", "python3 -m compileall -q {path}")
    assert r.code == 0, r.err
    assert "src/click/core.py" in r.out and "site-packages" not in r.out
    n = len(module_files(root / "src/click"))
    assert r.out.splitlines()[0].endswith(f"one milestone per module ({n} modules of click, read from src/click),")
