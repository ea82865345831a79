"""Benchmark: the store's write path at scale, and the CLI's start-up.

Side by side in one run, on one SQLite file (WAL, ``synchronous=NORMAL``, as
milepost opens it):

* ``start`` and a gate-less ``done`` through the service, on items of 20,
  1,000, 10,000 and 100,000 milestones (median of S transitions each);
* the same change written as plain ``sqlite3`` statements on the same file:
  lock the item (``BEGIN IMMEDIATE``), read the milestone and its deps'
  statuses (a start must check them), update the milestone, append one
  event, bump the revision;
* ``apply_plan`` of the largest item (one run);
* ``milepost --json next`` as a subprocess against the import floor
  ``python -c "import sqlalchemy, pydantic, networkx"`` (medians of R,
  interleaved).

Targets: a transition under 1 ms, within 2x between 20 and 100,000
milestones, and at most 3x the plain statements; the CLI no slower than its imports.

    .venv/bin/python benchmarks/bench_store.py [--sizes 20,1000,10000,100000] [--samples 100] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from milepost.graph.models import Milestone
from milepost.service import Service
from milepost.store import Store
from milepost.workspace import init_workspace

# Milestones with no deps (startable at once) lead every item; the rest
# depend on up to three earlier ones, like a real plan's layers.
READY = 200


def plan(n: int) -> list[Milestone]:
    out = []
    for i in range(n):
        deps = [] if i < min(READY, n) else sorted({f"m{i - 1 - k * 37 % i}" for k in range(1 + i % 3)})
        out.append(Milestone(id=i + 1, name=f"m{i}", deps=deps, acceptance=f"step {i}"))
    return out


def plain_start(con: sqlite3.Connection, item: int, name: str) -> None:
    """``start`` as plain statements: the same rows read and written."""
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(" ")
    con.execute("BEGIN IMMEDIATE")
    rev, state = con.execute("SELECT revision, state FROM work_items WHERE id = ?", (item,)).fetchone()
    pk, status = con.execute(
        "SELECT id, status FROM milestones WHERE item_id = ? AND name = ?", (item, name)
    ).fetchone()
    undone = con.execute(
        "SELECT m.name FROM milestone_deps d JOIN milestones m ON m.id = d.dep_id"
        " WHERE d.milestone_id = ? AND m.status != 'done'",
        (pk,),
    ).fetchall()
    assert state == "open" and status == "pending" and not undone
    con.execute("UPDATE milestones SET status = 'in_progress', updated_at = ? WHERE id = ?", (now, pk))
    con.execute(
        "INSERT INTO events (item_id, milestone, action, from_status, to_status, agent, revision, at)"
        " VALUES (?, ?, 'start', 'pending', 'in_progress', 'bench', ?, ?)",
        (item, name, rev + 1, now),
    )
    n = con.execute(
        "UPDATE work_items SET revision = ?, updated_at = ? WHERE id = ? AND revision = ?", (rev + 1, now, item, rev)
    ).rowcount
    assert n == 1
    con.execute("COMMIT")


def ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def transitions(svc: Service, sizes: list[int], samples: int, db: Path) -> dict[int, tuple[float, float, float]]:
    out = {}
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA synchronous = NORMAL")
    con.execute("PRAGMA busy_timeout = 5000")
    # Warm both paths (statements compiled, modules loaded) on an item of their own.
    warm = svc.create_item("warm-up", milestones=plan(20)).id
    for i in range(5):
        svc.start(f"m{i}", item=warm)
        svc.done(f"m{i}", item=warm)
        plain_start(con, warm, f"m{10 + i}")
    for n in sizes:
        # Half of an item's ready milestones go to the service, half to the plain
        # statements; small items come in as many copies as the samples need.
        per_item = min(READY, n) // 2
        items = [svc.create_item(f"bench {n}", milestones=plan(n)).id for _ in range(-(-samples // per_item))]
        starts, dones, plains = [], [], []
        for k in range(samples):
            item, i = items[k // per_item], k % per_item
            name = f"m{i}"
            t0 = time.perf_counter()
            svc.start(name, item=item)
            t1 = time.perf_counter()
            svc.done(name, item=item)
            t2 = time.perf_counter()
            plain_start(con, item, f"m{per_item + i}")
            t3 = time.perf_counter()
            starts.append(t1 - t0)
            dones.append(t2 - t1)
            plains.append(t3 - t2)
        out[n] = (ms(starts), ms(dones), ms(plains))
        print(
            f"  {n:>7} milestones   start {ms(starts):6.3f}   done {ms(dones):6.3f}   plain {ms(plains):6.3f}"
            f"   start / plain {ms(starts) / ms(plains):5.1f}x   ({samples} each)",
            flush=True,
        )
    con.close()
    return out


def startup(ws_root: Path, repeat: int) -> tuple[float, float]:
    exe = Path(sys.executable)
    cli = [str(exe.parent / "milepost"), "--json", "next"]
    floor = [str(exe), "-c", "import sqlalchemy, pydantic, networkx"]
    env = {**os.environ, "MILEPOST_DB": ""}
    env.pop("MILEPOST_DB")
    a, b = [], []
    for _ in range(repeat):
        for cmd, acc in ((cli, a), (floor, b)):
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=ws_root, env=env, check=True, stdout=subprocess.DEVNULL)
            acc.append(time.perf_counter() - t0)
    return ms(a), ms(b)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="20,1000,10000,100000")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    root = Path(tempfile.mkdtemp(prefix="milepost-bench-store-"))
    ws = init_workspace(root)
    svc = Service(Store.open(ws.url, ws.home, ws.root, create=True), "bench")
    db = ws.home / "milepost.db"

    print("transitions on one SQLite file, median ms (start, gate-less done, the same start as plain sqlite3):")
    res = transitions(svc, sizes, args.samples, db)
    lo, hi = res[sizes[0]], res[sizes[-1]]
    worst = max(max(s, d) for s, d, _ in res.values())
    print(f"  slowest transition {worst:.3f} ms   (target < 1 ms)")
    flat = f"start {hi[0] / lo[0]:.2f}x, done {hi[1] / lo[1]:.2f}x"
    print(f"  {sizes[-1]} vs {sizes[0]} milestones: {flat}   (target <= 2x)")
    print(f"  start vs plain statements at {sizes[-1]}: {hi[0] / hi[2]:.1f}x   (target <= 3x)")

    big = sizes[-1]
    ms_big = plan(big)
    t0 = time.perf_counter()
    svc.create_item("apply", milestones=ms_big)
    print(f"apply_plan of {big} milestones: {time.perf_counter() - t0:.2f} s")
    svc.close()

    # A small item is the current one: what `next` reads is what a person's plan holds.
    small = Service.open(cwd=root)
    small.create_item("startup", milestones=plan(20))
    small.close()
    cli, floor = startup(root, args.repeat)
    print(f"CLI start-up, median of {args.repeat} (ms):")
    print(f"  milepost --json next                              {cli:7.1f}")
    print(f"  python -c 'import sqlalchemy, pydantic, networkx' {floor:7.1f}")
    print(f"  ratio {cli / floor:.2f}   (target <= 1.0)")


if __name__ == "__main__":
    main()
