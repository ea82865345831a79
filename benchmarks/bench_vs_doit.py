"""Benchmark: a drive against doit on the same DAG with the same file
dependencies (issue 32, item 8).

A small package of 7 modules (``pkg/m0.py`` .. ``pkg/m6.py``, each importing
the modules it depends on) and a pytest file per module; 7 gates, one per
module, each `python -m pytest -q tests/test_mX.py` (a real process of a few
tenths of a second), in a DAG that follows the imports. Each gate's file
dependencies are its module, what that module imports (transitively) and its
test file: milepost's ``inputs``, doit's ``file_dep`` (doit's ``task_dep``
carries the DAG's edges). Every gate first appends the time it started to a
file, so each run's *fixed start* (from the command's start to its first
gate) is measured apart from the rest.

Each repetition, in a fresh copy of the package for each tool (interleaved):
the first run (every gate), the run after a one-line edit of ``pkg/m2.py``
(milepost re-proves the stale milestones m2, m4 and m6; doit re-runs the
tasks whose file_dep changed, the same three), and a run with nothing
changed. milepost runs `milepost drive --max-parallel N` against one
Prefect server started once (its `PREFECT_API_URL`), so no run pays for a
server's start; doit runs `doit -n N`. Medians of R; the target: milepost's
first run and its run after the edit within 1.2x of doit's beyond the fixed
start ((run - fixed start) / doit's same). milepost's own bytecode is
written first, as an install does (the runs write none: no ``__pycache__``
in the inputs' folders).

    .venv/bin/python benchmarks/bench_vs_doit.py [--repeat 5] [--parallel 1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

TARGET = 1.2
# module -> the modules it imports
DEPS = {0: [], 1: [], 2: [0], 3: [0, 1], 4: [2], 5: [3], 6: [4, 5]}
EDITED = 2


def closure(i: int) -> list[int]:
    out: set[int] = set()
    todo = [i]
    while todo:
        for d in DEPS[todo.pop()]:
            if d not in out:
                out.add(d)
                todo.append(d)
    return sorted(out)


def make_package(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    for i, deps in DEPS.items():
        body = [f"from pkg import m{d}" for d in deps]
        body += [
            f"def f{k}(x):\n    return x * {k} + {' + '.join(f'm{d}.f1(x)' for d in deps) or '0'}\n" for k in range(40)
        ]
        body.append(f"def value():\n    return {i} + {' + '.join(f'm{d}.value()' for d in deps) or '0'}\n")
        (root / "pkg" / f"m{i}.py").write_text("\n".join(body))
        tests = [f"from pkg import m{i}\n"]
        tests += [f"def test_f{k}():\n    assert m{i}.f{k}(2) == m{i}.f{k}(2)\n" for k in range(40)]
        tests.append(f"def test_value():\n    assert m{i}.value() >= {i}\n")
        (root / "tests" / f"test_m{i}.py").write_text("\n".join(tests))


def gate(i: int) -> str:
    stamp = "import time; open('gate-starts', 'a').write(repr(time.time()) + chr(10))"
    return f'{sys.executable} -c "{stamp}" && {sys.executable} -m pytest -q -p no:cacheprovider tests/test_m{i}.py'


def files_of(i: int) -> list[str]:
    return ["pkg/__init__.py", *(f"pkg/m{d}.py" for d in [i, *closure(i)]), f"tests/test_m{i}.py"]


def plan_yaml() -> str:
    lines = ["objective: seven gates against doit", "plan_status: ready", "milestones:"]
    for i, deps in DEPS.items():
        lines.append(f"  - name: m{i}")
        if deps:
            lines.append(f"    deps: [{', '.join(f'm{d}' for d in deps)}]")
        lines.append(f"    gate: {json.dumps(gate(i))}")
        lines.append(f"    inputs: [{', '.join(files_of(i))}]")
        lines.append("    retries: 0")
    return "\n".join(lines) + "\n"


def dodo_py() -> str:
    tasks = []
    for i, deps in DEPS.items():
        tasks.append(
            f"    yield {{'name': 'm{i}', 'actions': [{gate(i)!r}], 'file_dep': {files_of(i)!r},"
            f" 'task_dep': {[f'gate:m{d}' for d in deps]!r}, 'verbosity': 0}}"
        )
    return "DOIT_CONFIG = {'reporter': 'zero'}\n\n\ndef task_gate():\n" + "\n".join(tasks) + "\n"


def timed(cmd: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """(seconds to the first gate's start, or nan when none ran; seconds to the end)."""
    starts = cwd / "gate-starts"
    starts.unlink(missing_ok=True)
    t0 = time.time()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    end = time.time() - t0
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} -> {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    first = min((float(x) for x in starts.read_text().split()), default=float("nan")) if starts.exists() else None
    return (first - t0) if first is not None else float("nan"), end


def edit(root: Path, n: int) -> None:
    path = root / "pkg" / f"m{EDITED}.py"
    path.write_text(path.read_text() + f"\nEDIT = {n}\n")


@dataclass
class Bench:
    """What every run shares: the folders, the environments and the command that runs milepost."""

    base: Path  # the temporary folder of the whole benchmark
    template: Path  # the package, copied afresh for each run
    env: dict[str, str]  # this environment without milepost's and Prefect's settings
    mp: list[str]  # `python -m milepost`
    server_ws: Path  # the workspace of the one Prefect server
    env_mp: dict[str, str] = field(default_factory=dict)  # env with the server's PREFECT_API_URL, once it is up


# tool -> run ("first", "edit", "none") -> (fixed start, whole run) of each counted repetition
Figures = dict[str, dict[str, list[tuple[float, float]]]]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--parallel", default="1,2", help="milepost --max-parallel and doit -n, comma-separated")
    return ap.parse_args()


def compile_milepost() -> None:
    """Write the bytecode of milepost's own modules, as an install does. The
    runs set PYTHONDONTWRITEBYTECODE (no ``__pycache__`` in the inputs'
    folders), so a checkout whose modules were never imported would compile
    them afresh in every run: a cost doit, installed with its bytecode, does
    not pay and a user's installed milepost does not either."""
    import compileall

    import milepost

    compileall.compile_dir(str(Path(milepost.__file__).parent), quiet=1)


def set_up() -> Bench:
    """The package's template and the server's workspace (initialised), in a fresh temporary folder."""
    compile_milepost()
    base = Path(tempfile.mkdtemp(prefix="milepost-bench-doit-"))
    template = base / "template"
    make_package(template)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILEPOST_", "PREFECT_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ written into the inputs' folders
    mp = [sys.executable, "-m", "milepost"]
    server_ws = base / "server"
    server_ws.mkdir()
    subprocess.run([*mp, "init"], cwd=server_ws, env=env, check=True, capture_output=True)
    return Bench(base=base, template=template, env=env, mp=mp, server_ws=server_ws)


def start_server(bench: Bench) -> None:
    """One Prefect server for every drive: its URL goes into ``bench.env_mp``."""
    info = json.loads(
        subprocess.run(
            [*bench.mp, "--json", "server", "start"],
            cwd=bench.server_ws,
            env=bench.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    bench.env_mp = {**bench.env, "PREFECT_API_URL": info["api_url"]}


def prepare(bench: Bench, tool: str, ws: Path, par: int) -> list[str]:
    """Make the copy at ``ws`` ready for ``tool`` (milepost's plan applied, or doit's dodo.py); its command."""
    if tool == "milepost":
        subprocess.run([*bench.mp, "init"], cwd=ws, env=bench.env, check=True, capture_output=True)
        (ws / "plan.yaml").write_text(plan_yaml())
        subprocess.run(
            [*bench.mp, "plan", "apply", "plan.yaml"], cwd=ws, env=bench.env, check=True, capture_output=True
        )
        return [*bench.mp, "drive", "--max-parallel", str(par)]
    (ws / "dodo.py").write_text(dodo_py())
    return [sys.executable, "-m", "doit", "-n", str(par)]


def one_repetition(bench: Bench, tool: str, par: int, r: int) -> dict[str, tuple[float, float]]:
    """In a fresh copy of the package: the first run, the run after a one-line edit and a run with nothing changed."""
    ws = bench.base / f"{tool}-{par}-{r + 1}"
    shutil.copytree(bench.template, ws)
    cmd = prepare(bench, tool, ws, par)
    runs = {"first": timed(cmd, ws, bench.env_mp)}
    edit(ws, r + 2)
    runs["edit"] = timed(cmd, ws, bench.env_mp)
    runs["none"] = timed(cmd, ws, bench.env_mp)
    shutil.rmtree(ws, ignore_errors=True)
    return runs


def measure(bench: Bench, par: int, repeat: int) -> Figures:
    """``repeat`` repetitions of each tool, interleaved, after one that is not counted."""
    figures: Figures = {tool: {"first": [], "edit": [], "none": []} for tool in ("milepost", "doit")}
    for r in range(-1, repeat):  # (the first repetition warms the server and the caches: not counted)
        for tool in ("milepost", "doit"):
            runs = one_repetition(bench, tool, par, r)
            if r >= 0:
                for k, v in runs.items():
                    figures[tool][k].append(v)
    return figures


def medians(runs: list[tuple[float, float]], k: str) -> tuple[float, float, float]:
    """(whole run, fixed start, the rest) of one tool's runs of kind ``k``; a run with nothing changed starts no
    gate, so it has no fixed start and its rest is the whole run."""
    fixed = statistics.median(f for f, _ in runs) if k != "none" else 0.0
    whole = statistics.median(e for _, e in runs)
    return whole, fixed, statistics.median(e - f for f, e in runs) if k != "none" else whole


def print_table(figures: Figures, par: int, repeat: int) -> None:
    print(f"--max-parallel / -n {par}, medians of {repeat} (seconds; fixed start = to the first gate):")
    for k, what in (("first", "first run"), ("edit", "after a one-line edit"), ("none", "nothing changed")):
        row = {tool: medians(figures[tool][k], k) for tool in ("milepost", "doit")}
        line = f"  {what:22s}"
        for tool in ("milepost", "doit"):
            whole, fixed, rest = row[tool]
            line += f"  {tool} {whole:5.2f} (start {fixed:4.2f}, rest {rest:5.2f})"
        if k != "none":
            ratio = row["milepost"][2] / row["doit"][2]
            line += f"  rest {ratio:4.2f}x (target {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'})"
            line += f"; whole {row['milepost'][0] / row['doit'][0]:4.2f}x"
        print(line)


def main() -> None:
    args = parse_args()
    bench = set_up()
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
        start_server(bench)
        for par in (int(x) for x in args.parallel.split(",")):
            print_table(measure(bench, par, args.repeat), par, args.repeat)
        print(f"load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    finally:
        subprocess.run([*bench.mp, "server", "stop"], cwd=bench.server_ws, env=bench.env, capture_output=True)
        shutil.rmtree(bench.base, ignore_errors=True)


if __name__ == "__main__":
    main()
