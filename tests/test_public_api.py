"""The public surface and the import costs it promises."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

import milepost


def test_all_is_exactly_the_public_surface() -> None:
    assert sorted(milepost.__all__) == sorted(set(milepost.__all__))
    for name in milepost.__all__:
        assert getattr(milepost, name) is not None, name
    public = {n for n in dir(milepost) if not n.startswith("_")}
    # Submodules are reachable as attributes once imported; the rest must be listed.
    extra = (
        public
        - set(milepost.__all__)
        - {
            "annotations",
            "errors",
            "graph",
            "gates",
            "flows",
            "TYPE_CHECKING",
            "Any",
            "service",
            "store",
            "results",
            "planfile",
            "plandoc",
            "plainyaml",
            "extras",
            "planchecks",
            "workspace",
            "settings",
            "cli",
            "agent",
            "mcp_server",
            "present",
            "events",
            "retry",
            "scaffold",
        }
    )
    assert extra == set()


def test_every_error_is_a_milepost_error_with_an_exit_code() -> None:
    from milepost import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, milepost.MilepostError)
        assert cls.exit_code in (2, 3)
    assert issubclass(milepost.InputError, ValueError)
    assert issubclass(milepost.NotFoundError, LookupError)


def test_every_error_class_is_exported() -> None:
    """Each subclass of MilepostError, wherever it is defined, is listed in
    milepost.errors.__all__ and milepost.__all__ (callers catch what they can import)."""
    from milepost import errors

    def subclasses(cls: type) -> set[type]:
        out = set(cls.__subclasses__())
        for c in list(out):
            out |= subclasses(c)
        return out

    every = {c.__name__ for c in subclasses(errors.MilepostError) if c.__module__.startswith("milepost")}
    every.add("MilepostError")
    assert every <= set(errors.__all__)
    assert every <= set(milepost.__all__)
    assert not issubclass(errors.NotOwnerError, OSError)  # an `except OSError` must not swallow it


ROOT = Path(milepost.__file__).resolve().parent.parent


def _contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_the_import_contracts_hold() -> None:
    """The layers and the forbidden imports of pyproject.toml, checked by
    import-linter (``make lint`` runs the same), so a plain pytest catches a
    wrong arrow too."""
    lint = Path(sys.executable).with_name("lint-imports")
    p = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in p.stdout


def test_the_layer_order_is_stated_where_people_read_it() -> None:
    """The layers contract's name is its order; the README, the architecture
    page and the package's docstring state exactly that order."""
    layers = _contracts()["layers"]
    order = layers["name"]
    assert [layer.split(" : ")[0] for layer in layers["layers"]] == [
        "__main__",
        "flows",
        "present",
        "service",
        "store",
        "errors",
        "gates",
        "graph",
    ]
    assert order.startswith("graph < gates < store and service < presentation < flows")
    for text in ((ROOT / "README.md").read_text(), (ROOT / "docs/architecture.md").read_text(), milepost.__doc__):
        assert order in " ".join((text or "").split()), order


def test_the_pure_domain_may_import_no_other_dependency() -> None:
    """The forbidden list of the pure domain is every package milepost
    installs (with its runtime extras) except pydantic and networkx (so a new
    dependency is forbidden too)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def import_name(requirement: str) -> str:
        dist = re.split(r"[\[<>=~ ;]", requirement, maxsplit=1)[0].lower()
        return {"pyyaml": "yaml"}.get(dist, dist.replace("-", "_"))

    extras = project["optional-dependencies"]
    installed = {import_name(r) for r in [*project["dependencies"], *extras["postgres"], *extras["dask"]]}
    assert set(_contracts()["pure-domain"]["forbidden_modules"]) == installed - {"pydantic", "networkx"}


def test_functions_are_kept_small_by_ruffs_rules() -> None:
    """Small rooms (docs/architecture.md): functions, not files, have a size
    limit, checked by ruff in `make lint` (a module may grow past any count of
    lines while it is one concern)."""
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert {"C901", "PLR0912", "PLR0915"} <= set(lint["select"])
    assert lint["mccabe"]["max-complexity"] == 12
    assert lint["pylint"] == {"max-branches": 12, "max-statements": 50}


def test_formatting_is_ruffs_with_few_exceptions() -> None:
    """No packing of code with '# fmt: skip' (at most a few tables kept by hand)."""
    sources = [
        p for d in ("milepost", "graph", "gates", "flows", "tests", "benchmarks") for p in (ROOT / d).rglob("*.py")
    ]
    skips = sum(p.read_text().count("# fmt: skip") for p in sources if p.name != "test_public_api.py")
    assert skips < 10


def test_no_tracked_file_is_ignored() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    p = subprocess.run(
        ["git", "ls-files", "--cached", "--ignored", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert p.stdout == ""


def _modules_after(code: str, cwd: Path) -> set[str]:
    script = textwrap.dedent(code) + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
    p = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, check=True)
    import json

    return set(json.loads(p.stdout.strip().splitlines()[-1]))


def test_import_milepost_is_cheap(tmp_path: Path) -> None:
    mods = _modules_after("import milepost", tmp_path)
    assert "prefect" not in mods and "sqlalchemy" not in mods and "alembic" not in mods


def test_the_gate_modules_do_not_import_prefect(tmp_path: Path) -> None:
    """Every module of gates/ itself (not only the lazy package root), in a fresh interpreter."""
    root = Path(milepost.__file__).resolve().parent.parent
    names = sorted(p.stem for p in (root / "gates").glob("*.py") if p.stem != "__init__")
    assert {"command", "inputs", "supervisor", "outcome"} <= set(names)
    mods = _modules_after("\n".join(f"import milepost.gates.{n}" for n in names), tmp_path)
    assert {f"milepost.gates.{n}" for n in names} <= mods  # they did load
    assert not any(m == "prefect" or m.startswith("prefect.") for m in mods)
    assert "sqlalchemy" not in mods  # the gates know no store either


def test_state_commands_do_not_import_prefect(tmp_path: Path) -> None:
    """init, item create, add, next, list, start, done (with a gate), prime: none imports Prefect or the MCP SDK."""
    code = """
    from milepost.cli import main
    for args in (["init"], ["item", "create", "x"], ["add", "a", "--gate", "true"], ["next"], ["list"],
                 ["start", "a"], ["done", "a"], ["graph"], ["runs", "a"], ["prime"]):
        try:
            main(args)
        except SystemExit as e:
            assert e.code in (0, None), (args, e.code)
    """
    mods = _modules_after(code, tmp_path)
    assert not any(m == "prefect" or m.startswith("prefect.") for m in mods)
    assert "milepost.flows" not in mods
    assert not any(m == "mcp" or m.startswith("mcp.") for m in mods)  # the MCP SDK only for `milepost mcp`


def test_next_imports_only_what_it_uses(tmp_path: Path) -> None:
    """`milepost next` needs neither networkx (no graph algorithm) nor the ORM (the service speaks Core)."""
    code = """
    from milepost.cli import main
    for args in (["init"], ["item", "create", "x"], ["add", "a"], ["next"]):
        try:
            main(["--json", *args])
        except SystemExit as e:
            assert e.code in (0, None), (args, e.code)
    """
    mods = _modules_after(code, tmp_path)
    assert "networkx" not in mods
    assert "sqlalchemy.orm" not in mods
