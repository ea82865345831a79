"""Block selection on a real package, side by side with pytest-testmon (issue 40).

A package nobody here wrote, chosen with ``--package``: toolz (the default:
14 modules, 13 test files) or click (17 modules, 34 test files at 2c8cd3a, a
``src`` layout). Importing either loads (nearly) every module: so every test
file's import-derived inputs are the whole package. It is copied twice into
fresh git work trees: one driven by milepost (its scaffolded plan, one
milestone per module with the test files mapped to it, and a final
whole-suite milestone), one run by ``pytest --testmon``. In one run, side by
side, with one Prefect server started before (no drive pays for its start):

1. the first drive at ``--max-parallel 2``, minus a one-milestone drive of a
   ``true`` gate (the drive's fixed cost), against testmon's first run
   (target: at most 1.2x) and the plain suite as one pytest run;
2. a comment added in one function: the drive runs no test file;
3. a no-op statement added to that function's body (toolz:
   ``dicttoolz.merge_with``; click: ``termui.confirm``): the drive runs only
   the test files that execute it (testmon's selection, for comparison), in
   at most 1.5x those files run directly, plus 2 s;
4. the edit reverted: ``milepost verify`` under 2 s, no test file run;
5. a no-op statement in a second function, re-proven by ``verify``.

A ``conftest.py`` in the tests of both copies writes each pytest session's
test files to a ledger outside them, so the figures count real runs; each
figure prints the load average it was measured at. Source: ``--source DIR``
(a checkout, e.g. ``git clone`` of pytoolz/toolz or pallets/click), else the
package's sdist from PyPI (``pip download``), which ships its tests. toolz
runs from its copy with this interpreter; click is installed as its
developers do, ``pip install -e .``, into a virtualenv of each copy's own
(made here, with pytest, coverage and pytest-testmon: milepost's own depends
on click), whose interpreter runs the gates and testmon. A test file that
fails run alone is fixed in both copies first (click's ``test_echo_via_pager.py``
reaches ``click._termui_impl`` without importing it: one import added).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CONFTEST = """
import os


def pytest_collection_finish(session):
    ledger = os.environ.get("BENCH_LEDGER")
    if ledger:
        files = sorted({os.path.relpath(str(i.path), str(session.config.rootpath)) for i in session.items})
        with open(ledger, "a") as f:
            f.write(" ".join(files) + "\\n")
"""


@dataclass(frozen=True)
class Package:
    """A package the bench runs on: where its tests are, what it edits, how it is installed."""

    name: str
    tests: str  # the folder of its test files, in the checkout
    function: tuple[str, str]  # (file, top-level function) edited for figures 2 and 3
    other: tuple[str, str]  # a second no-op edit, re-proven by `verify` (figure 5)
    editable: bool  # `pip install -e .` into a virtualenv of its own, else run from the copy with this interpreter
    fixes: tuple[tuple[str, str, str], ...] = ()  # (file, text, replacement) applied to both copies before the bench


PACKAGES = {
    "toolz": Package(
        name="toolz",
        tests="toolz",  # toolz/tests and toolz/sandbox/tests: the 15 test files its scaffolded plan maps
        function=("toolz/dicttoolz.py", "merge_with"),
        other=("toolz/itertoolz.py", "interleave"),
        editable=False,
    ),
    "click": Package(  # 4 of its 34 test files execute `confirm`, 10 `join_options`
        name="click",
        tests="tests",
        function=("src/click/termui.py", "confirm"),
        other=("src/click/formatting.py", "join_options"),
        editable=True,
        # This file fails run alone (as of 2c8cd3a): it reaches click._termui_impl, imported by another file before.
        fixes=(
            ("tests/test_utils/test_echo_via_pager.py", "import click\n", "import click\nimport click._termui_impl\n"),
        ),
    ),
}


def get_source(pkg: Package, given: str | None, base: Path) -> Path:
    if given:
        return Path(given)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", pkg.name, "-d", base],
        check=True,
    )
    sdist = next(base.glob(f"{pkg.name}-*.tar.gz"))
    shutil.unpack_archive(sdist, base)
    return next(p for p in base.glob(f"{pkg.name}-*") if p.is_dir())


def copy(pkg: Package, source: Path, dest: Path) -> Path:
    ignore = shutil.ignore_patterns(".git", "__pycache__", ".testmondata", "*.egg-info", ".venv", ".tox")
    shutil.copytree(source, dest, ignore=ignore)
    for name, text in (
        (f"{pkg.tests}/conftest.py", CONFTEST),
        (".gitignore", "\n.milepost/\n.testmondata*\n.pytest_cache/\n"),
    ):
        path = dest / name
        path.write_text((path.read_text() if path.exists() else "") + text)
    for name, old, new in pkg.fixes:  # (where the copy has that file: an sdist may be of another version)
        path = dest / name
        if path.exists():
            path.write_text(path.read_text().replace(old, new, 1))
    git = ["git", "-C", str(dest), "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", pkg.name], check=True)
    return dest


def python_for(pkg: Package, checkout: Path, venv: Path) -> str:
    """The interpreter that runs the copy's tests: this one, or a virtualenv with the copy installed editable."""
    if not pkg.editable:
        return sys.executable
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "-e", str(checkout), "pytest", "coverage", "pytest-testmon"]
    subprocess.run(pip, check=True, capture_output=True)
    return py


