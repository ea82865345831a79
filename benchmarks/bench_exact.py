"""Benchmark: exact proofs on a real package, against the cost of its own tests (issue 29).

jinja2 3.1.6 (25 modules in ``src/``, 22 test files), its sdist fetched at
run time with ``pip download --no-deps --no-binary :all: jinja2==3.1.6``
into a cache folder (default ``$TMPDIR/milepost-bench-exact``), made a git
work tree and scaffolded as docs/scaffold.md shows (the final milestone's
gate is then the module gates' ``{tests}`` command over every test file)::

    milepost plan scaffold jinja2 --path src --gate 'python3 -m compileall -q {path}' \\
        --gate 'PYTHONPATH=src python3 -m pytest -q -x -p no:cacheprovider {tests}' \\
        --final all-tests --apply

(``PYTHONPATH=src``: the gates test the copy in the work tree, not an
installed jinja2). The gates run in a venv of their own in the cache folder
(pytest, markupsafe and trio, which jinja2's async tests import; created
once with pip), first on ``PATH``; milepost runs as this interpreter's
``-m milepost``. One ``milepost server start`` serves every drive
(``PREFECT_API_URL``), so no drive pays a temporary server's start.

Side by side in one run (medians of ``--repeat``; the machine is shared, so
the ratios matter more than the absolute times; nothing here is asserted):

* the suite as one pytest process (``PYTHONPATH=src python -m pytest -q tests``);
* the fixed cost: ``milepost drive`` of a one-milestone item (gate ``true``);
* the first drive of the scaffolded plan at ``--max-parallel 2`` (``--first-drives``
  fresh workspaces), minus the fixed cost: target at most 3x the suite;
* a one-line edit (a comment appended to ``--edit``): ``verify --max-parallel 2``
  against the affected test files run directly in one pytest process (a unit is
  affected when ``module:TEST_FILE`` stands for the edited file now):
  target at most 1.5x + 2 s;
* ``verify --max-parallel 2`` after putting the file back (a proven state):
  target under 2 s;
* the stale check, ``milepost --json list``, of the scaffolded item (module
  entries) against the same milestones with today's literal file lists (the
  files ``milepost --json inputs`` names for each): target within 1.5x.

For information, to show where the time goes: the suite as one pytest
process per test file, one after another (what the units cost run in turn);
the affected files the same way; and the first drive and the re-proof of the
plan scaffolded with the issue's own command, ``--final-gate 'PYTHONPATH=src
python3 -m pytest -q -p no:cacheprovider {tests}'``: without ``-x`` the final
milestone's units share nothing with the modules' (``--no-variant`` skips it).

    .venv/bin/python benchmarks/bench_exact.py [--repeat 5] [--first-drives 1] [--edit src/jinja2/nativetypes.py]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from milepost.gates.inputs import Snapshot
from milepost.gates.units import unit_inputs

VERSION = "3.1.6"
GATE_COMPILE = "python3 -m compileall -q {path}"
GATE_TESTS = "PYTHONPATH=src python3 -m pytest -q -x -p no:cacheprovider {tests}"
ISSUE_FINAL_GATE = "PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider {tests}"
TEST_DEPS = ["pytest", "markupsafe", "trio"]
GIT = ["git", "-c", "user.email=bench@milepost", "-c", "user.name=bench"]


def log(msg: str) -> None:
    print(msg, flush=True)


def run(cmd: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def timed(cmd: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if p.returncode not in ok:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-2000:]}")
    return took


def mp(*args: str) -> list[str]:
    return [sys.executable, "-m", "milepost", *args]


def sdist(cache: Path) -> Path:
    """The unpacked jinja2 sdist (src/ and tests/), downloaded once."""
    tree = cache / f"jinja2-{VERSION}"
    if not (tree / "src" / "jinja2").is_dir():
        archive = cache / f"jinja2-{VERSION}.tar.gz"
        if not archive.exists():
            log(f"downloading the jinja2 {VERSION} sdist into {cache}")
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    f"jinja2=={VERSION}",
                    "-d",
                    str(cache),
                ],
                check=True,
            )
        with tarfile.open(archive) as tar:
            tar.extractall(cache, filter="data")
    return tree


def test_venv(cache: Path) -> Path:
    """A venv for the gates (pytest, markupsafe, trio), made once; its bin folder."""
    venv = cache / "venv"
    py = venv / "bin" / "python"
    probe = "import pytest, markupsafe, trio"
    if not py.exists() or subprocess.run([str(py), "-c", probe], capture_output=True).returncode != 0:
        log(f"note: installing {', '.join(TEST_DEPS)} into {venv} for the gates (jinja2's test dependencies)")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *TEST_DEPS], check=True)
    return venv / "bin"


def workspace(tree: Path, where: Path, env: dict[str, str], final_gate: str | None = None) -> Path:
    """A git work tree of the sdist with a store, scaffolded (item 1) and ready."""
    shutil.copytree(tree, where)
    run(["git", "init", "-q"], where, env)
    run(["git", "add", "-A"], where, env)
    run([*GIT, "commit", "-qm", f"jinja2 {VERSION} sdist"], where, env)
    run(mp("init"), where, env)
    final = ["--final-gate", final_gate] if final_gate else []
    run(
        mp(
            "plan",
            "scaffold",
            "jinja2",
            "--path",
            "src",
            "--gate",
            GATE_COMPILE,
            "--gate",
            GATE_TESTS,
            "--final",
            "all-tests",
            *final,
            "--apply",
        ),
        where,
        env,
    )
    run(mp("item", "update", "1", "--plan-status", "ready"), where, env)
    return where


def apply(ws: Path, env: dict[str, str], plan: dict[str, object], name: str) -> int:
    path = ws / ".milepost" / f"{name}.json"
    path.write_text(json.dumps(plan))
    out = run(mp("--json", "plan", "apply", str(path)), ws, env).stdout
    return int(json.loads(out)["id"])


def one_milestone(ws: Path, env: dict[str, str], n: int) -> int:
    plan = {"objective": f"fixed cost {n}", "plan_status": "ready", "milestones": [{"name": "one", "gate": "true"}]}
    return apply(ws, env, plan, f"one-{n}")


def literal_item(ws: Path, env: dict[str, str]) -> tuple[int, int]:
    """Item 1's plan with each module entry replaced by the files it stands for now; (item, files)."""
    plan = json.loads(run(mp("--json", "plan", "export", "1"), ws, env).stdout)
    total = 0
    for m in plan["milestones"]:
        if not any(str(e).startswith("module:") for e in m.get("inputs", [])):
            continue
        shown = json.loads(run(mp("--json", "inputs", m["name"], "--item", "1"), ws, env).stdout)
        files = sorted({f for entry in shown["inputs"] for f in entry["files"]})
        m["inputs"] = files
        total += len(files)
    plan["objective"] = "the same milestones, literal inputs"
    plan["plan_status"] = "ready"
    return apply(ws, env, plan, "literal"), total


