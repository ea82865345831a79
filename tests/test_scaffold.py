"""``milepost plan scaffold``: refactor plans from real import graphs (grimp),
through the CLI, on the example project and on packages made here (cycles,
deferred imports, tests in both layouts, a git history, inputs and staleness).
Real installed packages are scaffolded in ``test_scaffold_real.py``."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from milepost.scaffold.render import command_name
from tests.conftest import CLI, EXAMPLES, InProcessCLI


def make_package(root: Path, name: str, modules: dict[str, str], src: str = "src") -> Path:
    """A package under ``root/src``: ``modules`` maps dotted names (below the
    package) to their source; "" is the package's __init__."""
    pkg = root / src / name
    for mod, source in modules.items():
        parts = mod.split(".") if mod else []
        path = pkg.joinpath(*parts[:-1], parts[-1] + ".py") if parts else pkg / "__init__.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in [path.parent, *path.parent.parents]:
            if parent == root / src:
                break
            (parent / "__init__.py").touch()
        path.write_text(textwrap.dedent(source))
    return pkg


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def plan_of(out: str) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(out)


def by_name(plan: dict) -> dict:  # type: ignore[type-arg]
    return {m["name"]: m for m in plan["milestones"]}


GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def commit_all(root: Path) -> None:
    if not (root / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-qm", "state"], cwd=root, check=True)


@pytest.fixture(autouse=True)
def _no_active_virtualenv(monkeypatch: pytest.MonkeyPatch) -> None:
    """An activated virtualenv would add the scaffold's note on it to every output here."""
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)


@pytest.fixture
def example(tmp_path: Path) -> CLI:
    ws = tmp_path / "refactor"
    shutil.copytree(EXAMPLES / "refactor", ws)
    cli = InProcessCLI(ws)
    cli("init", check=True)
    return cli


def test_the_example_scaffolds_in_import_order_with_its_tests(example: CLI) -> None:
    r = example(
        "plan",
        "scaffold",
        "kv",
        "--path",
        "src",
        "--gate",
        "python3 -m compileall -q {path}",
        "--gate",
        "python3 -m unittest -q {tests}",
        "--final",
        "all-tests",
        "--final-gate",
        "python3 -m unittest discover -q -s tests -t .",
    )
    assert r.code == 0, r.err
    assert r.out.startswith("# scaffolded by `milepost plan scaffold kv`") and "# import cycles: none" in r.out
    assert "(5 modules of kv, read from src/kv)" in r.out.splitlines()[0]
    plan = plan_of(r.out)
    assert plan["plan_status"] == "draft"
    assert plan["objective"] == "Refactor kv module by module, leaves first (5 modules)"
    names = [m["name"] for m in plan["milestones"]]
    assert names == ["kv", "kv.interfaces", "kv.mod_a", "kv.mod_b", "kv.mod_c", "all-tests"]  # leaves first
    deps = {m["name"]: m.get("deps", []) for m in plan["milestones"]}
    assert deps == {
        "kv": [],
        "kv.interfaces": [],
        "kv.mod_a": ["kv.interfaces"],
        "kv.mod_b": ["kv.interfaces"],
        "kv.mod_c": ["kv.interfaces", "kv.mod_b"],
        "all-tests": ["kv", "kv.mod_a", "kv.mod_c"],
    }
    ms = by_name(plan)
    # A test named after a module tests that module (test_mod_c imports kv.mod_b too: not kv.mod_b's test).
    assert ms["kv.mod_b"]["gate"] == [
        {"name": "compileall", "run": "python3 -m compileall -q {file}", "each": ["src/kv/mod_b.py"]},
        {"name": "unittest", "run": "python3 -m unittest -q {file}", "each": ["tests/test_mod_b.py"]},
    ]  # a {path} step of one module file is a unit too: kept under the digest of the file and its imports
    # Inputs: module entries, read when checked: its module (with what it imports) and the tests its gate runs.
    # And the interpreter its gate runs (env:python3, found on PATH when checked), with its distributions.
    assert ms["kv.mod_b"]["inputs"] == ["module:kv.mod_b", "module:tests/test_mod_b.py", "env:python3"]
    assert ms["kv.mod_c"]["inputs"] == ["module:kv.mod_c", "module:tests/test_mod_c.py", "env:python3"]
    assert ms["kv.interfaces"]["inputs"] == ["module:kv.interfaces", "env:python3"]
    assert ms["all-tests"]["inputs"] == ["src/kv/", "tests/", "env:python3"]  # the package and the tests
    # What the entries stand for now: the module, its package's __init__ (run by importing it), what it
    # imports, and the test file with what it imports (test_mod_b imports the package: the whole of it).
    # No test imports the package itself: its gate is the compile unit alone.
    assert ms["kv"]["gate"] == [
        {"name": "compileall", "run": "python3 -m compileall -q {file}", "each": ["src/kv/__init__.py"]}
    ]
    assert (
        "`python3 -m unittest -q {tests}` left out of 2 milestones no test file is mapped to: kv, kv.interfaces"
        in r.err
    )
    assert "tests: 3 of 3 test files mapped to modules: 3 by name (kv.mod_a, kv.mod_b, kv.mod_c), 0 by their" in r.err


