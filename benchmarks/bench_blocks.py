"""Block selection on a real package, side by side with pytest-testmon (issue 40).

toolz (14 modules, 13 test files, its ``__init__`` imports every module: so
every test file's import-derived inputs are the whole package) is copied
twice into fresh git work trees: one driven by milepost (its scaffolded plan,
one milestone per module with the test files mapped to it, and a final
whole-suite milestone), one run by ``pytest --testmon``. In one run, side by
side, with one Prefect server started before (no drive pays for its start):

1. the first drive at ``--max-parallel 2``, minus a one-milestone drive of a
   ``true`` gate (the drive's fixed cost), against testmon's first run
   (target: at most 1.2x) and the plain suite as one pytest run;
2. a comment added in one function: the drive runs no test file;
3. a no-op statement added to one function's body (``dicttoolz.merge_with``):
   the drive runs only the test files that execute it (testmon's selection,
   for comparison), in at most 1.5x those files run directly, plus 2 s;
4. the edit reverted: ``milepost verify`` under 2 s, no test file run.

A ``conftest.py`` added to both copies writes each pytest session's test
files to a ledger outside them, so the figures count real runs. Source:
``--source DIR`` (a toolz checkout: ``git clone`` of pytoolz/toolz), else the
toolz sdist from PyPI (``pip download``), which ships its tests.
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
from pathlib import Path

CONFTEST = """\
import os


def pytest_collection_finish(session):
    ledger = os.environ.get("BENCH_LEDGER")
    if ledger:
        files = sorted({os.path.relpath(str(i.path), str(session.config.rootpath)) for i in session.items})
        with open(ledger, "a") as f:
            f.write(" ".join(files) + "\\n")
