"""Block selection never misses a failing test file (issue 40's property).

Hypothesis writes packages whose ``__init__`` imports every module (so every
test file imports everything, and import analysis alone would re-run all of
them after any edit), with functions calling functions of earlier modules
and test files calling a few of them. After a first run, each random
single-function break runs a set of test files that contains every test file
that fails (the truth: the whole suite run plainly, once, by pytest), a no-op
statement added to one function runs fewer test files than the suite, and
putting the code back runs nothing."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_unit_blocks import PYTEST, Gates, write

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Func:
    module: int
    name: str
    const: int
    calls: tuple[str, ...]


@dataclass(frozen=True)
class Package:
    funcs: tuple[Func, ...]
    tests: tuple[tuple[str, ...], ...]  # the functions each test file calls

    def value(self, name: str) -> int:
        f = next(f for f in self.funcs if f.name == name)
        return 1 + f.const + sum(self.value(c) for c in f.calls)

    def files(self) -> dict[str, str]:
        modules = sorted({f.module for f in self.funcs})
        out = {"pkg/__init__.py": "".join(f"from pkg.m{m} import *  # noqa\n" for m in modules)}
        for m in modules:
            mine = [f for f in self.funcs if f.module == m]
            imported = sorted({c for f in mine for c in f.calls} - {f.name for f in mine})
            head = "".join(f"from pkg.m{self.module_of(c)} import {c}\n" for c in imported)
            body = "".join(
                f"\n\ndef {f.name}(x):\n    return x + {f.const}{''.join(f' + {c}(x)' for c in f.calls)}\n"
                for f in mine
            )
            out[f"pkg/m{m}.py"] = head + body
        for n, calls in enumerate(self.tests):
            asserts = "".join(f"    assert pkg.{c}(1) == {self.value(c)}\n" for c in calls)
            out[f"tests/test_t{n}.py"] = f"import pkg\n\n\ndef test_calls():\n{asserts}"
        out["tests/test_import.py"] = "import pkg\n\n\ndef test_import():\n    assert pkg.__name__ == 'pkg'\n"
        return out

    def module_of(self, name: str) -> int:
        return next(f.module for f in self.funcs if f.name == name)


@st.composite
def packages(draw: st.DrawFn) -> Package:
    funcs: list[Func] = []
    for m in range(draw(st.integers(3, 4))):
        earlier = [f.name for f in funcs]
        for j in range(draw(st.integers(1, 2))):
            calls = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True)) if earlier else []
            funcs.append(Func(m, f"f{m}_{j}", draw(st.integers(0, 9)), tuple(calls)))
    names = [f.name for f in funcs]
    calls = st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True)
    tests = draw(st.lists(calls, min_size=2, max_size=3))
    return Package(tuple(funcs), tuple(tuple(t) for t in tests))


def failing(root: Path) -> set[str]:
    """The test files that fail now: the whole suite, run plainly by pytest once."""
    plain = PYTEST.replace(" {file}", " -rf tests")
    out = subprocess.run(plain, shell=True, cwd=root, capture_output=True, text=True, check=False).stdout
    return set(re.findall(r"^FAILED (tests/test_\w+\.py)::", out, re.M))


def edited(text: str, name: str, old: str, new: str) -> str:
    head = f"def {name}(x):\n"
    start = text.index(head) + len(head)
    assert text[start:].startswith(old)
    return text[:start] + new + text[start + len(old) :]


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(pkg=packages(), data=st.data())
def test_block_selection_runs_every_failing_test_file(pkg: Package, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory(prefix="milepost-blocks-") as tmp:
        root = Path(tmp)
        files = pkg.files()
        write(root, files)
        (root / ".gitignore").write_text(".milepost/\n")
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        suite = sorted(f for f in files if f.startswith("tests/"))
        gates = Gates(root)
        assert gates.ran(suite) == dict.fromkeys(suite, "passed")
        for _ in range(2):
            f = data.draw(st.sampled_from(pkg.funcs))
            mod = f"pkg/m{f.module}.py"
            noop = data.draw(st.booleans())
            old = "    return x + "
            new = "    _ = None\n    return x + " if noop else "    return x + 1 + "
            write(root, {mod: edited(files[mod], f.name, old, new)})
            ran = gates.ran(suite)
            if noop:
                assert set(ran.values()) <= {"passed"} and len(ran) < len(suite), (f, ran)
            else:
                truth = failing(root)
                assert truth <= set(ran), (f, ran, truth)
                assert {t for t, outcome in ran.items() if outcome == "failed"} == truth
            write(root, {mod: files[mod]})
            assert gates.ran(suite) == {}  # put back: every unit's earlier record stands
    assert sys.executable