def test_a_re_proof_after_an_edit_compiles_only_the_modules_it_reaches(example: CLI, tmp_path: Path) -> None:
    """The scaffold's {path} step of one module is a unit: after an edit of
    mod_b, verify compiles mod_b and mod_c (which imports it), not the rest."""
    ledger = tmp_path / "compiled.txt"
    ws = example.cwd
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    compile_gate = f"echo {{path}} >> {ledger} && python3 -m compileall -q {{path}}"
    example(
        "plan",
        "scaffold",
        "kv",
        "--path",
        "src",
        "--gate",
        compile_gate,
        "--gate",
        "python3 -m unittest -q {tests}",
        "--apply",
        check=True,
    )
    example("item", "update", "1", "--plan-status", "ready", check=True)
    for name in ["kv", "kv.interfaces", "kv.mod_a", "kv.mod_b", "kv.mod_c"]:
        example("start", name, check=True)
        example("done", name, check=True)
    assert sorted(ledger.read_text().split()) == [
        f"src/kv/{m}.py" for m in ("__init__", "interfaces", "mod_a", "mod_b", "mod_c")
    ]
    mod_b = ws / "src" / "kv" / "mod_b.py"
    mod_b.write_text(mod_b.read_text() + "# edited\n")
    stale = {m["name"] for m in example.json("list")["milestones"] if m.get("view") == "stale"}
    assert stale == {"kv.mod_b", "kv.mod_c"}
    before = len(ledger.read_text().split())
    r = example("verify")
    assert r.code == 0, r.err
    assert sorted(ledger.read_text().split()[before:]) == ["src/kv/mod_b.py", "src/kv/mod_c.py"]
    # An edit of mod_c's test makes kv.mod_c stale, and its re-proof runs the test alone: mod_c.py is the same.
    test_c = ws / "tests" / "test_mod_c.py"
    test_c.write_text(test_c.read_text() + "# edited\n")
    assert {m["name"] for m in example.json("list")["milestones"] if m.get("view") == "stale"} == {"kv.mod_c"}
    assert example("verify").code == 0
    assert len(ledger.read_text().split()) == before + 2
    units = example.json("runs", "kv.mod_c")["runs"][-1]["commands"]
    assert [(u["file"], u["outcome"]) for u in units] == [
        ("src/kv/mod_c.py", "cached"),
        ("tests/test_mod_c.py", "passed"),
    ]


