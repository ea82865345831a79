"""Module input entries (``module:NAME``): the files a module's proof reads,
derived from its imports as they are when checked, on a real package written
into a temporary git work tree; through the service on a real SQLite file and
a real PostgreSQL server (the stale view), and through the CLI (refusals)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from milepost.gates.imports import IN_FUNCTION, MODULE_LEVEL, TYPE_CHECKING, parse_imports
from milepost.gates.inputs import Snapshot
from milepost.planfile import parse_plan
from milepost.service import Service
from tests.conftest import CLI


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


# A package in a src layout: a leaf, a module importing it at import time, one
# importing it only under TYPE_CHECKING, one importing it inside a function, a
# module whose package __init__ re-exports everything, and a test file.
PACKAGE = {
    "src/shop/__init__.py": "from .cart import Cart\nfrom .prices import price\n",
    "src/shop/prices.py": "def price(x):\n    return x * 2\n",
    "src/shop/cart.py": "from shop.prices import price\n\nclass Cart:\n    total = 0\n",
    "src/shop/typed.py": (
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from shop.cart import Cart\n\ndef f(c: Cart) -> None: ...\n"
    ),
    "src/shop/lazy.py": "def total():\n    from . import cart\n    return cart.Cart.total\n",
    "src/shop/uses_pkg.py": "from shop import prices\nimport shop\n",
    "tests/conftest.py": "import helpers\n",
    "tests/helpers.py": "X = 1\n",
    "tests/test_cart.py": "from shop.cart import Cart\n\ndef test_cart():\n    assert Cart.total == 0\n",
}


@pytest.fixture
def pkg(workspace: Path) -> Path:
    write(workspace, PACKAGE)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    return workspace


def files_of(root: Path, *entries: str) -> list[str]:
    return Snapshot(root).matching(list(entries))


def test_statements_know_where_they_run() -> None:
    src = b"""
import a
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import b
else:
    import c
if not TYPE_CHECKING:
    import d
try:
    import e
except ImportError:
    import f
class K:
    import g
def fn():
    import h
    lambda: __import__("x")
async def afn():
    from . import i
