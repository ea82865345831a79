"""What a scaffolded milestone's proof reads and runs: its module input
entries (``module:NAME`` for its modules and its test files, read with what
they import when checked), its ``{tests}`` steps as units of proof (``each:``),
and, with ``--map-tests coverage``, its tests chosen by the code they executed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from milepost.errors import InvalidValueError
from milepost.scaffold.render import command_name, flow, flow_dict, render, shown
from milepost.scaffold.source import Source
from milepost.scaffold.testmap import TestMap

__all__ = ["Entries", "gate_step", "map_by_coverage"]


def map_by_coverage(tm: TestMap, python: str, folder: Path, files: dict[str, Path], base: Path) -> None:
    """Each test file that executed code of the package goes to the modules it executed (alone)."""
    from milepost.scaffold.coverage_map import executed_by

    if not tm.found:
        raise InvalidValueError(
            "--map-tests coverage: no test files found (test_*.py or *_test.py defining a test) to run"
        )
    ran = executed_by(python, folder, tm.found, base)
    module_of = {p.resolve(): m for m, p in files.items() if m in tm.tests}
    for t in tm.found:
        mods = {module_of[f] for f in ran.get(t.resolve(), ()) if f in module_of}
        if not mods:
            continue  # executed none of the package's code (or was not collected): the name and import rules stand
        for m, ts in tm.tests.items():
            keep = [x for x in ts if x != t]
            tm.tests[m] = sorted([*keep, t]) if m in mods else keep
        tm.by_coverage.add(t)


def gate_step(
    template: str, values: dict[str, str], tests: list[str], taken: set[str], paths: list[str] | None = None
) -> dict[str, Any]:
    """A gate step from a template; one with ``{tests}`` runs once per test
    file (``each``), each run a unit of proof shared by every gate that runs it.
    One with ``{path}`` (and no ``{tests}``) of a single module file is a unit
    too (``paths``: the milestone's module files): its result is kept under the
    digest of the file and what it imports, so a re-proof after an edit runs
    it only when one of those changed."""
    name = command_name(template, taken)
    if "{tests}" in template:
        run = render(template, {**values, "tests": "{file}"})
        return {"name": name, "run": run, "each": flow(tests)}
    if "{path}" in template and paths is not None and len(paths) == 1 and paths[0].endswith(".py"):
        return {"name": name, "run": render(template, {**values, "path": "{file}"}), "each": flow(paths)}
    return flow_dict(name=name, run=render(template, values))


class Entries:
    """Module input entries for a package's modules and test files, and the
    files they stand for now (read once, through one snapshot)."""

    def __init__(self, source: Source, base: Path, files: dict[str, Path]) -> None:
        from milepost.gates.inputs import Snapshot

        self.base = base
        self.files = files
        self.snap = Snapshot(base)
        root = shown(source.folder.parent, base)
        # A dotted name is found in the workspace root and src/; elsewhere the entry names the file.
        self.dotted = root in (".", "src")

    def module(self, m: str) -> str:
        return f"module:{m}" if self.dotted else f"module:{shown(self.files[m], self.base)}"

    def file(self, t: Path) -> str:
        return f"module:{shown(t, self.base)}"

    def reads(self, inputs: list[str]) -> set[Path]:
        found, _ = self.snap.resolve(inputs)
        return {(self.base / f).resolve() for f in found}
