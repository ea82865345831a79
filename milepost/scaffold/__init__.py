"""``milepost plan scaffold``: a refactor plan derived from a package's own
import graph.

A module's interface can be extracted once the modules it imports are done:
so every module (or, with ``level="package"``, every package) becomes a
milestone that depends on the milestones of the modules it imports inside the
package. Leaves come first, independent branches can run in parallel. An
import cycle is one milestone named after its most-imported member, or, with
``split_cycles``, a milestone that cuts the fewest imports followed by one
milestone per module (:mod:`.cycles`). Tests are mapped to modules by their
imports (:mod:`.testmap`). Every milestone's ``inputs`` are the files its
proof depends on: its modules, the modules they import (transitively) and the
tests its gate runs, so an edit makes exactly the milestones built on it stale.

The package is read from its folder (:mod:`.source`), with grimp, which
parses the source and imports nothing. Everything is sorted: the same code
gives a byte-identical plan (YAML, ``plan_status: draft``, comments naming
the source and the cycles), validated like any other before it is written.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from milepost.errors import InvalidValueError
from milepost.graph.models import check_name
from milepost.scaffold.cycles import Cycle, Cycles, DeferredCycle, find_cycles, unit_graph, unit_of
from milepost.scaffold.proof_inputs import Entries, gate_step, map_by_coverage
from milepost.scaffold.render import (
    command_name,
    count,
    dump,
    flow,
    flow_dict,
    listed,
    render,
    shown,
    slug,
    unique,
)
from milepost.scaffold.source import Imports, Source, locate, read_imports
from milepost.scaffold.testmap import TestMap, map_tests

__all__ = ["DEFAULT_GATE", "Scaffold", "scaffold"]

# python3, not python: Debian and others ship no `python` command outside a venv.
DEFAULT_GATE = "python3 -m compileall -q {path}"


@dataclass
class Scaffold:
    """A scaffolded plan: the plan as data, its YAML text, and what was found."""

    plan: dict[str, Any]
    text: str
    cycles: list[dict[str, Any]]  # one per import cycle: milestone, modules, path, import_time, cut
    modules: int
    left_out: int = 0
    notes: list[str] = field(default_factory=list)
    source: str = ""  # the package folder that was read, as shown in the plan
    cycle_lines: list[str] = field(default_factory=list)  # the cycles for a reader: path, then the imports to cut


@dataclass
class _Node:
    """One milestone in the making."""

    name: str
    kind: Literal["unit", "cycle", "cut", "member"]
    units: list[str]
    deps: set[str] = field(default_factory=set)
    cycle: Cycle | None = None
    reads: set[Path] = field(default_factory=set)  # the files its proof depends on (now)
    inputs: list[str] = field(default_factory=list)  # its input entries


@dataclass
class _Options:
    """The options every step reads, checked."""

    package: str
    base: Path
    level: Literal["module", "package"]
    gates: list[str]
    acceptance: str | None
    roots: list[Path]
    final: str | None
    final_gate: str | None  # the final milestone's gate: --final-gate, else the first --gate with {tests}
    chosen_final: bool  # --final-gate was given
    affected_by: str | None
    package_imports: bool
    split_cycles: bool

    @property
    def unit_word(self) -> str:
        return "module" if self.level == "module" else "package"

    @property
    def uses_tests(self) -> bool:
        return any("{tests}" in t for t in self.gates)


@dataclass
class _Read:
    """The package as read: its folder, files, test map and code modules."""

    source: Source
    imports: Imports
    where: str  # the folder as shown in the plan
    inside: bool  # the folder is inside the workspace: milestones get inputs
    tm: TestMap
    code: list[str]  # its modules that are not tests
    notes: list[str]

    @property
    def files(self) -> dict[str, Path]:
        return self.imports.files


@dataclass
class _Milestones:
    """The milestones found: every one, those kept, and their order."""

    units: list[str]
    contents: dict[str, list[str]]  # unit -> its modules
    found: Cycles
    nodes: list[_Node]
    kept: list[_Node]
    left_out: int = 0
    order: list[str] = field(default_factory=list)
    node_tests: dict[str, list[Path]] = field(default_factory=dict)


def scaffold(
    package: str,
    *,
    paths: Sequence[Path] = (),
    level: Literal["module", "package"] = "module",
    gates: Sequence[str] = (),
    acceptance: str | None = None,
    tests: Path | Sequence[Path] | None = None,
    final: str | None = None,
    final_gate: str | None = None,
    affected_by: str | None = None,
    objective: str | None = None,
    base: Path | None = None,
    package_imports: bool = False,
    split_cycles: bool = False,
    map_with: Literal["imports", "coverage"] = "imports",
    python: str | None = None,
) -> Scaffold:
    """Build the plan. ``base`` is the workspace root, where gates run:
    ``{path}``, ``{tests}`` and ``inputs`` are relative to it (default: the
    current folder). ``paths``: folders holding the package (``--path``);
    without them, ``base``, ``base/src``, then ``sys.path`` (never the copy
    this process imported). ``package_imports``: count a module's import of
    an enclosing package as a dependency (off: such an import reaches
    siblings through the package's namespace, and would tie every module
    into one cycle with the package)."""
    o = _options(
        package,
        base=(base or Path.cwd()).resolve(),
        level=level,
        gates=gates,
        acceptance=acceptance,
        tests=tests,
        final=final,
        final_gate=final_gate,
        affected_by=affected_by,
        package_imports=package_imports,
        split_cycles=split_cycles,
    )
    r = _read(o, paths, map_with, python)
    ms = _milestone_nodes(o, r)
    _set_inputs(o, r, ms)
    _keep_affected(o, ms)
    _order(ms)
    milestones, skipped = _unit_milestones(o, r, ms)
    if o.final:
        milestones.append(_final_milestone(o, r, ms))
    notes = r.notes + _notes(o, r, skipped)
    setup = [n for n in [_venv_note(o), *_coverage_notes(o)] if n]  # (in the file's header too)
    return _result(o, r, ms, milestones, notes + setup, objective, setup)


def _options(
    package: str,
    *,
    base: Path,
    level: Literal["module", "package"],
    gates: Sequence[str],
    acceptance: str | None,
    tests: Path | Sequence[Path] | None,
    final: str | None,
    final_gate: str | None,
    affected_by: str | None,
    package_imports: bool,
    split_cycles: bool,
) -> _Options:
    """The options checked, with their defaults filled in."""
    if final_gate and not final:
        raise InvalidValueError("--final-gate needs --final NAME (the milestone that runs it)")
    if final:
        check_name(final, "final milestone")
    gates = list(gates) or [DEFAULT_GATE]
    for template in gates:
        render(template, dict.fromkeys(("module", "path", "name", "tests"), ""))  # an unknown placeholder: now
    chosen_final = final_gate is not None
    if final and not final_gate:  # the modules' own test command over every test file: it shares their units
        final_gate = next((t for t in gates if "{tests}" in t), None)
    roots = [tests] if isinstance(tests, Path) else list(tests or [])
    return _Options(
        package=package,
        base=base,
        level=level,
        gates=gates,
        acceptance=acceptance,
        roots=[r.resolve() for r in roots],
        final=final,
        final_gate=final_gate,
        chosen_final=chosen_final,
        affected_by=affected_by,
        package_imports=package_imports,
        split_cycles=split_cycles,
    )


def _read(o: _Options, paths: Sequence[Path], map_with: str, python: str | None) -> _Read:
    """Read the package's source and imports, and map its tests to its modules."""
    source = locate(o.package, [Path(p) for p in paths], o.base)
    imports = read_imports(source)
    files = imports.files
    notes: list[str] = []
    where = shown(source.folder, o.base)
    if source.found != "--path":
        how = "found in this folder" if source.found == "this folder" else "found on sys.path"
        notes.append(f"read {o.package} from {where} ({how}; --path DIR reads another copy)")

    # The import graph as the plan counts it.
    def counted(m: str, i: str) -> bool:
        return o.package_imports or not m.startswith(i + ".")

    deps_of = {m: [i for i in imports.imported_by[m] if counted(m, i)] for m in imports.modules}
    tm = map_tests(o.package, source.folder, files, deps_of, o.roots, o.base)
    if map_with == "coverage":
        map_by_coverage(tm, python or sys.executable, source.folder, files, o.base)
    code = [m for m in imports.modules if m not in tm.in_package]
    return _Read(source, imports, where, where != str(source.folder), tm, code, notes)


