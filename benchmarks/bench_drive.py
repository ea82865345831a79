"""Benchmark: drive overhead per milestone, and parallel efficiency.

Side by side in one run, against one real ``prefect server`` on loopback:

* milepost's ``drive`` of N independent milestones whose gates are ``true``;
* a hand-written Prefect flow running the same ``true`` commands as tasks
  (one task run per command, named, submitted and awaited one at a time);
* a plain ``subprocess.run`` loop of the same commands;
* doit (a task runner without a server or a UI) running the same commands as
  tasks, to show what Prefect costs and what it buys.

Reports the median milliseconds per milestone of each over R repeats and the
ratio milepost / hand-written flow (target <= 1.25). Then drives a wide DAG of
sleeping gates with enough parallelism and reports the gates' wall time over
the DAG's critical-path time (target <= 1.3).

    .venv/bin/python benchmarks/bench_drive.py [--n 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=1.0)
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="milepost-bench-"))
    from milepost.flows.server import server_start, server_stop
    from milepost.workspace import init_workspace

    ws = init_workspace(root)
    print(f"starting a Prefect server for {root} ...", file=sys.stderr)
    info = server_start(ws.home)
    os.environ["PREFECT_API_URL"] = info.api_url or ""
    os.environ["PREFECT_HOME"] = str(ws.home / "prefect")
    os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] = "CRITICAL"
    os.environ["DO_NOT_TRACK"] = "1"
    try:
        run(args, ws)
        from prefect._internal.concurrency.services import QueueService

        QueueService.drain_all(timeout=10, at_exit=False)  # flush logs and events while the server is up
    finally:
        server_stop(ws.home)


def run(args: argparse.Namespace, ws) -> None:  # type: ignore[no-untyped-def]
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    from milepost.flows.drive import run_drive
    from milepost.planfile import parse_plan
    from milepost.service import Service
    from milepost.store import Store

    n = args.n

    @task(cache_policy=NO_CACHE, persist_result=False)
    def sh(cmd: str) -> int:
        return subprocess.run(["/bin/sh", "-c", cmd], check=False).returncode

    @flow(name="hand-written")
    def hand(count: int) -> None:
        for i in range(count):
            sh.with_options(task_run_name=f"m{i}").submit("true").wait()

    def milepost_once() -> float:
        svc = Service(Store.open(ws.url, ws.home, ws.root, create=True))
        plan = "objective: bench\nmilestones:\n" + "".join(f"  - {{name: m{i}, gate: 'true'}}\n" for i in range(n))
        item = svc.apply_plan(parse_plan(plan)).id
        t0 = time.perf_counter()
        s = run_drive(svc, item)
        dt = time.perf_counter() - t0
        assert s.ok, s.message
        svc.close()
        return dt

    def hand_once() -> float:
        t0 = time.perf_counter()
        hand(n)
        return time.perf_counter() - t0

    def doit_once() -> float:
        from doit.cmd_base import ModuleTaskLoader
        from doit.doit_cmd import DoitMain

        def task_m() -> Any:
            for i in range(n):
                yield {"name": f"m{i}", "actions": ["true"], "verbosity": 0}

        tasks = {"task_m": task_m}
        dep_file = str(Path(tempfile.mkdtemp(prefix="milepost-doit-")) / "doit.db")
        t0 = time.perf_counter()
        code = DoitMain(ModuleTaskLoader(tasks)).run(["--db-file", dep_file, "--reporter", "zero"])
        dt = time.perf_counter() - t0
        assert code == 0, code
        return dt

    def plain_once() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            subprocess.run(["/bin/sh", "-c", "true"], check=False)
        return time.perf_counter() - t0

    # Warm up both paths once (first flow of a process pays for imports and client set-up).
    milepost_once()
    hand_once()
    mp, hw, pl, dt = [], [], [], []
    for _ in range(args.repeat):
        mp.append(milepost_once())
        hw.append(hand_once())
        pl.append(plain_once())
        dt.append(doit_once())
    m_mp, m_hw, m_pl, m_dt = (statistics.median(x) * 1000 / n for x in (mp, hw, pl, dt))
    print(f"drive overhead, {n} milestones with `true` gates, median of {args.repeat} (ms per milestone):")
    print(f"  milepost drive           {m_mp:8.1f}")
    print(f"  hand-written Prefect flow{m_hw:8.1f}")
    print(f"  plain subprocess loop    {m_pl:8.1f}")
    print(f"  doit, same commands      {m_dt:8.1f}   ({m_dt * n / 1000:.2f} s for all {n}; no server, no UI)")
    print(f"  milepost / hand-written  {m_mp / m_hw:8.2f}x   (target <= 1.25)")

    # Parallel efficiency: layers x width sleeping gates, each layer depending on the one before.
    w, layers, sl = args.width, args.layers, args.sleep
    lines = []
    for layer in range(layers):
        for j in range(w):
            deps = f", deps: [{', '.join(f'l{layer - 1}w{k}' for k in range(w))}]" if layer else ""
            lines.append(f"  - {{name: l{layer}w{j}, gate: 'sleep {sl}'{deps}}}\n")
    svc = Service(Store.open(ws.url, ws.home, ws.root, create=True))
    item = svc.apply_plan(parse_plan("objective: wide\nmilestones:\n" + "".join(lines))).id
    t0 = time.perf_counter()
    s = run_drive(svc, item, max_parallel=w)
    total = time.perf_counter() - t0
    assert s.ok, s.message
    runs = [r for m in svc.get_item(item).milestones for r in svc.runs(m.name, item)]
    span = (max(r.finished_at for r in runs) - min(r.started_at for r in runs)).total_seconds()
    critical = layers * sl
    print(f"parallel efficiency, {layers} layers x {w} gates of sleep {sl} s, --max-parallel {w}:")
    print(
        f"  gates' wall time {span:.2f} s over critical path {critical:.2f} s = {span / critical:.2f}   (target <= 1.3)"
    )
    print(f"  whole drive incl. flow start and end: {total:.2f} s; sequential sum {layers * w * sl:.1f} s")


if __name__ == "__main__":
    main()
