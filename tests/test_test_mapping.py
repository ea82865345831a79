"""Which test files a module's gate runs: a test named after a module is that
module's test, whatever else it imports; the others go by their imports
(inside functions too); with ``--map-tests coverage``, by the code they
executed (the suite run once under coverage.py, for real)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import InProcessCLI


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


# env is one hop from everything (the package's environment module, as in the package);
# filters is reached by test_regression only through an import inside a test function.
PACKAGE = {
    "src/lib/__init__.py": "from lib.env import Env\n",
    "src/lib/env.py": "from lib import filters, loader, nodes\n\nclass Env:\n    def run(self, x):\n"
    "        return filters.upper(x)\n",
    "src/lib/filters.py": "def upper(x):\n    return x.upper()\n",
    "src/lib/loader.py": "def load():\n    return 1\n",
    "src/lib/nodes.py": "class Node:\n    pass\n",
    "tests/test_filters.py": "from lib.env import Env\nfrom lib.filters import upper\n\n"
    "def test_upper():\n    assert upper('a') == 'A'\n",
    "tests/test_regression.py": "def test_reg():\n    from lib import loader\n    assert loader.load() == 1\n",
    "tests/test_things.py": "from lib import Env\n\ndef test_env():\n    assert Env().run('a') == 'A'\n",
}


@pytest.fixture
def ws(tmp_path: Path) -> InProcessCLI:
    write(tmp_path, PACKAGE)
    cli = InProcessCLI(tmp_path)
    cli("init", check=True)
    return cli


def units(plan: dict[str, Any]) -> dict[str, list[str]]:
    out = {}
    for m in plan["milestones"]:
        gate = m.get("gate", [])
        out[m["name"]] = [f for g in gate if isinstance(g, dict) for f in g.get("each", [])]
    return out


def test_a_test_named_after_a_module_is_its_test_alone(ws: InProcessCLI) -> None:
    data = ws.json("plan", "scaffold", "lib", "--path", "src", "--gate", "python3 -m pytest -q {tests}")
    got = units(data["plan"])
    # test_filters imports env, one hop from every module: still only filters' test.
    assert "tests/test_filters.py" in got["lib.filters"]
    assert "tests/test_filters.py" not in got["lib.env"] + got["lib.loader"] + got["lib.nodes"]
    # An import inside a test function counts: test_regression exercises loader.
    assert "tests/test_regression.py" in got["lib.loader"]
    # `from lib import Env`: the name lib re-exports from lib.env, and what env imports (one hop).
    assert got["lib.env"] == ["tests/test_things.py"]
    assert got["lib.nodes"] == ["tests/test_things.py"]
    assert got["lib.filters"] == ["tests/test_filters.py", "tests/test_things.py"]
    notes = "\n".join(data["notes"])
    assert "tests: 3 of 3 test files mapped to modules: 1 by name (lib.filters), 2 by their imports" in notes


def test_coverage_maps_each_test_to_the_code_it_executed(ws: InProcessCLI) -> None:
    args = ["plan", "scaffold", "lib", "--path", "src", "--gate", "python3 -m pytest -q {tests}"]
    data = ws.json(*args, "--map-tests", "coverage", "--python", sys.executable)
    got = units(data["plan"])
    assert got["lib.filters"] == ["tests/test_filters.py", "tests/test_things.py"]  # Env().run calls upper
    assert got["lib.env"] == ["tests/test_things.py"]
    assert got["lib.loader"] == ["tests/test_regression.py"]
    assert got["lib.nodes"] == []  # imported by env, never executed by a test
    notes = "\n".join(data["notes"])
    assert "tests: 3 of 3 test files mapped to modules: 3 by the code they executed (coverage), 0 by name" in notes


def test_coverage_not_there_is_one_line_and_writes_nothing(ws: InProcessCLI, tmp_path: Path) -> None:
    fake = tmp_path / "bare-python"
    fake.write_text("#!/bin/sh\nexec /usr/bin/env -i /bin/sh -c 'exit 1'\n")
    fake.chmod(0o755)
    r = ws("plan", "scaffold", "lib", "--path", "src", "--map-tests", "coverage", "--python", str(fake), "-o", "p.yaml")
    assert r.code == 3 and r.err.count("\n") == 1, r.err
    assert "cannot import them: install them there (pip install coverage pytest)" in r.err
    assert not (tmp_path / "p.yaml").exists()
    r = ws("plan", "scaffold", "lib", "--path", "src", "--map-tests", "lines")
    assert r.code == 2 and "'lines' is not one of 'imports', 'coverage'" in r.err


def test_a_final_gate_with_empty_tests_is_refused(tmp_path: Path) -> None:
    write(tmp_path, {k: v for k, v in PACKAGE.items() if not k.startswith("tests/")})
    cli = InProcessCLI(tmp_path)
    cli("init", check=True)
    r = cli("plan", "scaffold", "lib", "--path", "src", "--final", "all", "--final-gate", "pytest {tests}")
    assert r.code == 2 and r.err.count("\n") == 1
    assert "--final-gate 'pytest {tests}' runs {tests}, but no test files were found" in r.err


def test_the_final_gate_runs_every_test_file_as_units(ws: InProcessCLI) -> None:
    r = ws(
        "plan",
        "scaffold",
        "lib",
        "--path",
        "src",
        "--gate",
        "python3 -m pytest -q {tests}",
        "--final",
        "all",
        "--final-gate",
        "python3 -m pytest -q {tests}",
        check=True,
    )
    plan = yaml.safe_load(r.out)
    final = plan["milestones"][-1]
    assert final["gate"] == [
        {
            "name": "pytest",
            "run": "python3 -m pytest -q {file}",
            "each": ["tests/test_filters.py", "tests/test_regression.py", "tests/test_things.py"],
        }
    ]


def test_a_final_gate_whose_tests_command_differs_is_noted(ws: InProcessCLI) -> None:
    same = ws.json(
        "plan",
        "scaffold",
        "lib",
        "--path",
        "src",
        "--gate",
        "pytest -q {tests}",
        "--final",
        "all",
        "--final-gate",
        "pytest -q {tests}",
    )
    assert not [n for n in same["notes"] if "final gate" in n]
    other = ws.json(
        "plan",
        "scaffold",
        "lib",
        "--path",
        "src",
        "--gate",
        "pytest -q -x {tests}",
        "--final",
        "all",
        "--final-gate",
        "pytest -q {tests}",
    )
    [note] = [n for n in other["notes"] if "final gate" in n]
    assert "differs from the modules' ('pytest -q -x {tests}')" in note and "runs every test file again" in note