def _milestone_nodes(o: _Options, r: _Read) -> _Milestones:
    """The units, their import cycles, and a milestone per unit or cycle with its deps."""
    group = unit_of(r.files, o.level)
    units = sorted({group(m) for m in r.code})
    contents: dict[str, list[str]] = {u: [] for u in units}
    for m in r.code:
        contents[group(m)].append(m)
    # Every import between units (deferred ones too); the plan's deps leave out the
    # deferred imports that close a cycle only they make (see .cycles).
    g, lines = unit_graph(r.imports, r.code, group, o.package_imports, o.base)

    # Cycles and milestones: only import-time cycles get one.
    found = find_cycles(g, lines)
    cycles = found.real
    nodes = _nodes(units, cycles, o.split_cycles)
    node_of = {u: n for n in nodes for u in n.units if n.kind != "cut"}
    cut_edges = {e for c in cycles for e in c.cut} if o.split_cycles else set()
    for u, v in found.deps(g):
        a, b = node_of[u], node_of[v]
        if a is not b and (u, v) not in cut_edges:
            a.deps.add(b.name)
    for n in nodes:
        if n.kind == "cut":
            members = {node_of[u].name for u in n.units}
            for u in n.units:
                n.deps |= node_of[u].deps - members
                node_of[u].deps.add(n.name)
    return _Milestones(units, contents, found, nodes, kept=nodes)


