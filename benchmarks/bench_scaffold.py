"""Benchmark: ``milepost plan scaffold`` on a real, larger package.

Scaffolds networkx (installed with milepost; several hundred modules, a few
import cycles) in-process, then applies the plan to a fresh SQLite store,
and prints the medians of both, with the plan's size.

    .venv/bin/python benchmarks/bench_scaffold.py [--package networkx] [--repeat 5]

Target: the scaffold under 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from milepost.planfile import parse_plan
from milepost.scaffold import scaffold
from milepost.service import Service
from milepost.store import Store
from milepost.workspace import init_workspace


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--package", default="networkx")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    build, apply = [], []
    result = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = scaffold(args.package)
        build.append(time.perf_counter() - t0)
        with tempfile.TemporaryDirectory() as tmp:
            ws = init_workspace(Path(tmp))
            svc = Service(Store.open(ws.url, ws.home, ws.root, create=True))
            t0 = time.perf_counter()
            item = svc.apply_plan(parse_plan(result.text, "scaffold.yaml"))
            apply.append(time.perf_counter() - t0)
            assert len(item.milestones) == len(result.plan["milestones"])
            svc.close()
    assert result is not None
    edges = sum(len(m.get("deps", [])) for m in result.plan["milestones"])
    print(f"plan scaffold {args.package}: {result.modules} modules -> {len(result.plan['milestones'])} milestones,"
          f" {edges} deps, {len(result.cycles)} import cycles")  # fmt: skip
    print(f"  scaffold (grimp graph, condensation, YAML, validation): median {statistics.median(build):.2f} s"
          f" of {args.repeat}   (target < 2 s)")  # fmt: skip
    print(f"  plan apply to a fresh SQLite store:                     median {statistics.median(apply):.2f} s")


if __name__ == "__main__":
    main()
