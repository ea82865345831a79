"""Module inputs: the files a Python module's proof reads, from its imports
as they are now.

An input entry ``module:NAME`` names a module of the workspace, by its
dotted name (``module:kv.mod_c``, found in the workspace root or ``src/``)
or by its file (``module:src/kv/mod_c.py``, ``module:tests/test_mod_c.py``).
It stands for that file, the ``__init__.py`` of the packages that enclose it
(importing it runs them first) and, transitively, every module of the
workspace it imports when it runs:

* module-level imports (in ``try``/``if`` blocks and class bodies too), and
  imports inside functions (they run when the function is called) count;
* imports under ``if TYPE_CHECKING:`` do not: they never run;
* an import of a package that encloses the importer (``from kv import x``
  inside ``kv.mod_c``, ``import networkx as nx`` inside networkx) counts the
  package's ``__init__.py`` as content but does not follow its imports: the
  module reaches its siblings through it, and following it would make every
  module's inputs the whole package;
* for a test file (``test_*.py``, ``*_test.py``), the ``conftest.py`` files
  pytest reads for it (its folder and every folder above it, up to the
  workspace root) with their imports.

Absolute imports are looked up as Python would on ``sys.path``: in the folder
above the importing file's top package, the folders above the entry's own
top packages, the workspace root and ``src/``; the first folder that has the
top-level name wins. Names found nowhere (the standard library, installed
packages) are not inputs. Imports made by name at run time
(``importlib.import_module("x")``) cannot be seen.

Each file's import statements are parsed once per content (``ast``) and kept
in ``.milepost/cache/imports.json`` by content digest, so a check after an
edit parses only the edited files. No Prefect, no store.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from milepost.gates.import_memo import ImportMemo, Known, folder_mtime
from milepost.graph.models import MODULE_PREFIX

__all__ = [
    "MODULE_PREFIX",
    "Expansion",
    "ImportIndex",
    "Statement",
    "is_module_entry",
    "is_test_file",
    "parse_imports",
    "parse_lock",
]

CACHE_FILE = Path("cache") / "imports.json"  # under the workspace's .milepost/
FORMAT = "milepost-imports-1"
# Where an import statement runs.
MODULE_LEVEL = "m"
IN_FUNCTION = "f"
TYPE_CHECKING = "t"
# CPython 3.11 keeps the AST constructor's recursion depth per interpreter, not per thread: parses in
# several threads at once (gates fingerprinted side by side, --max-parallel 2) can fail with "SystemError:
# AST constructor recursion depth mismatch" (python/cpython#106905; seen on 3.11.7 in a drive of jinja2).
# milepost's parses take turns: a few milliseconds a module, next to the reading of its file.
_PARSE_TURNS = threading.Lock()
_TEST_FILE = re.compile(r"(?:test_\w*|\w+_test)\.py")
DEFAULT_ROOTS = ("", "src")


def parse_lock() -> threading.Lock:
    """The lock ``ast.parse`` calls of milepost's threads take turns with (see ``_PARSE_TURNS``)."""
    return _PARSE_TURNS


def is_module_entry(entry: str) -> bool:
    return entry.startswith(MODULE_PREFIX)


def is_test_file(rel: str) -> bool:
    """Whether pytest collects the file by its name (``test_*.py``, ``*_test.py``)."""
    return _TEST_FILE.fullmatch(rel.rpartition("/")[2]) is not None


@dataclass(frozen=True)
class Statement:
    """One import statement: ``level`` dots, ``module`` (None for ``from . import x``),
    the names after ``import`` (empty for ``import a.b``), where it runs, and its line."""

    level: int
    module: str | None
    names: tuple[str, ...]
    kind: str
    line: int


