"""Benchmark: ``milepost --json next`` at any size.

Items of 20 and of N (default 100,000) milestones in one SQLite store; the
whole command as a process, interleaved, medians of R, with each run's peak
memory (``ru_maxrss`` of the child). ``next`` is one indexed scan in id order
for the ready milestones and a read of the first one with its deps, never
the whole graph. Target (issue 19): the large item within 1.10x of the
small one, and memory flat.

    .venv/bin/python benchmarks/bench_next.py [--size 100000] [--repeat 15]
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

from milepost.graph.models import Milestone
from milepost.service import Service
from milepost.store import Store
from milepost.workspace import init_workspace


def plan(n: int, done: int = 0) -> list[Milestone]:
    """A layered plan: the first 200 have no deps; the rest need up to three earlier ones."""
    out = []
    for i in range(n):
        deps = [] if i < min(200, n) else sorted({f"m{i - 1 - k * 37 % i}" for k in range(1 + i % 3)})
        out.append(Milestone(id=i + 1, name=f"m{i}", deps=deps, status="done" if i < done else "pending"))
    return out


def run(root: Path, item: int) -> tuple[float, float]:
    """(seconds, peak MiB) of one ``milepost --json next --item ITEM``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_")}
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "milepost", "--json", "next", "--item", str(item)],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(p.pid, 0)
    took = time.perf_counter() - t0
    assert os.waitstatus_to_exitcode(status) == 0
    return took, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--create", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.create is not None:
        ws = init_workspace(args.create)
        svc = Service(Store.open(ws.url, ws.home, ws.root, create=True))
        svc.create_item("small", milestones=plan(20))
        # Half done: the ready ones sit in the middle of the id range, as in a plan being worked.
        svc.create_item("large", milestones=plan(args.size, done=args.size // 2))
        svc.close()
        return
    base = Path(tempfile.mkdtemp(prefix="milepost-bench-next-"))
    try:
        t0 = time.perf_counter()
        # In a child process: this one stays small, and a child's peak memory is its own
        # (a fork inherits its parent's high-water mark, and exec keeps it).
        subprocess.run([sys.executable, __file__, "--create", str(base), "--size", str(args.size)], check=True)
        small, large = 1, 2
        print(f"items: 20 and {args.size} milestones ({time.perf_counter() - t0:.1f} s to create)")
        times: dict[int, list[float]] = {small: [], large: []}
        mem: dict[int, list[float]] = {small: [], large: []}
        for _ in range(args.repeat):
            for item in (small, large):
                t, m = run(base, item)
                times[item].append(t * 1000)
                mem[item].append(m)
        s, lg = statistics.median(times[small]), statistics.median(times[large])
        print(f"milepost --json next, whole process, median of {args.repeat} (interleaved):")
        print(f"  {20:>7} milestones  {s:7.1f} ms   peak {statistics.median(mem[small]):6.1f} MiB")
        print(f"  {args.size:>7} milestones  {lg:7.1f} ms   peak {statistics.median(mem[large]):6.1f} MiB")
        print(f"  ratio {lg / s:.2f}   (target <= 1.10)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
