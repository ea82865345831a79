"""The public surface and the import costs it promises."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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
            "workspace",
            "settings",
            "cli",
            "agent",
            "mcp_server",
            "picture",
            "report",
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


def _imports(path: Path) -> set[str]:
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_dependencies_point_one_way() -> None:
    """graph <- gates <- flows; the store, service, CLI and MCP at the edges.
    graph/ imports only the standard library, pydantic, networkx and itself."""
    root = Path(milepost.__file__).resolve().parent.parent
    std = set(sys.stdlib_module_names)
    allowed = {
        "graph": ("milepost.graph",),
        "gates": ("milepost.graph", "milepost.gates"),
        "flows": ("milepost.graph", "milepost.gates", "milepost.flows", "milepost.service", "milepost.results",
                  "milepost.errors", "milepost._text", "milepost.settings", "milepost.picture", "milepost.report",
                  "milepost.store", "milepost.retry", "milepost.workspace"),
    }  # fmt: skip
    third = {
        "graph": {"pydantic", "networkx"},
        "gates": {"pydantic", "pathspec"},
        "flows": {"pydantic", "prefect", "prefect_dask"},
    }
    for folder, ours in allowed.items():
        for path in sorted((root / folder).glob("*.py")):
            for name in _imports(path):
                top = name.split(".")[0]
                if top in std or top == "__future__" or top in third[folder]:
                    continue
                assert name.startswith(ours), f"{folder}/{path.name} imports {name}"


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