def _set_inputs(o: _Options, r: _Read, ms: _Milestones) -> None:
    """Each milestone's tests and input entries (its modules, and its tests), which
    stand for what they import when they are checked; with --affected-by, what they read now."""
    ms.node_tests = {n.name: _tests_of(n, ms.contents, r.tm) for n in ms.nodes}
    entries = Entries(r.source, o.base, r.files)
    for n in ms.nodes:
        n.inputs = [entries.module(m) for u in n.units for m in ms.contents[u]]
        if o.uses_tests:
            n.inputs += [entries.file(t) for t in ms.node_tests[n.name]]
        if o.affected_by is not None:  # (what they stand for now is read only to pick the affected ones)
            n.reads = entries.reads(n.inputs)


def _keep_affected(o: _Options, ms: _Milestones) -> None:
    """With --affected-by, keep only the milestones whose proof reads a changed file."""
    if o.affected_by is None:
        return
    from milepost.scaffold.changes import changed_files

    changed = changed_files(o.affected_by, o.base)
    ms.kept = [n for n in ms.nodes if n.reads & changed]
    ms.left_out = len(ms.nodes) - len(ms.kept)
    _deps_through_left_out(ms.nodes, {n.name for n in ms.kept})


def _order(ms: _Milestones) -> None:
    """The kept milestones in dependency order, ties by name."""
    import networkx as nx

    plan_dag: nx.DiGraph[str] = nx.DiGraph()
    plan_dag.add_nodes_from(n.name for n in ms.kept)
    plan_dag.add_edges_from((d, n.name) for n in ms.kept for d in n.deps)
    ms.order = list(nx.lexicographical_topological_sort(plan_dag, key=lambda s: s))


