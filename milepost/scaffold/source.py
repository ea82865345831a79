"""Where a package's code is, and what it imports.

The package is read from a folder, never from what this process has
imported: milepost itself imports click, pydantic, networkx, rich..., and a
spec lookup would find that copy (its version, its site-packages) instead of
the checkout being planned. grimp parses the folder's files (it imports
nothing); it is told the folder through its package-finder port.
"""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milepost.errors import EnvironmentProblem, InvalidValueError

__all__ = ["Imports", "Source", "Statement", "locate", "read_imports", "statement_kinds"]

_GRIMP_LOCK = threading.Lock()  # grimp's settings are process-wide


@dataclass(frozen=True)
class Source:
    """The package folder that was read, and how it was found."""

    package: str
    folder: Path  # resolved; holds __init__.py
    found: str  # "--path", "this folder" or "sys.path"


@dataclass(frozen=True)
class Statement:
    """One import statement: ``importer`` imports ``imported`` at ``line``."""

    importer: str
    imported: str
    line: int
    text: str


@dataclass
class Imports:
    """A package's modules, their files and their direct imports (sorted)."""

    source: Source
    modules: list[str]
    files: dict[str, Path]
    imported_by: dict[str, list[str]]  # module -> the package's modules it imports directly
    graph: Any  # grimp's ImportGraph: import details on demand

    def statements(self, importer: str, imported: str) -> list[Statement]:
        details = self.graph.get_import_details(importer=importer, imported=imported)
        found = {(int(d["line_number"]), str(d["line_contents"])) for d in details}
        return [Statement(importer, imported, line, text) for line, text in sorted(found)]


def _is_package(folder: Path) -> bool:
    return (folder / "__init__.py").is_file()


def locate(package: str, paths: Sequence[Path], base: Path) -> Source:
    """The folder of ``package``: in the first of ``paths`` that holds it
    (``--path``; the package's own folder is accepted too), else in ``base``
    or ``base/src``, else where a fresh interpreter with this ``sys.path``
    would find it (the meta-path finders, never ``sys.modules``)."""
    if not package.isidentifier():
        top = package.split(".")[0]
        raise InvalidValueError(
            f"package {package!r} is not a top-level package name: give one such as {top!r}"
            " (plan scaffold reads a whole package)"
        )
    if paths:
        for p in paths:
            for folder in (p / package, p):
                if folder.name == package and _is_package(folder):
                    return Source(package, folder.resolve(), "--path")
        where = ", ".join(str(p) for p in paths)
        module = next((p / f"{package}.py" for p in paths if (p / f"{package}.py").is_file()), None)
        if module is not None:
            raise InvalidValueError(
                f"{package!r} in {where} is a module ({module.name}), not a package:"
                " plan scaffold reads a package (a folder with __init__.py)"
            )
        raise InvalidValueError(
            f"no Python package {package!r} found in {where}: --path takes the folder that holds"
            f" {package}/__init__.py (e.g. src)"
        )
    for folder in (base / package, base / "src" / package):
        if _is_package(folder):
            return Source(package, folder.resolve(), "this folder")
    origin = _fresh_origin(package)
    if origin is None or origin.name != "__init__.py":
        what = f"a module ({origin}), not a package" if origin is not None else "not found"
        raise InvalidValueError(
            f"no Python package {package!r} found (in {base}, {base / 'src'} or sys.path: {what}):"
            " pass --path DIR with the folder that holds it (a package is a folder with __init__.py)"
        )
    return Source(package, origin.parent.resolve(), "sys.path")


def _fresh_origin(package: str) -> Path | None:
    """Where ``import package`` would load it from in a new process with
    this ``sys.path``: the meta-path finders, asked directly (never
    ``sys.modules``, which holds the copy milepost itself imported)."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(package, None)
        except (ImportError, ValueError, AttributeError, TypeError):
            continue
        if spec is None:
            continue
        if spec.origin and spec.origin not in ("built-in", "frozen"):
            return Path(spec.origin)
        return None
    return None


def read_imports(source: Source) -> Imports:
    """grimp's import graph of the package in ``source.folder``."""
    try:
        import grimp
        from grimp.application.config import settings
        from grimp.application.ports.packagefinder import AbstractPackageFinder
    except ImportError as e:  # pragma: no cover - a dependency of milepost
        raise EnvironmentProblem(f"plan scaffold needs grimp: {e}") from None

    class _Here(AbstractPackageFinder):
        def determine_package_directories(self, package_name: str, file_system: object) -> set[str]:
            if package_name != source.package:  # pragma: no cover - only one package is asked for
                raise ValueError(f"unexpected package {package_name!r}")
            return {str(source.folder)}

    with _GRIMP_LOCK:
        previous = settings.PACKAGE_FINDER
        settings.configure(PACKAGE_FINDER=_Here())
        try:
            graph = grimp.build_graph(source.package, cache_dir=None)
        except Exception as e:  # grimp reports a source file it cannot parse, among others
            raise InvalidValueError(f"cannot read the imports of {source.package}: {type(e).__name__}: {e}") from None
        finally:
            settings.configure(PACKAGE_FINDER=previous)
    files = module_files(source, graph.modules)
    modules = sorted(files)
    imported_by = {m: sorted(i for i in graph.find_modules_directly_imported_by(m) if i in files) for m in modules}
    return Imports(source=source, modules=modules, files=files, imported_by=imported_by, graph=graph)


def module_files(source: Source, modules: Iterable[str]) -> dict[str, Path]:
    """Each module's file, from the package folder (namespace folders, which
    have none, are left out)."""
    out: dict[str, Path] = {}
    for m in modules:
        top, *rest = m.split(".")
        if top != source.package:
            continue
        here = source.folder.joinpath(*rest)
        for candidate in (here / "__init__.py", here.with_suffix(".py")):
            if candidate.is_file():
                out[m] = candidate
                break
    return out


# -- where an import statement runs ---------------------------------------------------

MODULE_LEVEL = "module level"
TYPE_CHECKING = "TYPE_CHECKING"
IN_FUNCTION = "in a function"


def _type_checking_test(test: ast.expr) -> bool | None:
    """True for ``if TYPE_CHECKING``, False for ``if not TYPE_CHECKING``, else None."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    node = test.operand if isinstance(test, ast.UnaryOp) and negated else test
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    if name != "TYPE_CHECKING":
        return None
    return not negated


def statement_kinds(path: Path) -> dict[int, str]:
    """line -> where the import statement on it runs: at module level (when
    the module is imported; class bodies and ``try`` blocks too), only under
    ``TYPE_CHECKING``, or inside a function (when it is called). Every line
    of a multi-line statement is mapped. {} when the file cannot be parsed."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[int, str] = {}

    def visit(body: list[ast.stmt], kind: str) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                    out.setdefault(line, kind)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(node.body, IN_FUNCTION)
            elif (
                isinstance(node, ast.If)
                and kind == MODULE_LEVEL
                and (guard := _type_checking_test(node.test)) is not None
            ):
                visit(node.body, TYPE_CHECKING if guard else kind)
                visit(node.orelse, kind if guard else TYPE_CHECKING)
            else:
                for name in ("body", "orelse", "finalbody"):
                    visit(getattr(node, name, []), kind)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, kind)
                for case in getattr(node, "cases", []):
                    visit(case.body, kind)

    visit(tree.body, MODULE_LEVEL)
    return out