def affected_tests(ws: Path, edited: str) -> list[str]:
    """The test files whose unit stands for ``edited`` now (``module:tests/test_x.py``)."""
    snap = Snapshot(ws)
    out = []
    for test in sorted((ws / "tests").glob("test_*.py")):
        rel = test.relative_to(ws).as_posix()
        if edited in snap.fingerprint(unit_inputs(rel), "bench").files:
            out.append(rel)
    return out


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


@dataclass
class Bench:
    """What every step shares: the arguments, the sdist, the gates' venv, the environment and the folders."""

    args: argparse.Namespace
    tree: Path  # the unpacked sdist
    gate_bin: Path  # the gates' venv's bin folder
    env: dict[str, str]  # without milepost's and Prefect's settings; the server's PREFECT_API_URL once it is up
    tmp: Path  # the workspaces, removed at the end
    host: Path  # the server's workspace
    server_started: bool = False

    def pytest(self, *targets: str) -> list[str]:
        """pytest of the gates' venv over ``targets``, as one process."""
        return [str(self.gate_bin / "python3"), "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets]

    def suite_env(self) -> dict[str, str]:
        """The environment of pytest run directly: the work tree's copy of jinja2 (``PYTHONPATH=src``)."""
        return {**self.env, "PYTHONPATH": "src"}


@dataclass
class Figures:
    """Every measure in seconds (lists: one sample each), and what the summary names with them."""

    first: list[float] = field(default_factory=list)  # first drives of the scaffolded plan
    suite: list[float] = field(default_factory=list)  # the suite as one pytest process
    fixed: list[float] = field(default_factory=list)  # one-milestone drives
    per_file: float = 0.0  # the suite one pytest process per test file, one after another
    vfirst: float = 0.0  # the first drive of the plan with the issue's final gate (0.0: not run)
    affected: list[str] = field(default_factory=list)  # the test files whose unit stands for the edited file
    reproof: list[float] = field(default_factory=list)  # verify after the edit
    direct: list[float] = field(default_factory=list)  # the affected test files in one pytest process
    direct_each: list[float] = field(default_factory=list)  # the affected test files one process each
    revert: list[float] = field(default_factory=list)  # verify after putting the file back
    reproof_variant: list[float] = field(default_factory=list)  # verify after the edit, the issue's final gate
    literal: int = 0  # the item with literal file lists
    files: int = 0  # the paths of its lists
    listed: dict[int, list[float]] = field(default_factory=dict)  # item -> `--json list` of it
    stale: list[str] = field(default_factory=list)  # milestones of item 1 stale at the end


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="samples of each cheap measure")
    ap.add_argument("--list-repeat", type=int, default=7, help="samples of each stale check")
    ap.add_argument("--first-drives", type=int, default=1, help="first drives (each in a fresh workspace)")
    ap.add_argument("--edit", default="src/jinja2/nativetypes.py", help="the module given a one-line edit")
    ap.add_argument(
        "--no-variant",
        dest="variant",
        action="store_false",
        help="skip the plan with the issue's final gate (pytest without -x: no unit shared)",
    )
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "milepost-bench-exact")
    return ap.parse_args()