def _unit_milestones(o: _Options, r: _Read, ms: _Milestones) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The plan's entry of every kept milestone, in order, and the gate templates
    left out of some (template -> the milestones no test file is mapped to)."""
    position = {name: i for i, name in enumerate(ms.order)}
    by_name = {n.name: n for n in ms.kept}
    milestones: list[dict[str, Any]] = []
    skipped: dict[str, list[str]] = {}
    for name in ms.order:
        n = by_name[name]
        tests = ms.node_tests[n.name]
        values = {
            "module": " ".join(n.units),
            "path": " ".join(shown(_unit_path(u, r.files, o.level), o.base) for u in n.units),
            "name": n.name,
            "tests": " ".join(shown(t, o.base) for t in tests),
        }
        commands = _commands(o, r, n, values, tests, skipped)
        entry: dict[str, Any] = {"name": n.name}
        if n.deps:
            entry["deps"] = flow(sorted(n.deps, key=position.__getitem__))
        entry["acceptance"] = _acceptance(n, values, o.acceptance)
        if len(commands) == 1 and "each" not in commands[0]:
            entry["gate"] = commands[0]["run"]
        elif commands:
            entry["gate"] = commands
        if commands and r.inside:
            entry["inputs"] = flow(n.inputs + _env_entries(commands, o.base))
        milestones.append(entry)
    return milestones, skipped


def _env_entries(commands: list[dict[str, Any]], base: Path) -> list[str]:
    """The ``env:`` entries of the interpreters a milestone's gate steps start
    (``env:python3``, ``env:.venv/bin/python``): its environment is an input too."""
    from milepost.gates.pyenv import gate_entries

    found = (e for c in commands for e in gate_entries(str(c["run"]), None, base, os.environ.get("PATH")))
    return list(dict.fromkeys(found))


def _commands(
    o: _Options, r: _Read, n: _Node, values: dict[str, str], tests: list[Path], skipped: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """A milestone's gate steps: a cut's cycle check, then each template (one with
    {tests} only when a test file is mapped to it: else noted in ``skipped``)."""
    test_paths = [shown(t, o.base) for t in tests]
    module_paths = [shown(_unit_path(u, r.files, o.level), o.base) for u in n.units] if r.inside else None
    commands: list[dict[str, Any]] = []
    taken: set[str] = set()
    if n.kind == "cut":  # fails while the cycle is there: the gate cannot pass without the cut
        assert n.cycle is not None
        check = _cycles_check(o.package, r.source.folder, o.base, o.level, o.package_imports, n.cycle.members)
        commands.append(flow_dict(name=command_name("cycles", taken), run=check))
    for template in o.gates:
        if "{tests}" in template and not values["tests"]:
            skipped.setdefault(template, []).append(n.name)
            continue
        commands.append(gate_step(template, values, test_paths, taken, module_paths))
    return commands


def _final_milestone(o: _Options, r: _Read, ms: _Milestones) -> dict[str, Any]:
    """The --final milestone: after every top milestone, with the final gate."""
    assert o.final is not None
    if o.final in {n.name for n in ms.kept}:
        raise InvalidValueError(f"--final {o.final!r} is already the name of a module's milestone: choose another")
    needed = {d for n in ms.kept for d in n.deps}
    entry: dict[str, Any] = {"name": o.final, "acceptance": "everything the refactor touched works together"}
    if tops := [name for name in ms.order if name not in needed]:
        entry["deps"] = flow(tops)
    every = [shown(t, o.base) for t in r.tm.found]
    final_gate = o.final_gate
    if final_gate and "{tests}" in final_gate and not every and not o.chosen_final:
        final_gate = None  # the modules' {tests} command with no test file: no gate, as without one
    if not final_gate:
        return entry
    if "{tests}" in final_gate:
        if not every:
            raise InvalidValueError(
                f"--final-gate {final_gate!r} runs {{tests}}, but no test files were found"
                f" (test_*.py or *_test.py defining a test, in {listed([shown(x, o.base) for x in o.roots])}"
                " and the package): give --tests DIR, or a final gate without {tests}"
            )
        entry["gate"] = [gate_step(final_gate, {"tests": "{tests}"}, every, set())]
    else:
        entry["gate"] = final_gate
    if r.inside:
        folder = r.source.folder
        folders = [folder, *(x for x in o.roots if folder not in (x, *x.parents))]
        patterns = [shown(f, o.base) + "/" for f in folders if shown(f, o.base) != str(f)]
        steps = entry["gate"] if isinstance(entry["gate"], list) else [{"run": entry["gate"]}]
        entry["inputs"] = flow(patterns + _env_entries(steps, o.base))
    return entry


def _notes(o: _Options, r: _Read, skipped: dict[str, list[str]]) -> list[str]:
    """What the reader should know, after the note on where the package was read."""
    notes = []
    for template, names in skipped.items():
        where_out = f"{count(len(names), 'milestone')} no test file is mapped to"
        notes.append(f"`{template}` left out of {where_out}: {listed(names)}")
    unit_steps = [t for t in o.gates if "{tests}" in t]
    final_gate = o.final_gate
    if final_gate and "{tests}" in final_gate and unit_steps and final_gate not in unit_steps:
        notes.append(
            f"the final gate's {{tests}} command differs from the modules' ({unit_steps[0]!r}): its units share no"
            " result with theirs, so it runs every test file again; give both the same command to run each once"
        )
    if not r.inside:
        notes.append(f"no inputs: {o.package} is read from {r.where}, outside the workspace {o.base}")
    if r.tm.in_package:
        notes.append(
            f"{count(len(r.tm.in_package), 'module')} of {o.package} are tests or their helpers: no milestones"
        )
    if o.uses_tests:
        notes += _test_notes(r.tm, r.code, o.base)
    return notes


def _result(
    o: _Options,
    r: _Read,
    ms: _Milestones,
    milestones: list[dict[str, Any]],
    notes: list[str],
    objective: str | None,
    setup: list[str],
) -> Scaffold:
    """The plan, its YAML text under a header comment, validated, and what was found."""
    unit_word, n_units = o.unit_word, count(len(ms.units), o.unit_word)
    what = f"{n_units} of {o.package}, read from {r.where}"
    goal = f"Refactor {o.package} {unit_word} by {unit_word}, leaves first ({n_units})"
    if o.affected_by is not None:
        affected = f"{len(ms.kept)} of {count(len(ms.nodes), 'milestone')} affected"
        goal = f"Refactor {o.package} where it changed since {o.affected_by}, leaves first ({affected})"
        what += f"; {affected} since {o.affected_by}"
    plan: dict[str, Any] = {"objective": objective or goal, "plan_status": "draft", "milestones": milestones}
    header = [
        f"# scaffolded by `milepost plan scaffold {o.package}`: one milestone per {unit_word} ({what}),",
        "# each depending on the milestones of what it imports; edit it, then `milepost plan apply` it.",
    ]
    if r.inside:
        header.append(
            "# inputs: module entries (its modules and the tests its gate runs), read with what they import when"
            " checked,\n# and env: entries (the interpreter its gate runs, with its installed distributions)."
        )
    if ms.left_out:
        header.append(f"# {count(ms.left_out, 'unaffected milestone')} left out.")
    header += [f"# {n}" for n in setup]
    heads = {id(n.cycle): n.name for n in ms.nodes if n.kind in ("cycle", "cut")}
    cycle_lines = _cycle_lines(ms.found, heads)
    header += _cycle_header(ms.found, cycle_lines, o.split_cycles)
    text = "\n".join(header) + "\n" + dump(plan)
    from milepost.graph.plan import Plan

    Plan.model_validate(plan).to_milestones()  # validated like any other plan (the text is its dump)
    found = ms.found
    reports = [_cycle_report(c, heads[id(c)]) for c in found.real] + [_cycle_report(c, None) for c in found.deferred]
    return Scaffold(
        plan=plan,
        text=text,
        cycles=reports,
        modules=len(r.code),
        left_out=ms.left_out,
        notes=notes,
        source=r.where,
        cycle_lines=cycle_lines,
    )


# A gate's first words that run whatever comes first on the PATH of the milepost that runs it.
_BARE = frozenset({"python3", "python", "pytest"})


def _venv_note(o: _Options) -> str | None:
    """The note that gates run with milepost's own PATH, when the workspace has a
    virtualenv and a gate starts with a bare ``python3``, ``python`` or ``pytest``."""
    templates = [*o.gates, *([o.final_gate] if o.final_gate else [])]
    bare = next((t for t in templates if (t.split() or [""])[0] in _BARE), None)
    if bare is None:
        return None
    venv = _virtualenv(o.base)
    if venv is None:
        return None
    word, *rest = bare.split(maxsplit=1)
    args = " ".join(rest)
    python = shlex.quote(f"{venv}/bin/python")
    fixed = f"{python} -m pytest {args}" if word == "pytest" else f"{python} {args}"
    return (
        f"gates run with milepost's own PATH: `{word}` is whichever comes first there, not necessarily the one in"
        f" {venv}; to run them in the project's virtualenv, write `{fixed.rstrip()}`"
        ' (docs/drive.md, "Gates in the project\'s virtualenv")'
    )


def _coverage_notes(o: _Options) -> list[str]:
    """A note for each interpreter that would run the gates' pytest units
    (each a test file, run under coverage.py: gates/unit_blocks.py) and has
    no coverage.py: each unit would fail at once (exit 4), the whole first
    drive with them (the new-user trial on toolz). Found as a drive finds
    it, with this command's PATH."""
    import subprocess

    from milepost.gates.pyenv import gate_entries, interpreter_of
    from milepost.gates.unit_blocks import coverable
    from milepost.graph.models import ENV_PREFIX, GateCommand

    templates = [t for t in [*o.gates, *([o.final_gate] if o.final_gate else [])] if "{tests}" in t]
    path_env = os.environ.get("PATH")
    seen: dict[str, str] = {}
    for t in templates:
        if not coverable(GateCommand(name="pytest", run=t.replace("{tests}", "{file}")), "t.py"):
            continue
        for entry in gate_entries(t.replace("{tests}", "t.py"), None, o.base, path_env):
            python, _ = interpreter_of(entry.removeprefix(ENV_PREFIX), o.base, path_env)
            if python is not None and python not in seen.values():
                seen[entry.removeprefix(ENV_PREFIX)] = python
    notes = []
    for name, python in seen.items():
        ask = "import importlib.util, sys; sys.exit(importlib.util.find_spec('coverage') is None)"
        try:
            has = subprocess.run([python, "-c", ask], capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.SubprocessError):
            continue  # (cannot ask it: the drive will say what it finds)
        if not has:
            notes.append(
                f"the gates' pytest units run under coverage.py, which `{name}` ({python}) does not have: each"
                f" would fail at once (exit 4); install it first ({shlex.quote(python)} -m pip install coverage)"
            )
    return notes


