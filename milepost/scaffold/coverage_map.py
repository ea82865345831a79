"""``plan scaffold --map-tests coverage``: test files mapped to the modules
whose code they executed.

The suite runs once, as one pytest process under coverage.py, with a small
pytest plugin that switches coverage's dynamic context to the test file of
each test as it runs (setup, call and teardown). A module is exercised by a
test file when a line of it ran while one of that file's tests ran: code run
only when the module was imported (at collection, before any test) counts
for no test. Exact where the import rule guesses, and honest about it: the
notes say how many files were mapped this way and how many (which executed
no code of the package, or were not collected) kept the name and import
rules.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from milepost.errors import EnvironmentProblem, InvalidValueError

__all__ = ["executed_by"]

_PLUGIN = """\
import coverage
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(str(item.path))
    yield
    if cov is not None:
        cov.switch_context("")
"""
TIMEOUT_SECONDS = 3600


def executed_by(python: str, folder: Path, tests: Sequence[Path], base: Path) -> dict[Path, set[Path]]:
    """test file -> the files of the package in ``folder`` its tests executed.
    Runs ``python -m coverage run -m pytest`` on ``tests`` in ``base``."""
    probe = subprocess.run([python, "-c", "import coverage, pytest"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise EnvironmentProblem(
            f"--map-tests coverage runs the tests under coverage.py and pytest, and {python} cannot import them:"
            " install them there (pip install coverage pytest), or pass --python with the interpreter that runs"
            " your tests"
        )
    with tempfile.TemporaryDirectory(prefix="milepost-coverage-") as tmp:
        plugin = Path(tmp) / "milepost_covctx.py"
        plugin.write_text(_PLUGIN)
        data = Path(tmp) / "coverage.data"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [tmp, str(folder.parent), os.environ.get("PYTHONPATH")])),
        }
        env.pop("COVERAGE_PROCESS_START", None)
        cmd = [
            python,
            "-m",
            "coverage",
            "run",
            f"--data-file={data}",
            f"--source={folder}",
            "-m",
            "pytest",
            "-q",
            "-p",
            "milepost_covctx",
            "-p",
            "no:cacheprovider",
            *map(str, tests),
        ]
        try:
            run = subprocess.run(
                cmd, cwd=base, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False
            )
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(f"--map-tests coverage: the suite ran over {TIMEOUT_SECONDS} s") from None
        if run.returncode not in (0, 1) or not data.exists():  # 1: some tests failed (their code still ran)
            last = (run.stdout + run.stderr).strip().splitlines()[-1:] or ["no output"]
            raise InvalidValueError(
                f"--map-tests coverage: pytest could not run the tests (exit {run.returncode}: {last[0]});"
                " the suite must run as `python -m pytest TESTS` from the workspace root"
            )
        return _read(python, data)


_READER = """\
import json, sys
from coverage import CoverageData
data = CoverageData(basename=sys.argv[1])
data.read()
out = {}
for measured in data.measured_files():
    for contexts in data.contexts_by_lineno(measured).values():
        for c in contexts:
            if c:
                out.setdefault(c, set()).add(measured)
print(json.dumps({k: sorted(v) for k, v in out.items()}))
"""


def _read(python: str, path: Path) -> dict[Path, set[Path]]:
    """The contexts of the data file, read by coverage.py in ``python`` (milepost's own interpreter may have none)."""
    import json

    run = subprocess.run([python, "-c", _READER, str(path)], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise EnvironmentProblem(f"--map-tests coverage: cannot read coverage's data: {run.stderr.strip()[-300:]}")
    found: dict[str, list[str]] = json.loads(run.stdout)
    return {Path(t).resolve(): {Path(f).resolve() for f in files} for t, files in found.items()}