def test_the_final_gate_defaults_to_the_modules_test_command_over_every_test_file(example: CLI) -> None:
    r = example(
        "plan",
        "scaffold",
        "kv",
        "--path",
        "src",
        "--gate",
        "python3 -m compileall -q {path}",
        "--gate",
        "python3 -m unittest -q {tests}",
        "--final",
        "all-tests",
    )
    assert r.code == 0, r.err
    final = by_name(plan_of(r.out))["all-tests"]
    assert final["gate"] == [
        {
            "name": "unittest",
            "run": "python3 -m unittest -q {file}",
            "each": ["tests/test_mod_a.py", "tests/test_mod_b.py", "tests/test_mod_c.py"],
        }
    ]
    assert "differs from the modules'" not in r.err  # the same units: nothing to note
    # No --gate with {tests}: the final milestone has no gate (as before).
    bare = example("plan", "scaffold", "kv", "--path", "src", "--final", "all-tests")
    assert bare.code == 0, bare.err
    assert "gate" not in by_name(plan_of(bare.out))["all-tests"]


def units(gate: Any) -> list[str]:
    """The files a scaffolded gate runs its ``{tests}`` step on (one unit each)."""
    if isinstance(gate, str):
        return []
    return [f for g in gate for f in g.get("each", [])]


def test_scaffold_edit_apply_drive_order(example: CLI) -> None:
    """docs/scaffold.md's loop: scaffold to a file, edit it, apply it, work it."""
    example("plan", "scaffold", "kv", "--path", "src", "-o", "refactor.yaml", check=True)
    path = example.cwd / "refactor.yaml"
    text = path.read_text().replace("plan_status: draft", "plan_status: ready")
    path.write_text(text)
    item = example.json("plan", "apply", "refactor.yaml")
    assert item["plan_status"] == "ready" and len(item["milestones"]) == 5
    worked = []
    while (nxt := example.json("next")["milestone"]) is not None:
        example("start", nxt["name"], check=True)
        example("done", nxt["name"], check=True)
        worked.append(nxt["name"])
    assert worked == ["kv", "kv.interfaces", "kv.mod_a", "kv.mod_b", "kv.mod_c"]


def test_apply_creates_the_item_at_once(example: CLI) -> None:
    data = example.json("plan", "scaffold", "kv", "--path", "src", "--apply")
    assert data["item"] == 1 and data["milestones"] == 5 and data["cycles"] == []
    assert example.json("next")["milestone"]["name"] == "kv"
    r = example("plan", "scaffold", "kv", "--path", "src", "-o", "again.yaml")
    assert r.out == "wrote again.yaml: 5 milestones from 5 modules\n"


def test_editing_a_leaf_makes_exactly_it_and_its_importers_stale(tmp_path: Path) -> None:
    """Issue 16, item 8: the scaffolded inputs bind each proof to its module,
    what it imports (transitively) and its tests."""
    make_package(
        tmp_path,
        "app",
        {
            "": "",
            "leaf": "X = 1\n",
            "mid": "from app.leaf import X\n",
            "top": "from app import mid\n",
            "other": "Y = 2\n",
        },
    )
    write(
        tmp_path,
        {
            "tests/test_mid.py": "from app.mid import X\n\ndef test_x():\n    assert X == 1\n",
            "tests/test_other.py": "from app import other\n\ndef test_y():\n    assert other.Y == 2\n",
            "tests/conftest.py": "",
        },
    )
    cli = InProcessCLI(tmp_path)
    cli("init", check=True)
    cli(
        "plan",
        "scaffold",
        "app",
        "--path",
        "src",
        "--gate",
        "python3 -m compileall -q {path}",
        "--gate",
        "python3 -m compileall -q {tests}",
        "-o",
        "plan.yaml",
        check=True,
    )
    plan = plan_of((tmp_path / "plan.yaml").read_text())
    ms = by_name(plan)
    assert ms["app.top"]["inputs"] == ["module:app.top", "env:python3"]
    assert ms["app.mid"]["inputs"] == ["module:app.mid", "module:tests/test_mid.py", "env:python3"]
    assert ms["app.other"]["inputs"] == ["module:app.other", "module:tests/test_other.py", "env:python3"]
    cli("plan", "apply", "plan.yaml", check=True)
    while (nxt := cli.json("next")["milestone"]) is not None:
        cli("start", nxt["name"], check=True)
        cli("done", nxt["name"], check=True)

    def stale() -> set[str]:
        return {m["name"] for m in cli.json("list")["milestones"] if m.get("view") == "stale"}

    assert stale() == set()
    (tmp_path / "src/app/leaf.py").write_text("X = 1  # edited\n")
    assert stale() == {"app.leaf", "app.mid", "app.top"}  # not app, app.other
    (tmp_path / "src/app/leaf.py").write_text("X = 1\n")
    (tmp_path / "tests/test_other.py").write_text("from app import other\n\ndef test_y():\n    assert other.Y\n")
    assert stale() == {"app.other"}  # a test file: the milestones whose gate runs it


