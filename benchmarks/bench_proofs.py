"""Benchmark: what the stale check costs.

In one git workspace of F files (default 10,000), side by side in one run:

* item A: one done milestone whose inputs (``src/**``) match every file;
* item B: a scaffold-like item of M done milestones (default 100), each with
  literal inputs (its module, its test, and those of the modules below it:
  about F/M * depth paths each);
* item C: the same M milestones without inputs (the floor: no file is read).

For each, ``milepost --json list --item N`` as a whole process (medians of R,
interleaved), and ``Service.milestone_views`` in this process (medians of S),
with the stat cache warm; plus the cold check (no stat cache: every file
hashed) once. Target (issue 16): with a warm cache, the stale check on the
10,000-file item costs at most as much again as the same command on an item
without inputs (ratio A/C <= 2.0).

    .venv/bin/python benchmarks/bench_proofs.py [--files 10000] [--milestones 100] [--repeat 7] [--samples 15]
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

from milepost.gates.inputs import CACHE_FILE
from milepost.planfile import parse_plan
from milepost.service import Service
from milepost.store import Store
from milepost.workspace import init_workspace


def make_tree(root: Path, files: int, modules: int) -> None:
    per = max(1, files // modules)
    for m in range(modules):
        folder = root / "src" / f"mod{m:03d}"
        folder.mkdir(parents=True)
        for i in range(per):
            (folder / f"f{i:04d}.py").write_text(f"# module {m} file {i}\n" + "x = 1\n" * 20)
    subprocess.run(["git", "-C", str(root), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "tree"], check=True
    )


def plans(root: Path, modules: int) -> tuple[str, str, str]:
    whole = "objective: A\nmilestones:\n  - {name: all, gate: 'true', inputs: ['src/**']}\n"
    lines_b = ["objective: B", "milestones:"]
    lines_c = ["objective: C", "milestones:"]
    for m in range(modules):
        dep = f", deps: [m{m - 1}]" if m else ""
        below = [f"src/mod{k:03d}/" for k in range(max(0, m - 4), m + 1)]  # itself and up to 4 below it
        lines_b.append(f"  - {{name: m{m}, gate: 'true'{dep}, inputs: [{', '.join(below)}]}}")
        lines_c.append(f"  - {{name: m{m}, gate: 'true'{dep}}}")
    return whole, "\n".join(lines_b) + "\n", "\n".join(lines_c) + "\n"


def finish_all(svc: Service, item: int) -> None:
    for m in svc.get_item(item).milestones:
        svc.start(m.name, item=item)
        assert svc.done(m.name, item=item).passed


def cli_ms(root: Path, item: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "milepost", "--json", "list", "--item", str(item)],
        cwd=root,
        check=True,
        capture_output=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_")},
    )
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--milestones", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--samples", type=int, default=15)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="milepost-bench-proofs-"))
    try:
        root = base / "ws"
        root.mkdir()
        t0 = time.perf_counter()
        make_tree(root, args.files, args.milestones)
        print(f"workspace: {args.files} files in {args.milestones} folders, git ({time.perf_counter() - t0:.1f} s)")
        ws = init_workspace(root)
        svc = Service(Store.open(ws.url, ws.home, ws.root, create=True))
        ids = {}
        for label, text in zip("ABC", plans(root, args.milestones), strict=True):
            ids[label] = svc.apply_plan(parse_plan(text)).id
            finish_all(svc, ids[label])
        # Cold: no stat cache, every input file hashed.
        cache = root / ".milepost" / CACHE_FILE
        cache.unlink(missing_ok=True)
        t0 = time.perf_counter()
        views = svc.milestone_views(ids["A"])[1]
        cold = (time.perf_counter() - t0) * 1000
        assert all(v.view == "done" for v in views), [v.view for v in views]
        # Let the files settle past the racy window so the cache keeps them.
        time.sleep(2.5)
        svc.milestone_views(ids["A"])
        svc.milestone_views(ids["B"])
        inproc: dict[str, list[float]] = {k: [] for k in ids}
        for _ in range(args.samples):
            for label, item in ids.items():
                t0 = time.perf_counter()
                svc.milestone_views(item)
                inproc[label].append((time.perf_counter() - t0) * 1000)
        whole: dict[str, list[float]] = {k: [] for k in ids}
        for _ in range(args.repeat):
            for label, item in ids.items():
                whole[label].append(cli_ms(root, item))
        svc.close()
        med = {k: statistics.median(v) for k, v in inproc.items()}
        wmed = {k: statistics.median(v) for k, v in whole.items()}
        print(f"cold check of item A (every file hashed): {cold:.0f} ms")
        print(f"in process, Service.milestone_views (median of {args.samples}):")
        print(f"  A  1 milestone x {args.files} files      {med['A']:7.1f} ms")
        print(f"  B  {args.milestones} milestones, literal inputs  {med['B']:7.1f} ms")
        print(f"  C  {args.milestones} milestones, no inputs       {med['C']:7.1f} ms")
        print(f"whole process, milepost --json list (median of {args.repeat}, interleaved):")
        print(f"  A  {wmed['A']:7.1f} ms   ratio A/C {wmed['A'] / wmed['C']:.2f} (target <= 2.0)")
        print(f"  B  {wmed['B']:7.1f} ms   ratio B/C {wmed['B'] / wmed['C']:.2f}")
        print(f"  C  {wmed['C']:7.1f} ms")
        spread = max(whole["A"]) / wmed["A"]
        print(f"spread of A: slowest {spread:.2f}x its median")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
