"""Benchmark: how soon a drive starts its first gate (issue 32, item 1).

Target: the second drive in a workspace starts its first gate within 1.5 s
of the command's start on a quiet machine, without `milepost server start`
run first. A fresh workspace; its first `milepost drive` starts the
workspace's Prefect server in the background (timed once, for information);
then R drives, each of a new item of one milestone whose gate writes the
time it started (`time.time()`, read back from a file), each a whole
`milepost drive` process: the time from just before the process is spawned
to the gate's first line, and to the process's end. Medians of R, with the
load average before and after; for scale, side by side, `python -c "import
prefect"` and `milepost --json next` in the same workspace.

With ``--baseline DIR`` (a checkout of another version of milepost, e.g.
``git archive HEAD~3 | tar -x -C DIR``), the same drives are run by that
version too (``PYTHONPATH=DIR``), interleaved with this one: before and after,
side by side on one server.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 7] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.5
# The gate: its start time, as early as the interpreter can tell it.
GATE = 'python3 -c \'import time; open("started", "w").write(repr(time.time()))\''


def env_for(checkout: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILEPOST_", "PREFECT_"))}
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    return env


def milepost(ws: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "milepost", *args], cwd=ws, env=env or env_for(None), capture_output=True, text=True
    )


def must(p: subprocess.CompletedProcess[str]) -> str:
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, p.args))} -> {p.returncode}\n{p.stdout}{p.stderr}")
    return p.stdout


def new_item(ws: Path, n: int) -> int:
    import json

    out = must(milepost(ws, "--json", "item", "create", f"startup {n}"))
    item = int(json.loads(out)["id"])
    must(milepost(ws, "add", "first", "--gate", GATE, "--retries", "0", "--item", str(item)))
    return item


def drive(ws: Path, item: int, env: dict[str, str]) -> tuple[float, float]:
    """(seconds to the first gate's start, seconds to the end) of one `milepost drive`."""
    stamp = ws / "started"
    stamp.unlink(missing_ok=True)
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, "-m", "milepost", "drive", "--item", str(item)],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
    )
    end = time.time() - t0
    must(p)
    return float(stamp.read_text()) - t0, end


def whole(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout of milepost, run side by side")
    args = ap.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="milepost-bench-startup-"))
    versions: dict[str, dict[str, str]] = {"this": env_for(None)}
    if args.baseline is not None:
        versions["baseline"] = env_for(args.baseline.resolve())
    try:
        print(f"load average before: {load()}")
        must(milepost(ws, "init"))
        t0 = time.time()
        first, end = drive(ws, new_item(ws, 0), versions["this"])
        print(
            f"first drive (starts the workspace's server in the background): first gate {first:.2f} s,"
            f" whole {end:.2f} s ({time.time() - t0:.1f} s)"
        )
        gate: dict[str, list[float]] = {v: [] for v in versions}
        ends: dict[str, list[float]] = {v: [] for v in versions}
        imports: list[float] = []
        nexts: list[float] = []
        for i in range(args.repeat):
            for name, env in versions.items():
                g, e = drive(ws, new_item(ws, i + 1), env)
                gate[name].append(g)
                ends[name].append(e)
            imports.append(whole([sys.executable, "-c", "import prefect"], ws, versions["this"]))
            nexts.append(whole([sys.executable, "-m", "milepost", "--json", "next"], ws, versions["this"]))
        print(f"load average after: {load()}")
        print(f"second and later drives, medians of {args.repeat}:")
        for name in versions:
            g, e = statistics.median(gate[name]), statistics.median(ends[name])
            verdict = "met" if g <= TARGET else "NOT met"
            print(
                f"  {name:9s} first gate {g:5.2f} s (min {min(gate[name]):.2f}, max {max(gate[name]):.2f};"
                f" target {TARGET} s: {verdict}), whole drive {e:5.2f} s"
            )
        print(
            f"  for scale: python -c 'import prefect' {statistics.median(imports):.2f} s,"
            f" milepost --json next {statistics.median(nexts):.2f} s"
        )
    finally:
        milepost(ws, "server", "stop")
        shutil.rmtree(ws, ignore_errors=True)


if __name__ == "__main__":
    main()