"""
    found = parse_imports(src)
    assert found is not None
    kinds = {(s.module or "") + ",".join(s.names): s.kind for s in found}
    assert kinds == {
        "a": MODULE_LEVEL,
        "typingTYPE_CHECKING": MODULE_LEVEL,
        "b": TYPE_CHECKING,
        "c": MODULE_LEVEL,
        "d": MODULE_LEVEL,
        "e": MODULE_LEVEL,
        "f": MODULE_LEVEL,
        "g": MODULE_LEVEL,
        "h": IN_FUNCTION,
        "i": IN_FUNCTION,
    }
    assert parse_imports(b"def (:") is None


def test_parses_take_turns_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython 3.11's AST constructor fails now and then when two threads
    parse at once (python/cpython#106905, seen in a drive at --max-parallel
    2): parse_imports never lets two parses overlap, whichever threads call it."""
    import ast
    import threading

    inside, most, lock = [0], [0], threading.Lock()
    real = ast.parse

    def slow_parse(source: bytes, *args: Any, **kw: Any) -> ast.Module:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.01)  # long enough for every other thread to try
        try:
            return real(source, *args, **kw)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(ast, "parse", slow_parse)
    threads = [threading.Thread(target=parse_imports, args=(b"import os\n",)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == [1]


def test_a_module_entry_is_the_module_and_what_it_imports_at_run_time(pkg: Path) -> None:
    assert files_of(pkg, "module:shop.prices") == ["src/shop/__init__.py", "src/shop/prices.py"]
    assert files_of(pkg, "module:shop.cart") == ["src/shop/__init__.py", "src/shop/cart.py", "src/shop/prices.py"]
    # TYPE_CHECKING imports never run: not inputs.
    assert files_of(pkg, "module:shop.typed") == ["src/shop/__init__.py", "src/shop/typed.py"]
    # An import inside a function runs when it is called: an input (and what it imports).
    assert files_of(pkg, "module:shop.lazy") == [
        "src/shop/__init__.py",
        "src/shop/cart.py",
        "src/shop/lazy.py",
        "src/shop/prices.py",
    ]
    # The enclosing package's __init__ counts as content; its own imports are not followed.
    assert files_of(pkg, "module:shop.uses_pkg") == [
        "src/shop/__init__.py",
        "src/shop/prices.py",
        "src/shop/uses_pkg.py",
    ]
    # The file form names the same module.
    assert files_of(pkg, "module:src/shop/cart.py") == files_of(pkg, "module:shop.cart")


def test_a_test_file_entry_reads_its_conftest_and_follows_the_package_it_imports(pkg: Path) -> None:
    assert files_of(pkg, "module:tests/test_cart.py") == [
        "src/shop/__init__.py",
        "src/shop/cart.py",
        "src/shop/prices.py",
        "tests/conftest.py",
        "tests/helpers.py",
        "tests/test_cart.py",
    ]


def test_relative_imports_inside_a_namespace_package_are_followed(pkg: Path) -> None:
    # src/ns has no __init__.py: ns.mod's 'from . import helper' is ns.helper, and
    # ns.sub.deep's 'from .. import mod' reaches ns.mod through a regular package.
    write(
        pkg,
        {
            "src/ns/mod.py": "from . import helper\nfrom .helper import X\n",
            "src/ns/helper.py": "X = 1\n",
            "src/ns/sub/__init__.py": "",
            "src/ns/sub/deep.py": "from .. import mod\n",
            "tools/ns2/run.py": "from . import util\n",
            "tools/ns2/util.py": "",
        },
    )
    assert files_of(pkg, "module:ns.mod") == ["src/ns/helper.py", "src/ns/mod.py"]
    assert files_of(pkg, "module:src/ns/mod.py") == files_of(pkg, "module:ns.mod")
    assert files_of(pkg, "module:ns.sub.deep") == [
        "src/ns/helper.py",
        "src/ns/mod.py",
        "src/ns/sub/__init__.py",
        "src/ns/sub/deep.py",
    ]
    # A namespace package at the workspace root, named by its file.
    assert files_of(pkg, "module:tools/ns2/run.py") == ["tools/ns2/run.py", "tools/ns2/util.py"]


def test_a_new_module_imported_is_an_input_at_once_and_a_file_nothing_imports_is_nobodys(pkg: Path) -> None:
    before = files_of(pkg, "module:shop.cart")
    write(pkg, {"src/shop/orphan.py": "X = 1\n"})
    assert files_of(pkg, "module:shop.cart") == before
    write(pkg, {"src/shop/cart.py": PACKAGE["src/shop/cart.py"] + "from shop import discount\n"})
    write(pkg, {"src/shop/discount.py": "import shop.orphan\n"})
    assert files_of(pkg, "module:shop.cart") == sorted([*before, "src/shop/discount.py", "src/shop/orphan.py"])


def test_what_an_index_found_is_kept_for_the_next_snapshot_while_its_folders_are_as_they_were(pkg: Path) -> None:
    write(
        pkg,
        {
            "src/shop/cart.py": PACKAGE["src/shop/cart.py"]
            + "try:\n    from shop import maybe\nexcept ImportError:\n    pass\n"
        },
    )
    old = time.time() - 60  # folders changed long ago: their mtimes can be trusted
    for d in [pkg, *[p for p in pkg.rglob("*") if p.is_dir()]]:
        os.utime(d, (old, old))
    first = Snapshot(pkg)
    assert "src/shop/maybe.py" not in first.matching(["module:shop.cart"])
    second = Snapshot(pkg)
    assert second.matching(["module:shop.cart"]) == first.matching(["module:shop.cart"])
    assert second.imports._k is first.imports._k  # nothing resolved again
    # A module appears where the import looked: its folder changed, so the next snapshot looks again.
    write(pkg, {"src/shop/maybe.py": "X = 1\n"})
    third = Snapshot(pkg)
    assert third.imports._k is not first.imports._k
    assert "src/shop/maybe.py" in third.matching(["module:shop.cart"])
    # An edit of a file's content is seen through its digest, whatever its folder says.
    for d in [pkg, *[p for p in pkg.rglob("*") if p.is_dir()]]:
        os.utime(d, (old, old))
    Snapshot(pkg).matching(["module:shop.cart"])
    write(pkg, {"src/shop/maybe.py": "import shop.prices\n", "src/shop/prices.py": "Y = 2\n"})
    assert "src/shop/prices.py" in Snapshot(pkg).matching(["module:shop.maybe"])


def test_a_missing_module_makes_the_fingerprint_incomplete(pkg: Path) -> None:
    fp = Snapshot(pkg).fingerprint(["module:shop.nope", "module:shop.prices"], "spec")
    assert fp.digest is None
    assert fp.unreadable == {"module:shop.nope": "no such module (looked in src, .)"}
    assert sorted(fp.files) == ["src/shop/__init__.py", "src/shop/prices.py"]


def test_each_file_is_parsed_once_per_content(pkg: Path) -> None:
    snap = Snapshot(pkg)
    snap.matching(["module:shop.lazy"])
    snap.save()
    assert snap.imports.cache.parsed == 3  # lazy, cart, prices (the __init__ is content only)
    again = Snapshot(pkg)
    again.matching(["module:shop.lazy"])
    assert again.imports.cache.parsed == 0  # all from .milepost/cache/imports.json
    write(pkg, {"src/shop/prices.py": "def price(x):\n    return x * 3\n"})
    edited = Snapshot(pkg)
    assert edited.matching(["module:shop.lazy"]) == again.matching(["module:shop.lazy"])
    assert edited.imports.cache.parsed == 1


@pytest.fixture
def proven(any_service: Service, pkg: Path) -> Service:
    any_service.apply_plan(
        parse_plan(
            """
objective: modules
milestones:
  - {name: prices, gate: "true", inputs: ["module:shop.prices"]}
  - {name: cart, deps: [prices], gate: "true", inputs: ["module:shop.cart"]}
  - {name: typed, gate: "true", inputs: ["module:shop.typed"]}
  - {name: everything, gate: "true", inputs: ["src/shop/"]}
"""
        )
    )
    for n in ("prices", "cart", "typed", "everything"):
        any_service.start(n)
        assert any_service.done(n).passed
    return any_service


def views(svc: Service) -> dict[str, str]:
    return {v.name: v.view for v in svc.milestone_views()[1]}


def test_a_new_imported_module_that_breaks_makes_every_importer_stale(proven: Service, pkg: Path) -> None:
    assert set(views(proven).values()) == {"done"}
    write(pkg, {"src/shop/orphan.py": "X = 1\n"})  # nothing imports it: only the folder pattern sees it
    assert views(proven) == {"prices": "done", "cart": "done", "typed": "done", "everything": "stale"}
    write(pkg, {"src/shop/prices.py": PACKAGE["src/shop/prices.py"] + "import shop.orphan\n"})
    by = {v.name: v for v in proven.milestone_views()[1]}
    assert {n: v.view for n, v in by.items()} == {
        "prices": "stale",
        "cart": "stale",
        "typed": "done",
        "everything": "stale",
    }
    assert by["cart"].stale is not None
    assert by["cart"].stale.changed == ["src/shop/orphan.py", "src/shop/prices.py"]
    # A same-size edit: content decides, not size or time.
    write(pkg, {"src/shop/orphan.py": "X = 2\n"})
    assert views(proven)["cart"] == "stale"


def test_a_type_checking_import_edit_leaves_the_module_proven(proven: Service, pkg: Path) -> None:
    write(pkg, {"src/shop/cart.py": PACKAGE["src/shop/cart.py"] + "# edited\n"})
    assert views(proven)["typed"] == "done"
    assert views(proven)["cart"] == "stale"


def test_an_entry_naming_no_module_is_refused_and_nothing_is_written(cli: CLI, pkg: Path) -> None:
    cli("item", "create", "refused", check=True)
    r = cli("add", "x", "--gate", "true", "--inputs", "module:shop.nope")
    assert r.code == 2
    assert r.err.strip().count("\n") == 0
    assert "module:shop.nope of 'x' (not found in ., src)" in r.err
    assert cli.json("list")["milestones"] == []
    bad = pkg / "plan.yaml"
    bad.write_text(
        "objective: o\nmilestones:\n  - {name: a, gate: 'true', inputs: ['module:shop.gone']}\n"
        "  - {name: b, gate: 'true', inputs: ['module:tests/test_none.py']}\n"
    )
    r = cli("plan", "apply", str(bad))
    assert r.code == 2 and "module:shop.gone of 'a'" in r.err
    assert "module:tests/test_none.py of 'b' (no such file)" in r.err
    assert len(cli.json("item", "list")["items"]) == 1
    r = cli("add", "y", "--gate", "true", "--inputs", "module:shop..x")
    assert r.code == 2 and "neither a dotted module name" in r.err
    ok = cli("add", "z", "--gate", "true", "--inputs", "module:shop.cart")
    assert ok.code == 0, ok.err
    assert cli.json("list")["milestones"][0]["inputs"] == ["module:shop.cart"]