def test_level_package_groups_modules_by_package(tmp_path: Path) -> None:
    make_package(
        tmp_path,
        "app",
        {
            "": "",
            "core.models": "",
            "core.rules": "from app.core import models\n",
            "web.views": "from app.core.rules import x\n",
            "web.urls": "from app.web import views\n",
            "cli": "from app.web import urls\n",
        },
    )
    r = InProcessCLI(tmp_path)("plan", "scaffold", "app", "--path", "src", "--level", "package", check=True)
    plan = plan_of(r.out)
    assert {m["name"]: m.get("deps", []) for m in plan["milestones"]} == {
        "app.core": [],
        "app.web": ["app.core"],
        "app": ["app.web"],
    }
    assert plan["objective"] == "Refactor app package by package, leaves first (3 packages)"
    gate = by_name(plan)["app.core"]["gate"]
    assert gate == "python3 -m compileall -q src/app/core"


SHOP = {
    "": "",
    "money": "",
    "tax": "from shop import money\n",
    "cart": "from shop import tax\n",
    "users": "",
    "admin": "from shop import users\n",
}


def test_affected_by_keeps_changed_modules_and_their_importers(tmp_path: Path) -> None:
    make_package(tmp_path, "shop", SHOP)
    commit_all(tmp_path)
    (tmp_path / "src" / "shop" / "money.py").write_text("CENTS = 100\n")  # a changed leaf
    cli = InProcessCLI(tmp_path)
    data = cli.json("plan", "scaffold", "shop", "--path", "src", "--affected-by", "HEAD")
    names = [m["name"] for m in data["plan"]["milestones"]]
    assert names == ["shop.money", "shop.tax", "shop.cart"]  # not users, admin or the package
    assert data["left_out"] == 3
    assert (
        data["plan"]["objective"]
        == "Refactor shop where it changed since HEAD, leaves first (3 of 6 milestones affected)"
    )
    r = cli("plan", "scaffold", "shop", "--path", "src", "--affected-by", "no-such-ref")
    assert r.code == 2 and r.err.count("\n") == 1 and "no such commit" in r.err


def test_affected_by_counts_untracked_modules_and_test_only_changes(tmp_path: Path) -> None:
    make_package(tmp_path, "shop", SHOP)
    write(
        tmp_path,
        {
            "tests/test_tax.py": "from shop.tax import x\n\ndef test_tax():\n    pass\n",
            "tests/test_users.py": "from shop import users\n\ndef test_users():\n    pass\n",
        },
    )
    commit_all(tmp_path)
    cli = InProcessCLI(tmp_path)
    args = ["plan", "scaffold", "shop", "--path", "src", "--gate", "pytest -q {tests}", "--affected-by", "HEAD"]
    assert cli.json(*args)["plan"]["milestones"] == []  # nothing changed
    (tmp_path / "src/shop/coupons.py").write_text("from shop import cart\n")  # new, not added to git
    data = cli.json(*args)
    assert [m["name"] for m in data["plan"]["milestones"]] == ["shop.coupons"]
    (tmp_path / "src/shop/coupons.py").unlink()
    (tmp_path / "tests/test_tax.py").write_text("from shop.tax import x\n\ndef test_tax():\n    assert 1\n")
    data = cli.json(*args)
    # test_tax.py is named after shop.tax: the milestone whose {tests} hold it.
    assert [m["name"] for m in data["plan"]["milestones"]] == ["shop.tax"]
    assert "# 5 unaffected milestones left out." in cli(*args).out


