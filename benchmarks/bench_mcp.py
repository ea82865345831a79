"""Benchmark: a tool call's round trip through ``milepost mcp``.

Starts the MCP server as a subprocess (the official SDK's stdio client, as an
agent client would), on a SQLite store holding one item of N milestones (a
random DAG, a tenth of them done), and times tool calls: ``milestone next``,
``milestone list`` and ``graph``. Prints the median and the 90th percentile
of each, and the server's start-up (spawn, import, initialize) once.

    .venv/bin/python benchmarks/bench_mcp.py [--sizes 100,1000] [--calls 50]

Target: ``next`` under 20 ms (median) on a 1,000-milestone item.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).parent))
from bench_graph import random_dag


def make_store(folder: Path, n: int) -> None:
    subprocess.run([sys.executable, "-m", "milepost", "init"], cwd=folder, check=True, capture_output=True)
    plan = {
        "objective": f"{n} milestones",
        "milestones": [{"name": m.name, "deps": m.deps, "gate": "true"} for m in random_dag(n)],
    }
    (folder / "plan.json").write_text(json.dumps(plan))
    subprocess.run(
        [sys.executable, "-m", "milepost", "plan", "apply", "plan.json"], cwd=folder, check=True, capture_output=True
    )


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def measure(folder: Path, calls: int) -> dict[str, object]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "milepost", "mcp"], cwd=str(folder))
    t0 = time.perf_counter()
    out: dict[str, object] = {}
    with open(folder / "mcp.log", "w") as log:
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            out["startup"] = time.perf_counter() - t0
            # Work a tenth of the item first, so `next` has history to look past.
            for _ in range(max(1, calls // 10)):
                nxt = json.loads((await s.call_tool("milestone", {"action": "next"})).content[0].text)["next"]
                await s.call_tool("milestone", {"action": "start", "name": nxt["name"]})
                await s.call_tool("milestone", {"action": "done", "name": nxt["name"]})
            for label, tool, args in (
                ("next", "milestone", {"action": "next"}),
                ("list", "milestone", {"action": "list"}),
                ("graph", "graph", {}),
            ):
                times = []
                for _ in range(calls):
                    t = time.perf_counter()
                    r = await s.call_tool(tool, args)
                    times.append(time.perf_counter() - t)
                    assert not r.is_error, r.content
                out[label] = times
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    print(f"{'milestones':>10}  {'start s':>7}  {'call':>5}  {'median ms':>9}  {'p90 ms':>7}")
    for n in (int(x) for x in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            make_store(folder, n)
            res = anyio.run(measure, folder, args.calls)
        for label in ("next", "list", "graph"):
            times = res[label]
            assert isinstance(times, list)
            start = f"{res['startup']:.2f}" if label == "next" else ""
            median, p90 = statistics.median(times) * 1e3, pct(times, 0.9) * 1e3
            print(f"{n:>10}  {start:>7}  {label:>5}  {median:>9.1f}  {p90:>7.1f}")


if __name__ == "__main__":
    main()
