"""Benchmark: applying a large YAML plan file, and where the time goes.

A plan of N milestones (default 100,000; each with a gate, an acceptance
text and up to three deps, like bench_store's items) is written as YAML, then,
in one run, R times each (medians):

* the phases in this process, each on a fresh SQLite store: reading the
  text as data (by the plain block reader, which ``plan apply`` uses for a
  plan in that form; and, for comparison, by libyaml composing the nodes and
  building the data from them, the path of any other YAML), validating (the plan's models, then the whole milestone
  set: names, deps, cycles), and ``Service.apply_plan`` (which writes it
  and returns the item it wrote);
* the whole command, ``milepost plan apply FILE``, as a subprocess in a fresh
  workspace (start-up included).

Target: the whole command under 5 s for 100,000 milestones.

With ``--plain-ways`` it also measures, side by side in the same run, each
fast path against the plain library way it stands in for
(``benchmarks/plain_ways.py``): the plain block reader against PyYAML's C
loader (``yaml.load(text, Loader=CSafeLoader)``), the service's prepared
statements against ``Connection.execute``: ``Service.apply_plan`` in this
process and the whole command with each swapped in, and with both.
A fast path earns its keep where the whole command moves by more than 10%
(issue 31).

    .venv/bin/python benchmarks/bench_plan.py [--milestones 100000] [--repeat 3] [--plain-ways]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plain_ways

from milepost.graph.plan import Plan
from milepost.plainyaml import read_plain
from milepost.plandoc import build, compose
from milepost.planfile import gc_paused
from milepost.service import Service
from milepost.store import Store
from milepost.workspace import init_workspace

TARGET_S = 5.0


def plan_text(n: int) -> str:
    out = [f"objective: {n} milestones", "milestones:"]
    for i in range(n):
        out.append(f"  - name: m{i}")
        if i >= 200:
            deps = sorted({f"m{i - 1 - k * 37 % i}" for k in range(1 + i % 3)})
            out.append(f"    deps: [{', '.join(deps)}]")
        out.append(f"    acceptance: step {i} works")
        out.append(f"    gate: python3 -m compileall -q src/m{i}.py")
    return "\n".join(out) + "\n"


def phases(path: Path, plain: bool = False) -> dict[str, float]:
    t: dict[str, float] = {}
    root = Path(tempfile.mkdtemp(prefix="milepost-bench-plan-"))
    ws = init_workspace(root)
    svc = Service(Store.open(ws.url, ws.home, ws.root, create=True), "bench")
    with gc_paused():  # as parse_plan and `plan apply` do
        t0 = time.perf_counter()
        text = path.read_text(encoding="utf-8")
        t1 = time.perf_counter()
        node = compose(text)
        assert node is not None
        built = build(node)
        t2 = time.perf_counter()
        t_lib = t2 - t1
        del node, built
        if plain:
            t_c = time.perf_counter()
            yaml.load(text, Loader=yaml.CSafeLoader)
            t["(PyYAML's C loader, plain way)"] = time.perf_counter() - t_c
        t2 = time.perf_counter()
        data = read_plain(text)
        t3 = time.perf_counter()
        assert data is not None, "the plan is in the plain block form"
        plan = Plan.model_validate(data)
        t4 = time.perf_counter()
        plan.check()  # as parse_plan does: apply_plan takes what it validated
        t5 = time.perf_counter()
        svc.apply_plan(plan)
        t6 = time.perf_counter()
    svc.close()
    if plain:  # the same plan written with the plain ways, each on a fresh store
        for ways in (("prepared",),):
            undo = plain_ways.use(ways)
            try:
                t[f"(apply_plan, plain {'+'.join(ways)})"] = _apply_only(plan)
            finally:
                undo()
    del text, data, plan
    gc.collect()
    t["read the file"] = t1 - t0
    t["(libyaml, not used)"] = t_lib
    t["read the plain form"] = t3 - t2
    t["plan models"] = t4 - t3
    t["validate the set"] = t5 - t4
    t["Service.apply_plan"] = t6 - t5
    t["in-process total"] = t1 - t0 + t6 - t2
    return t


def _apply_only(plan: Plan) -> float:
    root = Path(tempfile.mkdtemp(prefix="milepost-bench-plan-"))
    ws = init_workspace(root)
    svc = Service(Store.open(ws.url, ws.home, ws.root, create=True), "bench")
    with gc_paused():
        t0 = time.perf_counter()
        svc.apply_plan(plan)
        took = time.perf_counter() - t0
    svc.close()
    return took


def whole_command(path: Path, ways: str | None = None) -> float:
    """``milepost plan apply`` in a fresh workspace; with ``ways``, through
    plain_ways.py with those plain ways (``none``: the same launcher, no swap)."""
    exe = Path(sys.executable).parent / "milepost"
    root = Path(tempfile.mkdtemp(prefix="milepost-bench-plan-cli-"))
    subprocess.run([str(exe), "init"], cwd=root, check=True, stdout=subprocess.DEVNULL)
    cmd = [str(exe)] if ways is None else [sys.executable, plain_ways.__file__, ways, "--"]
    t0 = time.perf_counter()
    subprocess.run([*cmd, "plan", "apply", str(path)], cwd=root, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


PLAIN_COMMANDS = ("none", "yaml", "prepared", "yaml,prepared")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--milestones", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--plain-ways", action="store_true", help="each fast path against the plain library way")
    args = ap.parse_args()
    n = args.milestones
    path = Path(tempfile.mkdtemp(prefix="milepost-bench-plan-file-")) / "plan.yaml"
    path.write_text(plan_text(n))
    size = path.stat().st_size / 1e6
    print(f"plan apply of a {n}-milestone YAML plan ({size:.1f} MB), medians of {args.repeat}:")
    samples: dict[str, list[float]] = {}
    whole: list[float] = []
    by_ways: dict[str, list[float]] = {w: [] for w in PLAIN_COMMANDS}
    whole_command(path)  # warm the page cache
    for _ in range(args.repeat):  # interleaved, so both see the same machine
        for phase, secs in phases(path, args.plain_ways).items():
            samples.setdefault(phase, []).append(secs)
        whole.append(whole_command(path))
        if args.plain_ways:
            for ways in PLAIN_COMMANDS:
                by_ways[ways].append(whole_command(path, ways))
    total = statistics.median(samples["in-process total"])
    for phase, xs in samples.items():
        med = statistics.median(xs)
        share = "" if phase == "in-process total" or phase.startswith("(") else f"   {100 * med / total:4.0f}%"
        against = {
            "(PyYAML": "read the plain form",
            "(libyaml": "read the plain form",
            "(apply_plan": "Service.apply_plan",
        }
        fast = next((v for k, v in against.items() if phase.startswith(k)), None)
        if fast is not None and fast in samples:
            share = f"   {med / statistics.median(samples[fast]):5.2f}x {fast}"
        print(f"  {phase:<36} {med:7.2f} s{share}")
    med = statistics.median(whole)
    verdict = "met" if med < TARGET_S else "MISSED"
    print(f"  {'milepost plan apply':<22} {med:7.2f} s   (whole command; target < {TARGET_S:g} s: {verdict})")
    if args.plain_ways:
        base = statistics.median(by_ways["none"])
        print("  the whole command through plain_ways.py, fast paths against the plain ways (plain / fast):")
        for ways, xs in by_ways.items():
            m = statistics.median(xs)
            label = "fast paths (no swap)" if ways == "none" else f"plain {ways}"
            print(f"    {label:<28} {m:7.2f} s   {m / base:5.2f}x")


if __name__ == "__main__":
    main()
