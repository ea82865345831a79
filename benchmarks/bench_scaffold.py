"""Benchmark: ``milepost plan scaffold`` on real, larger packages.

Copies installed packages into a checkout-like temporary folder (so the plan
has inputs, as in a real checkout) and scaffolds them in-process: networkx
(several hundred modules, its tests inside the package, mapped by their
imports; gates with ``{path}`` and ``{tests}``) and click (an import cycle of
11 modules, split with ``--split-cycles``). Then applies the networkx plan
to a fresh SQLite store (parsing the file, then applying it). Prints the
medians and the plans' sizes.

    .venv/bin/python benchmarks/bench_scaffold.py [--repeat 5]

Target: each scaffold under 2 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from milepost.planfile import parse_plan
from milepost.scaffold import scaffold
from milepost.scaffold.render import count
from milepost.service import Service
from milepost.store import Store
from milepost.workspace import sqlite_url

GATES = ["python3 -m compileall -q {path}", "python3 -m pytest -q {tests}"]


def copy_installed(package: str, dest: Path) -> None:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    shutil.copytree(folder, dest / "src" / package, ignore=shutil.ignore_patterns("__pycache__"))


def timed(repeat: int, **kw: Any) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = scaffold(**kw)
        times.append(time.perf_counter() - t0)
    return times, result


def describe(name: str, result: Any, times: list[float], repeat: int) -> None:
    ms = result.plan["milestones"]
    edges = sum(len(m.get("deps", [])) for m in ms)
    inputs = sum(len(m.get("inputs", [])) for m in ms)
    tests = sum(1 for m in ms if isinstance(m.get("gate"), list))
    print(
        f"plan scaffold {name}: {count(result.modules, 'module')} -> {count(len(ms), 'milestone')},"
        f" {count(edges, 'dep')}, {count(len(result.cycles), 'import cycle')},"
        f" {count(tests, 'milestone')} with tests, {count(inputs, 'input pattern')}"
    )
    median = statistics.median(times)
    print(
        f"  scaffold (grimp, tests by imports, cycles, inputs, YAML, validation): median {median:.2f} s of {repeat}"
        "   (target < 2 s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        copy_installed("networkx", root)
        copy_installed("click", root)
        times, nx_plan = timed(args.repeat, package="networkx", paths=[root / "src"], base=root, gates=GATES)
        describe("networkx", nx_plan, times, args.repeat)
        times, click_plan = timed(args.repeat, package="click", paths=[root / "src"], base=root, split_cycles=True)
        describe("click --split-cycles", click_plan, times, args.repeat)
        parse, apply = [], []
        for i in range(args.repeat):
            # A fresh store in the checkout itself: the plan's module entries name its modules.
            home = root / f".milepost-{i}"
            home.mkdir()
            svc = Service(Store.open(sqlite_url(home / "milepost.db"), home, root, create=True))
            t0 = time.perf_counter()
            plan = parse_plan(nx_plan.text, "scaffold.yaml")
            t1 = time.perf_counter()
            item = svc.apply_plan(plan)
            parse.append(t1 - t0)
            apply.append(time.perf_counter() - t1)
            assert len(item.milestones) == len(nx_plan.plan["milestones"])
            svc.close()
        size = len(nx_plan.text) // 1024
        print(
            f"  the networkx plan ({size} KiB of YAML): parse_plan median {statistics.median(parse):.2f} s,"
            f" apply to a fresh SQLite store {statistics.median(apply):.2f} s"
        )


if __name__ == "__main__":
    main()