"""
FUNCTION = ("toolz/dicttoolz.py", "merge_with")
OTHER = ("toolz/itertoolz.py", "interleave")  # a second no-op edit, re-proven by `verify` (no Prefect)


def get_source(given: str | None, base: Path) -> Path:
    if given:
        return Path(given)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "toolz", "-d", base],
        check=True,
    )
    sdist = next(base.glob("toolz-*.tar.gz"))
    shutil.unpack_archive(sdist, base)
    return next(p for p in base.glob("toolz-*") if p.is_dir())


def copy(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".git", "__pycache__", ".testmondata", "*.egg-info"))
    (dest / "toolz" / "tests" / "conftest.py").write_text(CONFTEST)
    (dest / ".gitignore").write_text(".milepost/\n.testmondata*\n.pytest_cache/\n")
    git = ["git", "-C", str(dest), "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "toolz"], check=True)
    return dest


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


def lines(ledger: Path) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


def edit_comment(root: Path) -> None:
    path = root / FUNCTION[0]
    text = path.read_text()
    path.write_text(text.replace(f"def {FUNCTION[1]}(", f"# a comment\ndef {FUNCTION[1]}(", 1))


def edit_noop(root: Path, where: tuple[str, str] = FUNCTION) -> None:
    path = root / where[0]
    text = path.read_text()
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == where[1])
    first = fn.body[1] if isinstance(fn.body[0], ast.Expr) else fn.body[0]  # after the docstring
    rows = text.splitlines(keepends=True)
    rows.insert(first.lineno - 1, " " * first.col_offset + "_ = None\n")
    path.write_text("".join(rows))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", help="a toolz checkout (default: its sdist from PyPI)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="milepost-bench-blocks-"))
    source = get_source(args.source, base / "sdist")
    ledger = base / "ledger.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILEPOST_", "PREFECT_"))}
    env |= {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "BENCH_LEDGER": str(ledger)}
    py = sys.executable
    mp = [py, "-m", "milepost"]
    ws, tm, fixed = copy(source, base / "milepost"), copy(source, base / "testmon"), base / "fixed"
    fixed.mkdir()
    gate = f"{py} -m pytest -q -p no:cacheprovider {{tests}}"
    for where in (ws, fixed):
        run([*mp, "init"], where, env)
    info = json.loads(subprocess.run([*mp, "--json", "server", "start"], cwd=ws, env=env, capture_output=True).stdout)
    env["PREFECT_API_URL"] = info["api_url"]
    try:
        report(base, ws, tm, fixed, ledger, env, mp, gate, py)
    finally:
        subprocess.run([*mp, "server", "stop"], cwd=ws, env=env, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def report(
    base: Path, ws: Path, tm: Path, fixed: Path, ledger: Path, env: dict[str, str], mp: list[str], gate: str, py: str
) -> None:
    pytest = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    testmon = [py, "-m", "pytest", "-q", "-p", "testmon.pytest_testmon", "--testmon"]
    run([*mp, "plan", "scaffold", "toolz", "--gate", gate, "--final", "all-tests", "--apply"], ws, env)
    run([*mp, "item", "create", "one gate"], fixed, env)
    run([*mp, "add", "one", "--gate", "true"], fixed, env)
    suite = sorted(str(p.relative_to(tm)) for p in (tm / "toolz" / "tests").glob("test_*.py"))
    t_plain = run([*pytest, *suite], tm, env)
    t_tm1 = run([*testmon, *suite], tm, env)
    t_fixed = run([*mp, "drive"], fixed, env)
    n = lines(ledger)
    t_drive = run([*mp, "drive", "--max-parallel", "2"], ws, env)
    first_files = ran(ledger, n)
    print(f"toolz: {len(suite)} test files; plain suite {t_plain:.2f} s; testmon's first run {t_tm1:.2f} s")
    ratio = (t_drive - t_fixed) / t_tm1
    twice = ", ".join(sorted({f for f in first_files if first_files.count(f) > 1}))
    print(
        f"1. first drive --max-parallel 2: {t_drive:.2f} s, minus a one-milestone drive ({t_fixed:.2f} s):"
        f" {t_drive - t_fixed:.2f} s = {ratio:.2f}x testmon's first run (target 1.2x: {met(ratio <= 1.2)});"
        f" {len(first_files)} test-file runs ({len(set(first_files))} files; more than once: {twice or 'none'})"
    )
    for where in (ws, tm):
        edit_comment(where)
    n = lines(ledger)
    t_comment = run([*mp, "drive", "--max-parallel", "2"], ws, env)
    mine = ran(ledger, n)
    n = lines(ledger)
    t_tm_comment = run([*testmon, *suite], tm, env, ok=(0, 5))
    theirs = ran(ledger, n)
    print(
        f"2. a comment: the drive {t_comment:.2f} s, {len(mine)} test files run (target 0: {met(not mine)});"
        f" testmon {t_tm_comment:.2f} s, {len(theirs)} test files"
    )
    for where in (ws, tm):
        subprocess.run(["git", "-C", str(where), "checkout", "-q", "--", FUNCTION[0]], check=True)
        edit_noop(where)
    n = lines(ledger)
    t_noop = run([*mp, "drive", "--max-parallel", "2"], ws, env)
    mine = ran(ledger, n)
    n = lines(ledger)
    t_tm_noop = run([*testmon, *suite], tm, env, ok=(0, 5))
    theirs = ran(ledger, n)
    t_direct = run([*pytest, *sorted(set(mine))], tm, env) if mine else 0.0
    limit = 1.5 * t_direct + 2
    print(
        f"3. a no-op statement in {FUNCTION[1]}: the drive {t_noop:.2f} s running {sorted(set(mine))};"
        f" those files run directly {t_direct:.2f} s (target {limit:.2f} s: {met(t_noop <= limit)});"
        f" testmon {t_tm_noop:.2f} s running {sorted(set(theirs))}"
    )
    subprocess.run(["git", "-C", str(ws), "checkout", "-q", "--", FUNCTION[0]], check=True)
    n = lines(ledger)
    t_revert = run([*mp, "verify"], ws, env)
    after = ran(ledger, n)
    print(
        f"4. reverted: verify {t_revert:.2f} s, {len(after)} test files run"
        f" (target under 2 s, none: {met(t_revert < 2 and not after)})"
    )
    for where in (ws, tm):
        edit_noop(where, OTHER)
    n = lines(ledger)
    t_verify = run([*mp, "verify", "--max-parallel", "2"], ws, env)
    mine = ran(ledger, n)
    n = lines(ledger)
    t_tm_other = run([*testmon, *suite], tm, env, ok=(0, 5))
    theirs = ran(ledger, n)
    t_direct = run([*pytest, *sorted(set(mine))], tm, env) if mine else 0.0
    limit = 1.5 * t_direct + 2
    print(
        f"5. a no-op statement in {OTHER[1]}, re-proven by verify: {t_verify:.2f} s running {sorted(set(mine))};"
        f" those files run directly {t_direct:.2f} s (1.5x + 2 s: {limit:.2f} s, {met(t_verify <= limit)});"
        f" testmon {t_tm_other:.2f} s running {sorted(set(theirs))}"
    )


if __name__ == "__main__":
    main()