def test_affected_by_outside_git_is_one_line(tmp_path: Path) -> None:
    make_package(tmp_path, "shop", SHOP)
    r = InProcessCLI(tmp_path)(
        "plan",
        "scaffold",
        "shop",
        "--path",
        "src",
        "--affected-by",
        "HEAD",
        GIT_CEILING_DIRECTORIES=str(tmp_path.parent),
    )
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "is not in a git work tree" in r.err and "usage" not in r.err.lower()


def test_tests_are_mapped_by_imports_when_the_tests_folder_is_not_a_package(tmp_path: Path) -> None:
    make_package(
        tmp_path,
        "lib",
        {
            "": "from lib.text import shout\nfrom lib.nums import add\n",
            "text": "def shout(s):\n    return s.upper()\n",
            "nums": "def add(a, b):\n    return a + b\n",
            "calc": "from lib.nums import add\n",
            "lonely": "",
        },
    )
    write(
        tmp_path,
        {
            "tests/conftest.py": "import pytest\n",
            "tests/helpers.py": "def check(x):\n    assert x\n",
            "tests/test_api.py": (
                "import lib\nfrom helpers import check\n\ndef test_shout():\n    check(lib.shout('a'))\n"
            ),
            "tests/test_calc.py": "from lib import calc\n\ndef test_calc():\n    pass\n",
            "tests/unit/test_lonely.py": "def test_nothing():\n    pass\n",  # imports nothing: the name rule
            "tests/strategies_test.py": "X = 1\n",  # a test's name, but no test in it
        },
    )
    data = InProcessCLI(tmp_path).json("plan", "scaffold", "lib", "--path", "src", "--gate", "pytest {tests}")
    ms = by_name(data["plan"])
    gate = {name: units(m.get("gate", "")) for name, m in ms.items()}
    # `import lib` + `lib.shout`: lib (its __init__) and lib.text, where shout is defined.
    assert gate["lib.text"] == ["tests/test_api.py"]
    assert gate["lib"] == ["tests/test_api.py"]
    # test_calc is named after lib.calc: its test, though it reaches lib.nums too.
    assert gate["lib.calc"] == ["tests/test_calc.py"]
    assert gate["lib.nums"] == []
    assert gate["lib.lonely"] == ["tests/unit/test_lonely.py"]  # by name
    assert ms["lib.text"]["inputs"][:2] == ["module:lib.text", "module:tests/test_api.py"]  # (env:pytest if on PATH)
    notes = "\n".join(data["notes"])
    assert "by name (lib.calc, lib.lonely)" in notes
    assert "not tests (they define none): tests/conftest.py, tests/helpers.py, tests/strategies_test.py" in notes
    assert "strategies_test" not in str(data["plan"]["milestones"]).replace("tests/strategies_test.py", "")


@pytest.mark.parametrize(
    ("template", "tool"),
    [
        ("/venv/bin/python -m pytest -q {tests}", "pytest"),
        ("python3 -m compileall -q {path}", "compileall"),
        ("python -m unittest -q {tests}", "unittest"),
        ("mypy {path}", "mypy"),
        (".venv/bin/mypy --strict {path}", "mypy"),
        ("uv run --frozen pytest {tests}", "pytest"),
        ("FOO=1 timeout 60 python3.12 -X dev -W error -m mypy {path}", "mypy"),
        ("sh -c 'ruff check {path}'", "ruff"),
        ("python3 tools/check_api.py {module}", "check_api"),
    ],
)
def test_gate_steps_are_named_after_the_tool(template: str, tool: str) -> None:
    assert command_name(template, set()) == tool
    assert command_name(template, {tool}) == f"{tool}-2"