def run(cmd: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return took


def ran(ledger: Path, since: int) -> list[str]:
    """The test files run by the sessions after line ``since`` of the ledger."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return sorted(f for line in lines[since:] for f in line.split())


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def load() -> str:
    """The load average of the last minute, printed next to each figure (the machine may be shared)."""
    return "load " + Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "load ?"


def lines(ledger: Path) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


def edit_comment(root: Path, where: tuple[str, str]) -> None:
    path = root / where[0]
    text = path.read_text()
    path.write_text(text.replace(f"def {where[1]}(", f"# a comment\ndef {where[1]}(", 1))


def edit_noop(root: Path, where: tuple[str, str]) -> None:
    path = root / where[0]
    text = path.read_text()
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == where[1])
    first = fn.body[1] if isinstance(fn.body[0], ast.Expr) else fn.body[0]  # after the docstring
    rows = text.splitlines(keepends=True)
    rows.insert(first.lineno - 1, " " * first.col_offset + "pass\n")  # (not `_ = None`: click's `_` is gettext)
    path.write_text("".join(rows))


@dataclass
class Bench:
    """One run: the package, its two copies, the one-gate workspace, the ledger and the commands."""

    pkg: Package
    ws: Path  # driven by milepost
    tm: Path  # run by pytest --testmon
    fixed: Path  # a one-milestone drive of `true`: the drive's fixed cost
    ledger: Path
    env: dict[str, str]
    mp: list[str]
    gate: str
    py: str  # the interpreter of the testmon copy

    def count(self, cmd: list[str], where: Path, ok: tuple[int, ...] = (0,)) -> tuple[float, list[str]]:
        """Run ``cmd``: its time and the test files it ran."""
        n = lines(self.ledger)
        took = run(cmd, where, self.env, ok)
        return took, ran(self.ledger, n)

    def drive(self, *args: str) -> tuple[float, list[str]]:
        return self.count([*self.mp, *args], self.ws)

    def testmon(self) -> tuple[float, list[str]]:
        """testmon's run; it selects even where the package's own options give ``-m`` (click: ``not stress``)."""
        testmon = ["-p", "testmon.pytest_testmon", "--testmon", "--testmon-forceselect"]
        return self.count([self.py, "-m", "pytest", "-q", *testmon, *self.suite()], self.tm, (0, 5))

    def direct(self, files: list[str]) -> float:
        """The given test files run directly, as one pytest run in the testmon copy."""
        return (
            run([self.py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *sorted(set(files))], self.tm, self.env)
            if files
            else 0.0
        )

    def suite(self) -> list[str]:
        return sorted(str(p.relative_to(self.tm)) for p in (self.tm / self.pkg.tests).rglob("test_*.py"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--package", choices=sorted(PACKAGES), default="toolz", help="the package to run on")
    ap.add_argument("--source", help="a checkout of the package (default: its sdist from PyPI)")
    args = ap.parse_args()
    pkg = PACKAGES[args.package]
    base = Path(tempfile.mkdtemp(prefix="milepost-bench-blocks-"))
    source = get_source(pkg, args.source, base / "sdist")
    ledger = base / "ledger.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILEPOST_", "PREFECT_"))}
    env |= {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "BENCH_LEDGER": str(ledger)}
    mp = [sys.executable, "-m", "milepost"]
    ws, tm, fixed = copy(pkg, source, base / "milepost"), copy(pkg, source, base / "testmon"), base / "fixed"
    fixed.mkdir()
    gate = f"{python_for(pkg, ws, base / 'venv-milepost')} -m pytest -q -p no:cacheprovider {{tests}}"
    bench = Bench(pkg, ws, tm, fixed, ledger, env, mp, gate, python_for(pkg, tm, base / "venv-testmon"))
    for where in (ws, fixed):
        run([*mp, "init"], where, env)
    info = json.loads(subprocess.run([*mp, "--json", "server", "start"], cwd=ws, env=env, capture_output=True).stdout)
    env["PREFECT_API_URL"] = info["api_url"]
    try:
        commit = subprocess.run(["git", "-C", source, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        print(f"{pkg.name} {commit.stdout.strip() or source.name}; {load()}")
        report(bench)
    finally:
        subprocess.run([*mp, "server", "stop"], cwd=ws, env=env, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def first_run(b: Bench) -> None:
    run([*b.mp, "plan", "scaffold", b.pkg.name, "--gate", b.gate, "--final", "all-tests", "--apply"], b.ws, b.env)
    run([*b.mp, "item", "create", "one gate"], b.fixed, b.env)
    run([*b.mp, "add", "one", "--gate", "true"], b.fixed, b.env)
    t_plain = b.direct(b.suite())
    t_tm1, _ = b.testmon()
    print(
        f"{b.pkg.name}: {len(b.suite())} test files; plain suite {t_plain:.2f} s;"
        f" testmon's first run {t_tm1:.2f} s; {load()}"
    )
    t_fixed = run([*b.mp, "drive"], b.fixed, b.env)
    t_drive, files = b.drive("drive", "--max-parallel", "2")
    ratio = (t_drive - t_fixed) / t_tm1
    twice = ", ".join(sorted({f for f in files if files.count(f) > 1}))
    print(
        f"1. first drive --max-parallel 2: {t_drive:.2f} s, minus a one-milestone drive ({t_fixed:.2f} s):"
        f" {t_drive - t_fixed:.2f} s = {ratio:.2f}x testmon's first run (target 1.2x: {met(ratio <= 1.2)});"
        f" {len(files)} test-file runs ({len(set(files))} files; more than once: {twice or 'none'}); {load()}"
    )


def noop(b: Bench, figure: str, where: tuple[str, str], *command: str) -> None:
    """A no-op statement in ``where`` in both copies: ``command`` re-proves it, testmon selects."""
    for root in (b.ws, b.tm):
        edit_noop(root, where)
    took, mine = b.drive(*command)
    t_tm, theirs = b.testmon()
    t_direct = b.direct(mine)
    limit = 1.5 * t_direct + 2
    print(
        f"{figure}. a no-op statement in {where[1]}, `{' '.join(command)}`: {took:.2f} s running {sorted(set(mine))};"
        f" those files run directly {t_direct:.2f} s (target 1.5x + 2 s = {limit:.2f} s: {met(took <= limit)});"
        f" testmon {t_tm:.2f} s running {sorted(set(theirs))}; {load()}"
    )


def report(b: Bench) -> None:
    first_run(b)
    where = b.pkg.function
    for root in (b.ws, b.tm):
        edit_comment(root, where)
    t_comment, mine = b.drive("drive", "--max-parallel", "2")
    t_tm_comment, theirs = b.testmon()
    print(
        f"2. a comment: the drive {t_comment:.2f} s, {len(mine)} test files run (target 0: {met(not mine)});"
        f" testmon {t_tm_comment:.2f} s, {len(theirs)} test files; {load()}"
    )
    for root in (b.ws, b.tm):
        subprocess.run(["git", "-C", str(root), "checkout", "-q", "--", where[0]], check=True)
    noop(b, "3", where, "drive", "--max-parallel", "2")
    subprocess.run(["git", "-C", str(b.ws), "checkout", "-q", "--", where[0]], check=True)
    t_revert, after = b.drive("verify")
    print(
        f"4. reverted: verify {t_revert:.2f} s, {len(after)} test files run"
        f" (target under 2 s, none: {met(t_revert < 2 and not after)}); {load()}"
    )
    noop(b, "5", b.pkg.other, "verify", "--max-parallel", "2")


if __name__ == "__main__":
    main()