def _type_checking(test: ast.expr) -> bool | None:
    """True for ``if TYPE_CHECKING``, False for ``if not TYPE_CHECKING``, else None."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    node = test.operand if isinstance(test, ast.UnaryOp) and negated else test
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return None if name != "TYPE_CHECKING" else not negated


def parse_imports(source: bytes) -> list[Statement] | None:
    """Every import statement of a module's source with where it runs; None
    when the source does not parse."""
    try:
        with _PARSE_TURNS:
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    out: list[Statement] = []

    def visit(body: Sequence[ast.AST], kind: str) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.extend(Statement(0, a.name, (), kind, node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                names = tuple(a.name for a in node.names)
                out.append(Statement(node.level, node.module, names, kind, node.lineno))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(list(ast.iter_child_nodes(node)), IN_FUNCTION if kind != TYPE_CHECKING else kind)
            elif isinstance(node, ast.If) and kind == MODULE_LEVEL and (guard := _type_checking(node.test)) is not None:
                visit(node.body, TYPE_CHECKING if guard else kind)
                visit(node.orelse, kind if guard else TYPE_CHECKING)
            else:
                visit(list(ast.iter_child_nodes(node)), kind)

    visit(tree.body, MODULE_LEVEL)
    return out


class _ParseCache:
    """content digest -> the file's import statements, one JSON file per
    workspace (whatever goes wrong with it only costs time)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, list[list[object]]] | None = None
        self._dirty = False
        self._lock = threading.Lock()
        self.parsed = 0  # files parsed (a miss each): for tests and benchmarks

    def _load(self) -> dict[str, list[list[object]]]:
        if self._entries is None:
            entries: dict[str, list[list[object]]] = {}
            if self.path is not None:
                with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                    data = json.loads(self.path.read_text())
                    if data.get("format") == FORMAT:
                        entries = dict(data["entries"])
            self._entries = entries
        return self._entries

    def get(self, digest: str, read: Callable[[], bytes | None]) -> list[Statement] | None:
        with self._lock:
            hit = self._load().get(digest)
        if hit is not None:
            try:
                return [Statement(int(s[0]), s[1], tuple(s[2]), str(s[3]), int(s[4])) for s in hit]  # type: ignore[arg-type,call-overload]
            except (TypeError, ValueError, IndexError):
                pass
        source = read()
        found = parse_imports(source) if source is not None else None
        if found is None:
            return None
        self.parsed += 1
        with self._lock:
            self._load()[digest] = [[s.level, s.module, list(s.names), s.kind, s.line] for s in found]
            self._dirty = True
        return found

    def save(self) -> None:
        with self._lock:
            if not self._dirty or self.path is None or self._entries is None:
                return
            data = json.dumps({"format": FORMAT, "entries": self._entries}, separators=(",", ":"))
            self._dirty = False
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(data)
            tmp.replace(self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()


@dataclass
class Expansion:
    """What a ``module:`` entry stands for now: the files (relative paths)
    and, when the module cannot be found, why."""

    files: set[str] = field(default_factory=set)
    missing: str | None = None


@dataclass(frozen=True)
class _Module:
    name: str  # dotted, as Python's import system names it from its root
    rel: str  # the file, relative to the workspace root
    root: str  # the folder its top package is found in ('' for the workspace root)
    base: str | None = None  # the folder above its top regular package, when a namespace lies between


class ImportIndex:
    """The workspace's modules and their runtime imports, read on demand.
    ``digest(rel)`` gives a file's content digest (the snapshot's, through
    its stat cache), which keys the parse cache; ``memo`` keeps what was
    found out for the next index of the same workspace (see :class:`ImportMemo`)."""

    def __init__(
        self,
        root: Path,
        digest: Callable[[str], str | None],
        cache_path: Path | None = None,
        memo: ImportMemo | None = None,
    ) -> None:
        self.root = root
        self._digest = digest
        self.cache = _ParseCache(cache_path)
        self._k = memo.current(root) if memo is not None else Known()

    @property
    def known(self) -> Known:
        """What this index found out and shares with the process's next ones while the folders are as they were."""
        return self._k

    # -- the file system, asked once -------------------------------------------------------

    def _looked_in(self, rel: str) -> None:
        """Record the nearest folder above ``rel`` that exists: what ``rel`` is changes only with it."""
        folder = rel.rpartition("/")[0]
        while folder not in self._k.folders:
            mtime = folder_mtime(self.root, folder)
            if mtime is not None or not folder:
                self._k.folders[folder] = mtime
                return
            folder = folder.rpartition("/")[0]

    def _file(self, rel: str) -> bool:
        known = self._k.isfile.get(rel)
        if known is None:
            self._looked_in(rel)
            known = self._k.isfile[rel] = os.path.isfile(os.path.join(self.root, rel))
        return known

    def _dir(self, rel: str) -> bool:
        known = self._k.isdir.get(rel)
        if known is None:
            if rel:
                self._looked_in(rel)
            known = self._k.isdir[rel] = os.path.isdir(os.path.join(self.root, rel) if rel else self.root)
        return known

    @staticmethod
    def _join(*parts: str) -> str:
        return "/".join(p for p in parts if p)

    def module_of(self, rel: str, roots: Sequence[str] = DEFAULT_ROOTS) -> _Module:
        """A file's module: the package folders above it name it, and the
        namespace folders (no ``__init__.py``) between them and the nearest
        import root above (``src/ns/mod.py`` is ``ns.mod`` from ``src``)."""
        key = f"{rel}\0{'|'.join(roots)}"
        known: _Module | None = self._k.modules.get(key)
        if known is not None:
            return known
        folder, _, filename = rel.rpartition("/")
        parts = [] if filename == "__init__.py" else [filename.removesuffix(".py")]
        while folder and self._file(self._join(folder, "__init__.py")):
            folder, _, name = folder.rpartition("/")
            parts.insert(0, name)
        root = self._root_above(folder, roots)
        base = None
        if root is not None and root != folder:
            parts = [*folder[len(root) :].strip("/").split("/"), *parts]
            base, folder = folder, root
        if not parts:  # a bare __init__.py at the root
            parts = ["__init__"]
        m = _Module(".".join(parts), rel, folder, base)
        self._k.modules[key] = m
        return m

    @staticmethod
    def _root_above(folder: str, roots: Sequence[str]) -> str | None:
        """The deepest import root that holds ``folder`` (itself included)."""
        above = [r for r in roots if not r or folder == r or folder.startswith(r + "/")]
        return max(above, key=len) if above else None

    def find(self, dotted: str, roots: Sequence[str]) -> _Module | None:
        """The module ``dotted`` as an import would find it in ``roots``."""
        top = dotted.split(".")[0]
        for r in roots:
            base = self._join(r, top)
            if not (self._dir(base) or self._file(base + ".py")):
                continue
            path = self._join(r, *dotted.split("."))
            for rel in (path + "/__init__.py", path + ".py"):
                if self._file(rel):
                    return _Module(dotted, rel, r)
            return None  # the first folder with the top-level name is the one Python uses
        return None

    # -- one file's imports ---------------------------------------------------------------

    def _statements(self, rel: str) -> list[Statement]:
        digest = self._digest(rel)
        if digest is None:
            return []

        def read() -> bytes | None:
            try:
                return (self.root / rel).read_bytes()
            except OSError:
                return None

        return self.cache.get(digest.split(":", 1)[0], read) or []

    def imports_of(self, rel: str, roots: Sequence[str]) -> tuple[list[_Module], set[str]]:
        """The workspace modules ``rel`` imports at run time (not under
        ``TYPE_CHECKING``), and the files of enclosing packages it imports
        (content only)."""
        key = (rel, tuple(roots))
        digest = self._digest(rel) or ""
        known = self._k.imports.get(key)
        if known is not None and known[0] == digest:
            mods: list[_Module] = known[1]
            return mods, known[2]
        me = self.module_of(rel, roots)
        # A script's own folder comes first (pytest's rootdir insertion: tests/ imports tests/helpers.py).
        search = list(dict.fromkeys([*([me.base] if me.base is not None else []), me.root, *roots]))
        found: dict[str, _Module] = {}
        content: set[str] = set()
        enclosing = {".".join(me.name.split(".")[:i]) for i in range(1, me.name.count(".") + 1)}
        if rel.endswith("/__init__.py") or rel == "__init__.py":
            enclosing.add(me.name)
        for st in self._statements(rel):
            if st.kind == TYPE_CHECKING:
                continue
            for target in self._targets(st, me, rel):
                for m in self._chain(target, search):
                    if m.name in enclosing:
                        content.add(m.rel)
                    elif m.rel != rel:
                        found.setdefault(m.rel, m)
        out = [found[k] for k in sorted(found)]
        self._k.imports[key] = (digest, out, content)
        return out, content

    def imported_by_lines(self, rel: str, roots: Sequence[str], lines: Iterable[int]) -> list[str]:
        """The workspace files the imports on ``lines`` of ``rel`` resolve to now (packages enclosing it left
        out), sorted: what the code a unit executed imports (gates/unit_blocks.py)."""
        wanted = frozenset(lines)
        key = (rel, tuple(roots), wanted)
        digest = self._digest(rel) or ""
        known = self._k.by_lines.get(key)  # (the process's while the folders are as they were, as imports_of's)
        if known is not None and known[0] == digest:
            return known[1]
        found = self._imported_by_lines(rel, roots, wanted)
        self._k.by_lines[key] = (digest, found)
        return found

    def _imported_by_lines(self, rel: str, roots: Sequence[str], wanted: frozenset[int]) -> list[str]:
        me = self.module_of(rel, roots)
        search = list(dict.fromkeys([*([me.base] if me.base is not None else []), me.root, *roots]))
        enclosing = {".".join(me.name.split(".")[:i]) for i in range(1, me.name.count(".") + 1)}
        found: set[str] = set()
        for st in self._statements(rel):
            if st.kind == TYPE_CHECKING or st.line not in wanted:
                continue
            for target in self._targets(st, me, rel):
                found.update(m.rel for m in self._chain(target, search) if m.name not in enclosing and m.rel != rel)
        return sorted(found)

    def _targets(self, st: Statement, me: _Module, rel: str) -> list[str]:
        """The dotted names a statement imports (a ``from`` import also asks
        for ``package.name``: a submodule when there is one)."""
        if st.level == 0:
            base = st.module or ""
        else:
            parts = me.name.split(".")
            if not rel.endswith("__init__.py"):
                parts = parts[:-1]
            drop = st.level - 1
            if drop > len(parts) or (drop == len(parts) and not st.module):
                return []
            parts = parts[: len(parts) - drop]
            base = ".".join([*parts, st.module] if st.module else parts)
        if not base:
            return []
        if not st.names:
            return [base]
        return [base, *(f"{base}.{n}" for n in st.names if n != "*")]

    def _chain(self, dotted: str, roots: Sequence[str]) -> list[_Module]:
        """``a.b.c`` -> the modules a, a.b, a.b.c that exist (importing one runs the ones above it)."""
        parts = dotted.split(".")
        out = []
        for i in range(1, len(parts) + 1):
            m = self.find(".".join(parts[:i]), roots)
            if m is not None:
                out.append(m)
        return out

    # -- an entry's closure ----------------------------------------------------------------

    def resolve_entry(self, entry: str, roots: Sequence[str] = DEFAULT_ROOTS) -> _Module | None:
        body = entry[len(MODULE_PREFIX) :] if is_module_entry(entry) else entry
        if body.endswith(".py"):
            body = body.removeprefix("./")
            return self.module_of(body, roots) if self._file(body) else None
        return self.find(body, list(dict.fromkeys([*roots, *DEFAULT_ROOTS])))

    def roots_of(self, entries: Iterable[str]) -> list[str]:
        """The import roots the entries' own modules imply (their top packages' folders)."""
        out: list[str] = []
        for e in entries:
            m = self.resolve_entry(e)
            if m is not None and m.root not in out:
                out.append(m.root)
        return [*out, *(r for r in DEFAULT_ROOTS if r not in out)]

    def expand(self, entry: str, roots: Sequence[str] = DEFAULT_ROOTS) -> Expansion:
        """The files a ``module:`` entry stands for now (kept while those files
        and the folders looked in are as they were; do not change the result)."""
        key = (entry, tuple(roots))
        known = self._k.expanded.get(key)
        if known is not None and all(self._digest(f) == d for f, d in known[0].items()):
            kept: Expansion = known[1]
            return kept
        found = self._expand(entry, roots)
        self._k.expanded[key] = ({f: self._digest(f) for f in found.files}, found)
        return found

    def _expand(self, entry: str, roots: Sequence[str]) -> Expansion:
        start = self.resolve_entry(entry, roots)
        if start is None:
            body = entry[len(MODULE_PREFIX) :]
            where = "file not found" if body.endswith(".py") else f"looked in {', '.join(r or '.' for r in roots)}"
            return Expansion(missing=f"{entry}: no such module ({where})")
        out = Expansion()
        todo = [start.rel]
        if _TEST_FILE.fullmatch(start.rel.rpartition("/")[2]):
            todo += self._conftests(start.rel)
        seen: set[str] = set()
        while todo:
            rel = todo.pop()
            if rel in seen:
                continue
            seen.add(rel)
            out.files.add(rel)
            out.files.update(self._enclosing(rel))
            mods, content = self.imports_of(rel, roots)
            out.files.update(content)
            todo.extend(m.rel for m in mods if m.rel not in seen)
        return out

    def _enclosing(self, rel: str) -> list[str]:
        """The ``__init__.py`` of every package folder above ``rel``."""
        out = []
        folder = rel.rpartition("/")[0]
        if rel.endswith("__init__.py"):
            folder = folder.rpartition("/")[0] if folder else ""
        while folder:
            init = self._join(folder, "__init__.py")
            if not self._file(init):
                break
            out.append(init)
            folder = folder.rpartition("/")[0]
        return out

    def _conftests(self, rel: str) -> list[str]:
        out = []
        folder = rel.rpartition("/")[0]
        while True:
            c = self._join(folder, "conftest.py")
            if self._file(c):
                out.append(c)
            if not folder:
                break
            folder = folder.rpartition("/")[0]
        return out

    def save(self) -> None:
        self.cache.save()