def test_gate_step_names_reach_the_plan(example: CLI) -> None:
    data = example.json(
        "plan",
        "scaffold",
        "kv",
        "--path",
        "src",
        "--gate",
        "/venv/bin/python -m pytest -q {tests}",
        "--gate",
        "/venv/bin/python -m mypy {path}",
    )
    gate = by_name(data["plan"])["kv.mod_a"]["gate"]
    assert [g["name"] for g in gate] == ["pytest", "mypy"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["no_such_package_xyz"], "no Python package 'no_such_package_xyz' found"),
        (["kv", "--path", "tests"], "no Python package 'kv' found in tests"),
        (["kv.mod_a", "--path", "src"], "package 'kv.mod_a' is not a top-level package name"),
        (["kv", "--path", "src", "--gate", "echo {nope}"], "unknown placeholder {nope}"),
        (["kv", "--path", "src", "--final", "kv"], "--final 'kv' is already the name"),
        (["kv", "--path", "src", "--final", "Bad Name"], "invalid final milestone name"),
        (["kv", "--path", "src", "--final-gate", "true"], "--final-gate needs --final NAME"),
    ],
    ids=[
        "unknown package",
        "not in path",
        "dotted",
        "unknown placeholder",
        "final collides",
        "final invalid",
        "final gate alone",
    ],
)
def test_bad_requests_are_refused_with_one_line(example: CLI, args: list[str], says: str) -> None:
    r = example("plan", "scaffold", *args, "-o", "scaffolded.yaml")
    assert r.code == 2 and r.err.count("\n") == 1 and says in r.err, r.err
    assert "Traceback" not in r.err
    assert not (example.cwd / "scaffolded.yaml").exists()


def test_the_package_folder_itself_is_a_valid_path(example: CLI) -> None:
    data = example.json("plan", "scaffold", "kv", "--path", "src/kv")
    assert data["source"] == "src/kv" and data["modules"] == 5


def test_without_path_the_copy_read_is_named(example: CLI) -> None:
    data = example.json("plan", "scaffold", "kv")
    assert data["source"] == "src/kv"
    assert data["notes"][0] == "read kv from src/kv (found in this folder; --path DIR reads another copy)"


def test_imports_of_an_enclosing_package_are_not_dependencies_unless_asked(tmp_path: Path) -> None:
    make_package(
        tmp_path,
        "lib",
        {
            "": "from lib import one, two\n",  # the package aggregates its modules
            "one": "",
            "two": "import lib\n",  # reaches `one` through the package's namespace
        },
    )
    cli = InProcessCLI(tmp_path)
    plain = cli.json("plan", "scaffold", "lib", "--path", "src")
    assert {m["name"]: m.get("deps", []) for m in plain["plan"]["milestones"]} == {
        "lib.one": [],
        "lib.two": [],
        "lib": ["lib.one", "lib.two"],
    }
    counted = cli.json("plan", "scaffold", "lib", "--path", "src", "--package-imports")
    assert [c["path"] for c in counted["cycles"]] == ["lib -> lib.two -> lib"]


def test_the_documented_example_is_what_the_command_prints(tmp_path: Path) -> None:
    """docs/scaffold.md shows real output: its kv example, run as written."""
    page = (EXAMPLES.parent / "docs" / "scaffold.md").read_text()
    section = page[page.index("# Plan a refactor from your imports") :]
    blocks = section.split("```")
    command = blocks[1].removeprefix("sh\n")
    printed = blocks[3].removeprefix("text\n").splitlines()
    written = blocks[5].removeprefix("yaml\n").splitlines()
    ws = tmp_path / "kv"
    shutil.copytree(EXAMPLES / "refactor", ws)
    cli = InProcessCLI(ws)
    cli("init", check=True)
    args = command.split("milepost plan scaffold ", 1)[1].replace("\\\n", " ")
    r = cli("plan", "scaffold", *shlex.split(args), check=True)
    assert (r.err + r.out).splitlines() == printed
    text = (ws / "refactor.yaml").read_text()
    assert all(line in text.splitlines() for line in written if line != "..."), text