def _virtualenv(base: Path) -> str | None:
    """The project's virtualenv as a gate names it: ``.venv`` or ``venv`` at the
    workspace root (holding bin/python), else ``$VIRTUAL_ENV`` unless that is
    the one milepost itself runs in (milepost's own, activated: not the
    project's, and first on the gates' PATH anyway)."""
    for name in (".venv", "venv"):
        if (base / name / "bin" / "python").is_file():
            return name
    env = os.environ.get("VIRTUAL_ENV")
    if not env or Path(env).resolve() == Path(sys.prefix).resolve():
        return None
    return shown(Path(env), base)


def _enclosing(module: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``: the packages importing it imports first."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _nodes(units: list[str], cycles: list[Cycle], split: bool) -> list[_Node]:
    """The milestones before naming collisions are settled."""
    in_cycle = {u: c for c in cycles for u in c.members}
    raw: list[_Node] = [_Node(slug(u), "unit", [u]) for u in units if u not in in_cycle]
    for c in cycles:
        if split:
            raw.append(_Node(slug(c.head) + "-cycle-cut", "cut", list(c.members), cycle=c))
            raw += [_Node(slug(u), "member", [u], cycle=c) for u in c.members]
        else:
            raw.append(_Node(slug(c.head) + "-cycle", "cycle", list(c.members), cycle=c))
    raw.sort(key=lambda n: (n.name, n.units))
    for n, name in zip(raw, unique(n.name for n in raw), strict=True):
        n.name = name
    return raw


def _tests_of(n: _Node, contents: dict[str, list[str]], tm: TestMap) -> list[Path]:
    return sorted({t for u in n.units for m in contents[u] for t in tm.tests.get(m, ())})


def _unit_path(unit: str, files: dict[str, Path], level: str) -> Path:
    """A unit's ``{path}``: its file, or a package unit's folder."""
    path = files[unit]
    return path.parent if level == "package" and path.name == "__init__.py" else path


def _deps_through_left_out(nodes: list[_Node], kept: set[str]) -> None:
    """A kept milestone depends on the nearest kept milestones below it,
    through left-out ones (the order of what is kept still holds)."""
    deps = {n.name: set(n.deps) for n in nodes}
    for n in nodes:
        if n.name not in kept:
            continue
        out: set[str] = set()
        stack, seen = sorted(deps[n.name]), set()
        while stack:
            d = stack.pop()
            if d in seen:
                continue
            seen.add(d)
            if d in kept:
                out.add(d)
            else:
                stack += sorted(deps[d])
        n.deps = out


def _acceptance(n: _Node, values: dict[str, str], template: str | None) -> str:
    if n.kind == "cut":
        assert n.cycle is not None
        cut = "; ".join(i.shown() for i in n.cycle.imports)
        return (
            f"the import-time cycle of {count(len(n.units), 'module')} around {n.cycle.head} is cut: these"
            f" module-level imports are removed, inverted, or moved into a function or under TYPE_CHECKING ({cut}),"
            " so its modules can be worked one by one; `milepost plan cycles` finds no import-time cycle through"
            " them and the gate passes"
        )
    if template:
        return render(template, values)
    return f"{values['module']} depends only on the interfaces of what it imports, and its gate passes"


def _cycle_lines(found: Cycles, heads: dict[int, str]) -> list[str]:
    """The cycles for a reader: each import-time cycle with the imports to cut,
    then each cycle that exists only through deferred imports."""
    out = []
    for c in found.real:
        out.append(f"import cycle {heads[id(c)]} ({count(len(c.members), 'module')}): {c.path_text}; {c.summary()}:")
        out += [f"  {i.shown()}" for i in c.imports]
    for d in found.deferred:
        out.append(f"{d.summary()}; each module keeps its own milestone, ordered by its import-time imports")
    return out


def _cycle_header(found: Cycles, lines: list[str], split: bool) -> list[str]:
    if not found.real:
        return ["# import cycles: none at import time", *(f"#   {line}" for line in lines)]
    how = (
        "each split: a milestone cuts its imports, then one per module"
        if split
        else ("one milestone each, named after its most-imported module; --split-cycles cuts them")
    )
    return [f"# import cycles ({how}):", *(f"#   {line}" for line in lines)]


def _cycles_check(package: str, folder: Path, base: Path, level: str, package_imports: bool, units: list[str]) -> str:
    """The command that fails while an import-time cycle holds any of ``units``
    (run from the workspace root, like every gate)."""
    words = ["milepost", "plan", "cycles", package, "--path", shown(folder.parent, base)]
    if level != "module":
        words += ["--level", level]
    if package_imports:
        words.append("--package-imports")
    words += ["--check", "--through", ",".join(units)]
    return shlex.join(words)


def _cycle_report(c: Cycle | DeferredCycle, milestone: str | None) -> dict[str, Any]:
    """``cut``: the imports to cut (an import-time cycle); ``deferred``: the
    deferred imports that close a cycle that does not exist at import time."""
    return {"milestone": milestone, **c.as_dict()}


def _test_notes(tm: TestMap, code: list[str], base: Path) -> list[str]:
    if not tm.found:
        return ["no test files found (test_*.py or *_test.py defining a test): {tests} is empty"]
    mapped = {t for m in code for t in tm.tests.get(m, ())}
    named = {t for ts in tm.by_name.values() for t in ts} - tm.by_coverage
    ways = [f"{len(tm.by_coverage)} by the code they executed (coverage)"] if tm.by_coverage else []
    ways.append(f"{len(named & mapped)} by name" + (f" ({listed(sorted(tm.by_name))})" if named else ""))
    ways.append(f"{len(mapped - named - tm.by_coverage)} by their imports")
    notes = [f"tests: {len(mapped)} of {count(len(tm.found), 'test file')} mapped to modules: {', '.join(ways)}"]
    unmapped = [shown(t, base) for t in tm.found if t not in mapped]
    if unmapped:
        notes.append(f"{count(len(unmapped), 'test file')} exercising no module: {listed(unmapped)}")
    if tm.not_tests:
        helpers = [shown(p, base) for p in tm.not_tests if p.name != "__init__.py"]
        if helpers:
            notes.append(f"not tests (they define none): {listed(helpers)}")
    return notes
