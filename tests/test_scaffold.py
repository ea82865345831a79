"""``milepost plan scaffold``: refactor plans from real import graphs (grimp),
through the CLI, on the example project, on packages made here (a cycle, a
git history) and on networkx."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import CLI, EXAMPLES


def make_package(root: Path, name: str, modules: dict[str, str]) -> Path:
    """A package under ``root/src``: ``modules`` maps dotted names (below the
    package) to their source; "" is the package's __init__."""
    pkg = root / "src" / name
    for mod, source in modules.items():
        parts = mod.split(".") if mod else []
        path = pkg.joinpath(*parts[:-1], parts[-1] + ".py") if parts else pkg / "__init__.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in [path.parent, *path.parent.parents]:
            if parent == root / "src":
                break
            (parent / "__init__.py").touch()
        path.write_text(textwrap.dedent(source))
    return pkg


def plan_of(out: str) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(out)


@pytest.fixture
def example(tmp_path: Path) -> CLI:
    ws = tmp_path / "refactor"
    shutil.copytree(EXAMPLES / "refactor", ws)
    cli = CLI(ws)
    cli("init", check=True)
    return cli


def test_the_example_scaffolds_in_import_order_with_its_tests(example: CLI) -> None:
    r = example(
        "plan", "scaffold", "kv", "--path", "src",
        "--gate", "python3 -m compileall -q {path}", "--gate", "python3 -m unittest -q {tests}",
        "--final", "all-tests", "--final-gate", "python3 -m unittest discover -q -s tests -t .",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert r.out.startswith("# scaffolded by `milepost plan scaffold kv`") and "# import cycles: none" in r.out
    plan = plan_of(r.out)
    assert plan["plan_status"] == "draft"
    names = [m["name"] for m in plan["milestones"]]
    assert names == ["kv", "kv.interfaces", "kv.mod_a", "kv.mod_b", "kv.mod_c", "all-tests"]  # leaves first
    deps = {m["name"]: m.get("deps", []) for m in plan["milestones"]}
    assert deps == {
        "kv": [], "kv.interfaces": [], "kv.mod_a": ["kv.interfaces"], "kv.mod_b": ["kv.interfaces"],
        "kv.mod_c": ["kv.interfaces", "kv.mod_b"], "all-tests": ["kv", "kv.mod_a", "kv.mod_c"],
    }  # fmt: skip
    gates = {m["name"]: m.get("gate") for m in plan["milestones"]}
    assert gates["kv.mod_b"] == [
        {"name": "compileall", "run": "python3 -m compileall -q src/kv/mod_b.py"},
        {"name": "unittest", "run": "python3 -m unittest -q tests/test_mod_b.py tests/test_mod_c.py"},
    ]
    assert gates["kv"] == "python3 -m compileall -q src/kv/__init__.py"  # no test imports the package itself
    assert "note: kv: no test imports kv" in r.err


def test_scaffold_edit_apply_drive_order(example: CLI) -> None:
    """The README's loop: scaffold to a file, edit it, apply it, work it."""
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


def test_an_import_cycle_is_one_milestone_and_its_path_is_reported(tmp_path: Path) -> None:
    make_package(tmp_path, "loop", {
        "": "",
        "a": "from loop import b\n",
        "b": "import loop.a\n",
        "c": "from loop.a import x\n",
        "leaf": "",
    })  # fmt: skip
    cli = CLI(tmp_path)
    r = cli("plan", "scaffold", "loop", "--path", "src")
    assert r.code == 0, r.err
    assert "import cycle: loop.a -> loop.b -> loop.a" in r.err
    assert "#   loop.a -> loop.b -> loop.a" in r.out
    plan = plan_of(r.out)
    by_name = {m["name"]: m for m in plan["milestones"]}
    assert set(by_name) == {"loop", "loop.a-cycle", "loop.c", "loop.leaf"}
    assert by_name["loop.c"]["deps"] == ["loop.a-cycle"]
    assert by_name["loop.a-cycle"]["gate"] == "python3 -m compileall -q src/loop/a.py src/loop/b.py"
    assert by_name["loop.a-cycle"]["acceptance"].startswith("loop.a loop.b ")


def test_level_package_groups_modules_by_package(tmp_path: Path) -> None:
    make_package(tmp_path, "app", {
        "": "",
        "core.models": "",
        "core.rules": "from app.core import models\n",
        "web.views": "from app.core.rules import x\n",
        "web.urls": "from app.web import views\n",
        "cli": "from app.web import urls\n",
    })  # fmt: skip
    plan = plan_of(CLI(tmp_path)("plan", "scaffold", "app", "--path", "src", "--level", "package", check=True).out)
    by_name = {m["name"]: m.get("deps", []) for m in plan["milestones"]}
    assert by_name == {"app.core": [], "app.web": ["app.core"], "app": ["app.web"]}
    gate = next(m["gate"] for m in plan["milestones"] if m["name"] == "app.core")
    assert gate == "python3 -m compileall -q src/app/core"


def test_affected_by_keeps_changed_modules_and_their_importers(tmp_path: Path) -> None:
    make_package(tmp_path, "shop", {
        "": "",
        "money": "",
        "tax": "from shop import money\n",
        "cart": "from shop import tax\n",
        "users": "",
        "admin": "from shop import users\n",
    })  # fmt: skip
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=tmp_path, check=True)
    (tmp_path / "src" / "shop" / "money.py").write_text("CENTS = 100\n")  # a changed leaf
    cli = CLI(tmp_path)
    data = cli.json("plan", "scaffold", "shop", "--path", "src", "--affected-by", "HEAD")
    names = [m["name"] for m in data["plan"]["milestones"]]
    assert names == ["shop.money", "shop.tax", "shop.cart"]  # not users, admin or the package
    assert data["left_out"] == 3
    assert cli("plan", "scaffold", "shop", "--path", "src", "--affected-by", "no-such-ref").code == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["no_such_package_xyz"], "no Python package 'no_such_package_xyz' found"),
        (["kv", "--path", "src", "--gate", "echo {nope}"], "unknown placeholder {nope}"),
        (["kv", "--path", "src", "--final", "kv"], "--final 'kv' is already the name"),
        (["kv", "--path", "src", "--final", "Bad Name"], "invalid final milestone name"),
        (["kv", "--path", "src", "--final-gate", "true"], "--final-gate needs --final NAME"),
    ],
    ids=["unknown package", "unknown placeholder", "final collides", "final invalid", "final gate alone"],
)
def test_bad_requests_are_refused_with_one_line(example: CLI, args: list[str], says: str) -> None:
    r = example("plan", "scaffold", *args)
    assert r.code == 2 and r.err.count("\n") == 1 and says in r.err, r.err
    assert "Traceback" not in r.err