def test_the_documented_example_after_the_readmes_activate_prints_no_venv_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/scaffold.md's promise about the README's `. .venv/bin/activate`
    (milepost's own virtualenv: no note about it), as the command keeps it."""
    page = (EXAMPLES.parent / "docs" / "scaffold.md").read_text()
    said = " ".join(page.split())
    assert "the same after the README's `. .venv/bin/activate`: that virtualenv is milepost's own" in said
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)  # as activated by the README
    ws = tmp_path / "kv"
    shutil.copytree(EXAMPLES / "refactor", ws)
    cli = InProcessCLI(ws)
    cli("init", check=True)
    r = cli("plan", "scaffold", "kv", "-o", "p.yaml", check=True)
    assert VENV_NOTE not in r.err + r.out
    make_venv(ws, ".venv")  # a project's own virtualenv: the note the page promises for it
    r = cli("plan", "scaffold", "kv", "-o", "p.yaml", check=True)
    assert VENV_NOTE in r.err + r.out and VENV_NOTE in (ws / "p.yaml").read_text()


def test_tests_inside_the_package_are_tests_not_milestones(tmp_path: Path) -> None:
    make_package(tmp_path, "geo", {"": "", "shapes": "AREA = 1\n", "maps": "from geo.shapes import AREA\n"})
    write(
        tmp_path,
        {
            "src/geo/tests/test_shapes.py": "from geo import shapes\n\ndef test_area():\n    assert shapes.AREA\n",
            "src/geo/tests/conftest.py": "",
            "src/geo/test_maps.py": "import geo.maps\n\nclass TestMaps:\n    def test_it(self):\n        pass\n",
        },
    )  # tests/ has no __init__.py: not a module for grimp, collected by pytest all the same
    data = InProcessCLI(tmp_path).json("plan", "scaffold", "geo", "--path", "src", "--gate", "pytest {tests}")
    ms = by_name(data["plan"])
    assert set(ms) == {"geo", "geo.shapes", "geo.maps"}  # no milestone for geo.test_maps
    assert units(ms["geo.shapes"]["gate"]) == ["src/geo/tests/test_shapes.py"]
    assert units(ms["geo.maps"]["gate"]) == ["src/geo/test_maps.py"]  # named after geo.maps
    assert ms["geo.shapes"]["inputs"][:2] == ["module:geo.shapes", "module:src/geo/tests/test_shapes.py"]
    assert "1 module of geo are tests or their helpers: no milestones" in data["notes"]


VENV_NOTE = "gates run with milepost's own PATH"
DRIVE_SECTION = '(docs/drive.md, "Gates in the project\'s virtualenv")'


def make_venv(root: Path, folder: str) -> None:
    (root / folder / "bin").mkdir(parents=True)
    (root / folder / "bin" / "python").touch()


@pytest.mark.parametrize(
    ("folder", "gate", "fixed"),
    [
        (".venv", "python3 -m pytest -q {tests}", ".venv/bin/python -m pytest -q {tests}"),
        ("venv", "pytest -q {tests}", "venv/bin/python -m pytest -q {tests}"),
        (".venv", None, ".venv/bin/python -m compileall -q {path}"),  # the default gate
    ],
)
def test_a_bare_python_gate_beside_a_virtualenv_is_noted(
    example: CLI, folder: str, gate: str | None, fixed: str
) -> None:
    """docs/drive.md: a gate runs with milepost's own PATH, so the note names the project's interpreter."""
    make_venv(example.cwd, folder)
    args = ["--gate", gate] if gate else []
    r = example("plan", "scaffold", "kv", "--path", "src", *args, "-o", "scaffolded.yaml", check=True)
    notes = [line for line in r.err.splitlines() if VENV_NOTE in line]
    assert len(notes) == 1, r.err
    assert notes[0].startswith(f"note: {VENV_NOTE}") and f"write `{fixed}` {DRIVE_SECTION}" in notes[0]
    header = [line for line in (example.cwd / "scaffolded.yaml").read_text().splitlines() if line.startswith("#")]
    assert f"# {notes[0].removeprefix('note: ')}" in header
    data = example.json("plan", "scaffold", "kv", "--path", "src", *args)
    assert [n for n in data["notes"] if VENV_NOTE in n] == [notes[0].removeprefix("note: ")]


COVERAGE_NOTE = "the gates' pytest units run under coverage.py, which"


