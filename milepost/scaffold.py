"""``milepost plan scaffold``: a refactor plan derived from a package's own
import graph.

A module's interface can be extracted once the modules it imports are done:
so every module (or, with ``level="package"``, every package) becomes a
milestone that depends on the milestones of the modules it imports inside the
package. Leaves come first, independent branches can run in parallel. Import
cycles are one strongly connected component each (networkx's condensation):
one milestone per cycle, reported as a path so the user can decide. The
import graph comes from ``grimp`` (the library behind import-linter), which
reads the source without importing it.

The result is an ordinary plan file (YAML, ``plan_status: draft``, stable
order, comments naming the cycles), validated like any other before it is
written or applied.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import yaml

from milepost.errors import EnvironmentProblem, InvalidValueError
from milepost.graph.models import check_name

__all__ = ["DEFAULT_GATE", "Scaffold", "scaffold"]

# python3, not python: Debian and others ship no `python` command outside a venv.
DEFAULT_GATE = "python3 -m compileall -q {path}"
PLACEHOLDERS = ("module", "path", "name", "tests")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass
class Unit:
    """One milestone: a module, a package, or an import cycle of them."""

    modules: list[str]
    name: str = ""
    deps: set[int] = field(default_factory=set)  # indexes of units this one imports

    @property
    def label(self) -> str:
        return self.modules[0] if len(self.modules) == 1 else " + ".join(self.modules)


@dataclass
class Scaffold:
    """A scaffolded plan: the plan as data, its YAML text, and what was found."""

    plan: dict[str, Any]
    text: str
    cycles: list[str]
    modules: int
    left_out: int = 0
    notes: list[str] = field(default_factory=list)


def _slug(module: str, root: str) -> str:
    """A valid milestone name for a module path: lowercase, the package's
    own name kept (it reads naturally in a plan), invalid characters as '-'."""
    s = module.lower()
    s = re.sub(r"[^a-z0-9._-]", "-", s)
    if not s or not s[0].isalpha():
        s = "m" + s
    if len(s) > 64:
        digest = hashlib.sha1(module.encode()).hexdigest()[:8]
        s = s[:55].rstrip(".-_") + "-" + digest
    return s


def _unique(names: Iterable[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            suffix = f"-{seen[n]}"
            n = n[: 64 - len(suffix)] + suffix
        else:
            seen[n] = 1
        out.append(check_name(n))
    return out


def _render(template: str, values: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in values:
            allowed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            raise InvalidValueError(f"unknown placeholder {{{key}}} in {template!r}: use {allowed}")
        return values[key]

    return _PLACEHOLDER.sub(sub, template)


def _command_name(template: str, taken: set[str]) -> str:
    words = [w for w in shlex.split(template.replace("{", "").replace("}", ""), posix=True) if w]
    word = next((w for w in words if w not in ("python", "python3", "-m", "uv", "run") and not w.startswith("-")), "")
    base = re.sub(r"[^a-z0-9._-]", "-", Path(word).name.lower()).strip("-._") or "step"
    if not base[0].isalpha():
        base = "step-" + base
    name, n = base[:60], 1
    while name in taken:
        n += 1
        name = f"{base[:58]}-{n}"
    taken.add(name)
    return name


def _build_graph(packages: Sequence[str], paths: Sequence[Path]) -> Any:
    for p in reversed(paths):
        sys.path.insert(0, str(p.resolve()))
    importlib.invalidate_caches()
    try:
        import grimp
    except ImportError as e:  # pragma: no cover - a dependency of milepost
        raise EnvironmentProblem(f"plan scaffold needs grimp: {e}") from None
    for pkg in packages:
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.submodule_search_locations is None:
            where = ", ".join(str(p) for p in paths) or "sys.path"
            raise InvalidValueError(
                f"no Python package {pkg!r} found (searched {where}): install it, or pass --path DIR"
                " with the folder that holds it (a package is a folder with __init__.py)"
            )
    try:
        return grimp.build_graph(*packages, cache_dir=None)
    except Exception as e:  # grimp reports a source file it cannot parse, among others
        raise InvalidValueError(f"cannot read the imports of {', '.join(packages)}: {type(e).__name__}: {e}") from None


def _module_files(modules: Iterable[str]) -> dict[str, Path | None]:
    """Each module's source file, found from its top-level package's folder
    (``find_spec`` of a submodule would import, and run, its parents)."""
    roots: dict[str, Path | None] = {}
    out: dict[str, Path | None] = {}
    for m in modules:
        top, *rest = m.split(".")
        if top not in roots:
            spec = importlib.util.find_spec(top)
            locations = list(spec.submodule_search_locations or []) if spec is not None else []
            roots[top] = Path(locations[0]) if locations else None
        folder = roots[top]
        if folder is None:
            out[m] = None
            continue
        here = folder.joinpath(*rest)
        out[m] = here / "__init__.py" if (here / "__init__.py").exists() else here.with_suffix(".py")
    return out


def _shown(path: Path | None, base: Path) -> str:
    if path is None:
        return ""
    try:
        return str(path.resolve().relative_to(base))
    except ValueError:
        return str(path)


def _changed_modules(ref: str, modules: dict[str, Path | None], base: Path) -> set[str]:
    try:
        out = subprocess.run(
            ["git", "diff", "--name-only", ref, "--"], cwd=base, capture_output=True, text=True, check=False
        )
    except OSError as e:
        raise EnvironmentProblem(f"--affected-by needs git: {e.strerror or e}") from None
    if out.returncode != 0:
        detail = " ".join(out.stderr.split()) or f"exit {out.returncode}"
        raise InvalidValueError(f"--affected-by {ref!r}: git diff failed: {detail}")
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=base, capture_output=True, text=True).stdout
    root = Path(top.strip() or base).resolve()
    changed = {(root / line).resolve() for line in out.stdout.splitlines() if line.strip()}
    return {m for m, p in modules.items() if p is not None and p.resolve() in changed}


def _tests_for(tests: Path | None, package: str, modules: Iterable[str], base: Path) -> dict[str, list[str]]:
    """Test files per module: those that import it, when ``tests`` is a
    package (read from the same kind of import graph), else the
    ``test_<name>.py`` files of the folder."""
    out: dict[str, list[str]] = {m: [] for m in modules}
    if tests is None or not tests.is_dir():
        return out
    if (tests / "__init__.py").exists():
        graph = _build_graph([tests.name, package], [tests.resolve().parent])
        importers = {m: sorted(t for t in graph.find_modules_that_directly_import(m)) for m in out}
        files = _module_files({t for ts in importers.values() for t in ts if t.split(".")[0] == tests.name})
        for m, ts in importers.items():
            out[m] = [_shown(files[t], base) for t in ts if files.get(t) is not None]
        return out
    found = sorted(tests.rglob("test_*.py"))
    for m in out:
        last = m.rsplit(".", 1)[-1]
        out[m] = [_shown(f, base) for f in found if f.stem == f"test_{last}"]
    return out


def scaffold(
    package: str,
    *,
    paths: Sequence[Path] = (),
    level: Literal["module", "package"] = "module",
    gates: Sequence[str] = (),
    acceptance: str | None = None,
    tests: Path | None = None,
    final: str | None = None,
    final_gate: str | None = None,
    affected_by: str | None = None,
    objective: str | None = None,
    base: Path | None = None,
    package_imports: bool = False,
) -> Scaffold:
    """Build the plan. ``base`` is where gates will run (paths in ``{path}``
    and ``{tests}`` are relative to it); default: the current folder.
    ``package_imports``: count a module's import of an enclosing package as a
    dependency (off: such an import reaches siblings through the package's
    namespace, and would tie every module into one cycle with the package)."""
    base = (base or Path.cwd()).resolve()
    if final_gate and not final:
        raise InvalidValueError("--final-gate needs --final NAME (the milestone that runs it)")
    if final:
        check_name(final, "final milestone")
    gates = list(gates) or [DEFAULT_GATE]
    graph = _build_graph([package], paths)
    modules = sorted(graph.modules)
    files = _module_files(modules)

    # Group modules into units (module, or package), then edges between units.
    def group(m: str) -> str:
        if level == "module":
            return m
        path = files.get(m)
        is_pkg = path is not None and path.name == "__init__.py"
        return m if is_pkg else m.rsplit(".", 1)[0]

    groups = sorted({group(m) for m in modules})
    contents: dict[str, list[str]] = {}
    for m in modules:
        contents.setdefault(group(m), []).append(m)
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_nodes_from(groups)
    for m in modules:
        for imported in graph.find_modules_directly_imported_by(m):
            if imported not in files or group(imported) == group(m):
                continue
            if not package_imports and m.startswith(imported + "."):
                # A module importing an enclosing package (`import networkx as nx` inside
                # networkx) reaches its siblings through the package's namespace; the
                # package's own module aggregates them and comes after them.
                continue
            g.add_edge(group(m), group(imported))  # m needs imported done first

    kept: set[str] = set(groups)
    left_out = 0
    if affected_by is not None:
        changed = _changed_modules(affected_by, files, base)
        touched = {group(m) for m in changed}
        # A module is affected when it changed or imports, directly or not, one that did.
        affected = set(touched)
        for t in touched:
            affected |= nx.ancestors(g, t)
        left_out = len(groups) - len(affected)
        kept = affected
    sub = g.subgraph(kept).copy()

    # Import cycles: one milestone per strongly connected component.
    cond = nx.condensation(sub)
    members: dict[int, list[str]] = {c: sorted(cond.nodes[c]["members"]) for c in cond.nodes}
    cycles: list[str] = []
    for ms in members.values():
        if len(ms) > 1:
            cyc = nx.find_cycle(sub.subgraph(ms))
            nodes = [u for u, _ in cyc]
            start = nodes.index(min(nodes))
            nodes = nodes[start:] + nodes[:start]
            cycles.append(" -> ".join([*nodes, nodes[0]]))

    # Leaves first: a unit comes after the units it imports (reverse edges), ties by name.
    order = list(nx.lexicographical_topological_sort(cond.reverse(copy=True), key=lambda c: members[c][0]))
    units = [Unit(modules=members[c]) for c in order]
    index = {c: i for i, c in enumerate(order)}
    for c in order:
        for _, dep in cond.out_edges(c):
            units[index[c]].deps.add(index[dep])
    raw = [_slug(u.modules[0], package) + ("-cycle" if len(u.modules) > 1 else "") for u in units]
    for u, n in zip(units, _unique(raw), strict=True):
        u.name = n

    test_files = _tests_for(tests, package, [m for u in units for unit in u.modules for m in contents[unit]], base)
    notes: list[str] = []
    milestones: list[dict[str, Any]] = []
    for u in units:
        values = {
            "module": " ".join(u.modules),
            "path": " ".join(_shown(files.get(m) if level == "module" else _unit_path(m, files), base)
                             for m in u.modules),
            "name": u.name,
            "tests": " ".join(
                dict.fromkeys(t for unit in u.modules for m in contents[unit] for t in test_files.get(m, []))
            ),
        }  # fmt: skip
        commands = []
        taken: set[str] = set()
        for template in gates:
            if "{tests}" in template and not values["tests"]:
                notes.append(f"{u.name}: no test imports {values['module']}; `{template}` left out")
                continue
            commands.append(_FlowDict(name=_command_name(template, taken), run=_render(template, values)))
        entry: dict[str, Any] = {"name": u.name}
        deps = [units[d].name for d in sorted(u.deps)]  # units are in plan order: their indexes sort them
        if deps:
            entry["deps"] = _Flow(deps)
        entry["acceptance"] = (
            _render(acceptance, values)
            if acceptance
            else f"{values['module']} depends only on the interfaces of what it imports, and its gate passes"
        )
        if len(commands) == 1:
            entry["gate"] = commands[0]["run"]
        elif commands:
            entry["gate"] = commands
        milestones.append(entry)
    if final:
        if final in {u.name for u in units}:
            raise InvalidValueError(f"--final {final!r} is already the name of a module's milestone: choose another")
        needed = {d for u in units for d in u.deps}
        tops = [u.name for i, u in enumerate(units) if i not in needed]
        entry = {"name": final, "acceptance": "everything the refactor touched works together"}
        if tops:
            entry["deps"] = _Flow(tops)
        if final_gate:
            entry["gate"] = final_gate
        milestones.append(entry)

    what = f"modules of {package}" if level == "module" else f"packages of {package}"
    scope = f" changed since {affected_by} or importing them" if affected_by is not None else ""
    plan: dict[str, Any] = {
        "objective": objective or f"Refactor {package} module by module, leaves first",
        "plan_status": "draft",
        "milestones": milestones,
    }
    header = [
        f"# scaffolded by `milepost plan scaffold {package}`: one milestone per unit ({len(units)} {what}{scope}),",
        "# each depending on the milestones of what it imports; edit it, then `milepost plan apply` it.",
    ]
    if left_out:
        header.append(f"# {left_out} unaffected unit(s) left out.")
    if cycles:
        header.append("# import cycles (one milestone each; consider breaking them first):")
        header += [f"#   {c}" for c in cycles]
    else:
        header.append("# import cycles: none")
    body = yaml.dump(plan, Dumper=_PlanDumper, sort_keys=False, allow_unicode=True, width=120)
    text = "\n".join(header) + "\n" + body
    from milepost.planfile import parse_plan

    parse_plan(text, "<scaffold>")  # validated like any other plan
    return Scaffold(plan=plan, text=text, cycles=cycles, modules=len(modules), left_out=left_out, notes=notes)


class _Flow(list[str]):
    """A list written on one line (deps)."""


class _FlowDict(dict[str, str]):
    """A mapping written on one line (a named gate command)."""


class _PlanDumper(yaml.SafeDumper):
    pass


_PlanDumper.add_representer(_Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
_PlanDumper.add_representer(_FlowDict, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))


def _unit_path(unit: str, files: dict[str, Path | None]) -> Path | None:
    """A package unit's folder (its ``__init__.py``'s parent), or the module file."""
    path = files.get(unit)
    if path is not None and path.name == "__init__.py":
        return path.parent
    return path