def test_a_large_installed_package_scaffolds_and_its_plan_applies(tmp_path: Path) -> None:
    """networkx (several hundred modules, a few import cycles) from the venv."""
    cli = CLI(tmp_path)
    cli("init", check=True)
    data = cli.json("plan", "scaffold", "networkx", "--apply")
    assert data["modules"] > 300 and data["item"] == 1
    assert data["milestones"] == len(cli.json("list")["milestones"])
    names = [m["name"] for m in data["plan"]["milestones"]]
    assert len(names) == len(set(names))
    for cycle in data["cycles"]:
        first, *_ = cycle.split(" -> ")
        assert cycle.endswith(first)


def test_imports_of_an_enclosing_package_are_not_dependencies_unless_asked(tmp_path: Path) -> None:
    make_package(tmp_path, "lib", {
        "": "from lib import one, two\n",  # the package aggregates its modules
        "one": "",
        "two": "import lib\n",  # reaches `one` through the package's namespace
    })  # fmt: skip
    cli = CLI(tmp_path)
    plain = cli.json("plan", "scaffold", "lib", "--path", "src")
    assert {m["name"]: m.get("deps", []) for m in plain["plan"]["milestones"]} == {
        "lib.one": [], "lib.two": [], "lib": ["lib.one", "lib.two"],
    }  # fmt: skip
    counted = cli.json("plan", "scaffold", "lib", "--path", "src", "--package-imports")
    assert counted["cycles"] == ["lib -> lib.two -> lib"]