def test_a_test_interpreter_without_coverage_is_noted(tmp_path: Path) -> None:
    """The new-user trial on toolz: a project's virtualenv without coverage.py
    failed every pytest unit of the first drive (exit 4); the scaffold says so
    before, naming the install. An interpreter with it gets no note."""
    make_package(tmp_path, "geo", {"": "", "shapes": "AREA = 1\n"})
    write(tmp_path, {"tests/test_shapes.py": "from geo import shapes\n\ndef test_area():\n    assert shapes.AREA\n"})
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / ".venv")], check=True)
    python = tmp_path / ".venv" / "bin" / "python"
    cli = InProcessCLI(tmp_path)
    r = cli("plan", "scaffold", "geo", "--gate", ".venv/bin/python -m pytest -q {tests}", "-o", "p.yaml", check=True)
    [note] = [line for line in r.err.splitlines() if COVERAGE_NOTE in line]
    assert note == (
        f"note: {COVERAGE_NOTE} `.venv/bin/python` ({python}) does not have: each would fail at once (exit 4);"
        f" install it first ({python} -m pip install coverage)"
    )
    assert f"# {note.removeprefix('note: ')}" in (tmp_path / "p.yaml").read_text()
    r = cli("plan", "scaffold", "geo", "--gate", f"{sys.executable} -m pytest -q {{tests}}", check=True)
    assert COVERAGE_NOTE not in r.err + r.out
    r = cli("plan", "scaffold", "geo", "--gate", ".venv/bin/python -m compileall -q {path}", check=True)
    assert COVERAGE_NOTE not in r.err + r.out  # no pytest unit


def test_the_final_gate_is_a_gate_too(example: CLI) -> None:
    make_venv(example.cwd, ".venv")
    data = example.json(
        "plan",
        "scaffold",
        "kv",
        "--path",
        "src",
        "--gate",
        ".venv/bin/python -m compileall -q {path}",
        "--final",
        "all",
        "--final-gate",
        "pytest -x",
    )
    assert [n for n in data["notes"] if "`.venv/bin/python -m pytest -x`" in n]


def test_virtual_env_is_named_when_the_workspace_has_no_virtualenv_folder(
    example: CLI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "elsewhere"))
    data = example.json("plan", "scaffold", "kv", "--path", "src", "--gate", "python -m unittest -q {tests}")
    [note] = [n for n in data["notes"] if VENV_NOTE in n]
    assert f"write `{tmp_path}/elsewhere/bin/python -m unittest -q {{tests}}`" in note


@pytest.mark.parametrize(
    "gates",
    [
        [".venv/bin/python -m pytest -q {tests}"],  # names the virtualenv already
        [".venv/bin/python -m compileall -q {path}", ".venv/bin/pytest -q {tests}"],
        ["ruff check {path}"],  # no Python command at all
    ],
)
def test_gates_naming_the_virtualenv_are_not_noted(example: CLI, gates: list[str]) -> None:
    make_venv(example.cwd, ".venv")
    args = [w for g in gates for w in ("--gate", g)]
    r = example("plan", "scaffold", "kv", "--path", "src", *args, "-o", "scaffolded.yaml", check=True)
    assert VENV_NOTE not in r.err
    assert VENV_NOTE not in (example.cwd / "scaffolded.yaml").read_text()


def test_mileposts_own_active_virtualenv_is_not_the_projects(example: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    """$VIRTUAL_ENV naming the virtualenv milepost runs in (activated to run it) is not noted as the project's."""
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)
    data = example.json("plan", "scaffold", "kv", "--path", "src", "--gate", "pytest -q {tests}")
    assert not [n for n in data["notes"] if VENV_NOTE in n], data["notes"]


def test_no_virtualenv_no_note(example: CLI) -> None:
    """Without a .venv/ or venv/ (holding bin/python) and without $VIRTUAL_ENV, bare gates are not noted."""
    (example.cwd / ".venv").mkdir()  # no bin/python: not a virtualenv
    data = example.json("plan", "scaffold", "kv", "--path", "src", "--gate", "pytest -q {tests}")
    assert not [n for n in data["notes"] if VENV_NOTE in n]
    assert VENV_NOTE not in example("plan", "scaffold", "kv", "--path", "src", check=True).out