def set_up(args: argparse.Namespace) -> Bench:
    """The sdist and the gates' venv (made once in the cache folder), the environment, a temporary folder."""
    args.cache.mkdir(parents=True, exist_ok=True)
    tree = sdist(args.cache)
    gate_bin = test_venv(args.cache)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILEPOST_", "PREFECT_"))}
    env["PATH"] = f"{gate_bin}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    tmp = Path(tempfile.mkdtemp(prefix="bench-exact-"))
    host = tmp / "server"
    host.mkdir()
    return Bench(args=args, tree=tree, gate_bin=gate_bin, env=env, tmp=tmp, host=host)


def start_server(bench: Bench) -> None:
    """Log the package and the machine; one server for every drive (its URL into ``bench.env``)."""
    tree, env = bench.tree, bench.env
    modules = len(list((tree / "src" / "jinja2").glob("*.py")))
    tests = len(list((tree / "tests").glob("test_*.py")))
    log(f"jinja2 {VERSION}: {modules} modules in src/jinja2, {tests} test files; gates run {bench.gate_bin}/python3")
    log(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    run(mp("init"), bench.host, env)
    t0 = time.perf_counter()
    run(mp("server", "start"), bench.host, env)
    bench.server_started = True
    status = json.loads(run(mp("--json", "server", "status"), bench.host, env).stdout)
    env["PREFECT_API_URL"] = status["api_url"]
    log(f"milepost server start: {time.perf_counter() - t0:.1f} s, once (every drive below uses it)")


def first_drives(bench: Bench, figures: Figures) -> Path:
    """First drives, each in a fresh workspace (a store's cache would answer a second one); the last workspace."""
    ws = bench.tmp / "ws0"
    for n in range(bench.args.first_drives):
        ws = workspace(bench.tree, bench.tmp / f"ws{n}", bench.env)
        figures.first.append(timed(mp("drive", "1", "--max-parallel", "2"), ws, bench.env))
        log(f"first drive {n + 1}: {figures.first[-1]:.1f} s")
    return ws


def suite_and_fixed_cost(bench: Bench, ws: Path, figures: Figures) -> None:
    """The suite as one pytest process and a one-milestone drive, in turn; then the suite one process per file."""
    for n in range(bench.args.repeat):
        figures.suite.append(timed(bench.pytest("tests"), ws, bench.suite_env()))
        item = one_milestone(ws, bench.env, n)
        figures.fixed.append(timed(mp("drive", str(item)), ws, bench.env))
    log(
        f"suite: {', '.join(f'{x:.2f}' for x in figures.suite)} s; one-milestone drive: "
        f"{', '.join(f'{x:.2f}' for x in figures.fixed)} s"
    )
    test_files = sorted(p.relative_to(ws).as_posix() for p in (ws / "tests").glob("test_*.py"))
    figures.per_file = sum(timed(bench.pytest(t), ws, bench.suite_env()) for t in test_files)
    log(f"the suite one pytest process per test file, one after another: {figures.per_file:.1f} s")


def variant_first_drive(bench: Bench, figures: Figures) -> Path | None:
    """The plan with the issue's final gate: pytest without -x, so its units share nothing with the modules'.
    Its workspace, or None with --no-variant."""
    if not bench.args.variant:
        return None
    ws_variant = workspace(bench.tree, bench.tmp / "ws-variant", bench.env, final_gate=ISSUE_FINAL_GATE)
    figures.vfirst = timed(mp("drive", "1", "--max-parallel", "2"), ws_variant, bench.env)
    log(f"first drive, the issue's final gate (pytest without -x): {figures.vfirst:.1f} s")
    return ws_variant


def one_edit(bench: Bench, ws: Path, n: int, original: bytes, figures: Figures) -> None:
    """A one-line edit: verify, the affected files directly (one process, then one each); put back, verify."""
    edited = ws / bench.args.edit
    verify = mp("verify", "--item", "1", "--max-parallel", "2")
    edited.write_bytes(original + f"# one-line edit {n} {time.time()}\n".encode())
    figures.reproof.append(timed(verify, ws, bench.env))
    figures.direct.append(timed(bench.pytest(*figures.affected), ws, bench.suite_env()))
    figures.direct_each.append(sum(timed(bench.pytest(t), ws, bench.suite_env()) for t in figures.affected))
    edited.write_bytes(original)
    figures.revert.append(timed(verify, ws, bench.env))


def one_variant_edit(bench: Bench, ws_variant: Path, n: int, original: bytes, figures: Figures) -> None:
    """The same edit in the workspace with the issue's final gate: verify; put back, verify (not counted)."""
    verify = mp("verify", "--item", "1", "--max-parallel", "2")
    (ws_variant / bench.args.edit).write_bytes(original + f"# one-line edit {n} {time.time()}\n".encode())
    figures.reproof_variant.append(timed(verify, ws_variant, bench.env))
    (ws_variant / bench.args.edit).write_bytes(original)
    timed(verify, ws_variant, bench.env)


def edits(bench: Bench, ws: Path, ws_variant: Path | None, figures: Figures) -> None:
    """``--repeat`` one-line edits of ``--edit`` and their re-proofs, against its affected test files run directly."""
    original = (ws / bench.args.edit).read_bytes()
    figures.affected = affected_tests(ws, bench.args.edit)
    for n in range(bench.args.repeat):
        one_edit(bench, ws, n, original, figures)
        if ws_variant is not None:
            one_variant_edit(bench, ws_variant, n, original, figures)
    log(
        f"edit {bench.args.edit}: affected units {len(figures.affected)} ({', '.join(figures.affected)}); re-proof "
        f"{', '.join(f'{x:.2f}' for x in figures.reproof)} s; direct {', '.join(f'{x:.2f}' for x in figures.direct)} s "
        f"(one process each: {', '.join(f'{x:.2f}' for x in figures.direct_each)} s); "
        f"verify after revert {', '.join(f'{x:.2f}' for x in figures.revert)} s"
    )


def stale_checks(bench: Bench, ws: Path, figures: Figures) -> None:
    """``--json list`` of item 1 (module entries) against the same milestones with literal file lists."""
    env = bench.env
    figures.literal, figures.files = literal_item(ws, env)
    literal = figures.literal
    timed(mp("drive", str(literal), "--max-parallel", "2"), ws, env)  # its gates' units are all kept
    figures.listed = {1: [], literal: []}
    for item in (1, literal):  # warm the caches
        timed(mp("--json", "list", "--item", str(item)), ws, env)
    for _ in range(bench.args.list_repeat):
        for item in (1, literal):
            figures.listed[item].append(timed(mp("--json", "list", "--item", str(item)), ws, env))
    views = json.loads(run(mp("--json", "list", "--item", "1"), ws, env).stdout)
    figures.stale = [m["name"] for m in views["milestones"] if m.get("view") == "stale"]


def measure(bench: Bench) -> Figures:
    """Every measure, against one server; the server stopped and the workspaces removed at the end."""
    figures = Figures()
    try:
        start_server(bench)
        ws = first_drives(bench, figures)
        suite_and_fixed_cost(bench, ws, figures)
        ws_variant = variant_first_drive(bench, figures)
        edits(bench, ws, ws_variant, figures)
        stale_checks(bench, ws, figures)
    finally:
        if bench.server_started:
            run(mp("server", "stop"), bench.host, bench.env, check=False)
        shutil.rmtree(bench.tmp, ignore_errors=True)
    return figures


def print_summary(args: argparse.Namespace, figures: Figures) -> None:
    s, f, d = med(figures.suite), med(figures.fixed), med(figures.first)
    r, dr, rv = med(figures.reproof), med(figures.direct), med(figures.revert)
    lm, ll = med(figures.listed[1]), med(figures.listed[figures.literal])
    vfirst, per_file, files = figures.vfirst, figures.per_file, figures.files
    log("")
    log(f"jinja2 {VERSION}, medians ({args.repeat} samples; first drive {args.first_drives}; list {args.list_repeat}):")
    log(f"  suite, one pytest process               {s:6.2f} s")
    log(f"  one-milestone drive (fixed cost)        {f:6.2f} s")
    log(
        f"  first drive --max-parallel 2            {d:6.2f} s; minus fixed {d - f:.2f} s = "
        f"{(d - f) / s:.1f}x the suite (target <= 3x: {verdict(d - f <= 3 * s)})"
    )
    if vfirst:
        log(
            f"    the same, the issue's final gate (no -x) {vfirst:6.2f} s; minus fixed {vfirst - f:.2f} s = "
            f"{(vfirst - f) / s:.1f}x the suite (for information)"
        )
    log(f"    the suite one process per test file, one after another: {per_file:.2f} s ({per_file / s:.1f}x)")
    log(
        f"  re-proof after an edit (verify -j2)     {r:6.2f} s; affected files directly {dr:.2f} s: "
        f"{r / dr:.1f}x (target <= 1.5x + 2 s = {1.5 * dr + 2:.2f} s: {verdict(r <= 1.5 * dr + 2)})"
    )
    if figures.reproof_variant:
        log(
            f"    the same, the issue's final gate (no -x) {med(figures.reproof_variant):6.2f} s: "
            f"{med(figures.reproof_variant) / dr:.1f}x (for information)"
        )
    log(
        f"    the affected files one process each, one after another: {med(figures.direct_each):.2f} s "
        f"({len(figures.affected)} files: {', '.join(figures.affected)})"
    )
    log(f"  verify after revert                     {rv:6.2f} s (target < 2 s: {verdict(rv < 2)})")
    log(
        f"  --json list, module entries             {lm:6.2f} s; literal lists ({files} paths) {ll:.2f} s: "
        f"{lm / ll:.2f}x (target <= 1.5x: {verdict(lm <= 1.5 * ll)})"
    )
    log(f"  load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if figures.stale:
        log(f"  warning: stale at the end: {', '.join(figures.stale)}")


def main() -> None:
    args = parse_args()
    print_summary(args, measure(set_up(args)))


if __name__ == "__main__":
    main()
