"""Benchmark: next_ready picks on large milestone DAGs.

Compares milepost's incremental readiness (in-degree counters + a heap) with
the seed's brute-force scan (every pick filters all milestones and checks
their deps), side by side in one run, and reports medians and the ratio.

    .venv/bin/python benchmarks/bench_graph.py [--sizes 1000,10000,100000] [--repeat 3]

The brute-force scan is O(n) per pick (O(n^2) for a whole drive), so it is
timed on a sample of picks and reported per pick.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from milepost.graph import Action, Milestone, MilestoneStatus, WorkGraph

S = MilestoneStatus


def random_dag(n: int, seed: int = 7) -> list[Milestone]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        k = rnd.randint(0, min(i, 3))
        deps = sorted({f"m{rnd.randrange(max(0, i - 50), i)}" for _ in range(k)}) if i else []
        out.append(Milestone(id=i + 1, name=f"m{i}", deps=deps))
    return out


def brute_next(ms: dict[str, Milestone]) -> Milestone | None:
    best = None
    for m in ms.values():
        ready = m.status is S.PENDING and all(ms[d].status is S.DONE for d in m.deps)
        if ready and (best is None or m.id < best.id):
            best = m
    return best


def drive_incremental(ms: list[Milestone]) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    g = WorkGraph(ms)
    build = time.perf_counter() - t0
    picks = 0
    t0 = time.perf_counter()
    while (m := g.next_ready()) is not None:
        g.apply(m.name, Action.START)
        g.apply(m.name, Action.DONE)
        picks += 1
    return build, (time.perf_counter() - t0) / picks, picks


def drive_brute(ms: list[Milestone], sample: int) -> float:
    state = {m.name: m for m in ms}
    t0 = time.perf_counter()
    picks = 0
    while picks < sample and (m := brute_next(state)) is not None:
        state[m.name] = m.model_copy(update={"status": S.DONE})
        picks += 1
    return (time.perf_counter() - t0) / max(picks, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--brute-sample", type=int, default=200)
    args = ap.parse_args()
    print(f"{'milestones':>10}  {'build s':>8}  {'pick us (heap)':>14}  {'pick us (scan)':>14}  {'scan/heap':>9}")
    for n in (int(x) for x in args.sizes.split(",")):
        ms = random_dag(n)
        builds, inc, brute = [], [], []
        for _ in range(args.repeat):
            b, per_pick, picks = drive_incremental(ms)
            assert picks == n
            builds.append(b)
            inc.append(per_pick)
            brute.append(drive_brute(ms, args.brute_sample))
        mi, mb = statistics.median(inc), statistics.median(brute)
        print(f"{n:>10}  {statistics.median(builds):>8.2f}  {mi * 1e6:>14.1f}  {mb * 1e6:>14.1f}  {mb / mi:>9.0f}x")


if __name__ == "__main__":
    main()
