"""Benchmark: one drive of N `true` gates by two versions of milepost, side
by side on one Prefect server.

For a change whose plain way is the code before it (issue 31 item 6: the
gate supervisor's per-job answer pipes, commit a8c11a9, against the shared
reader thread they replaced): each version is checked out from git into a
worktree of its own (``git worktree add --detach``, removed at the end) and
run with ``PYTHONPATH`` set to it, in a workspace of its own, against one
``prefect server`` on loopback. Each round drives a new item of N milestones
with `true` gates by each version in turn (the order alternates), the server
let settle between runs (until it has recorded the run's task runs, as in
bench_drive.py). Printed: the medians, the spread and the ratio.

    .venv/bin/python benchmarks/bench_versions.py --before a8c11a9^ --after a8c11a9 [--n 200] [--repeat 7]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Version:
    name: str
    rev: str
    checkout: Path
    ws: Path
    times: list[float] = field(default_factory=list)

    def env(self, api: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MILEPOST_", "PREFECT_"))}
        return {**env, "PYTHONPATH": str(self.checkout), "PREFECT_API_URL": api}

    def run(self, api: str, *args: str) -> str:
        p = subprocess.run(
            [sys.executable, "-m", "milepost", *args], cwd=self.ws, env=self.env(api), capture_output=True, text=True
        )
        if p.returncode != 0:
            raise SystemExit(f"{self.name}: milepost {' '.join(args)} -> {p.returncode}\n{p.stdout}{p.stderr}")
        return p.stdout


@contextlib.contextmanager
def worktree(rev: str, where: Path) -> Iterator[Path]:
    add = ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev]
    subprocess.run(add, check=True, capture_output=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False)


@contextlib.contextmanager
def prefect_server(home: Path, port: int = 4297) -> Iterator[str]:
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    log = open(home / "server.log", "w")  # noqa: SIM115 (held open while the server runs)
    p = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline or p.poll() is not None:
                raise SystemExit(f"the Prefect server did not start: see {home / 'server.log'}")
            time.sleep(0.3)
        yield api
    finally:
        p.terminate()
        p.wait(timeout=30)
        log.close()


def final_task_runs(api: str) -> int:
    body = {"task_runs": {"state": {"type": {"any_": ["COMPLETED", "FAILED", "CRASHED", "CANCELLED"]}}}}
    r = httpx.post(f"{api}/task_runs/count", json=body, timeout=30)
    r.raise_for_status()
    return int(r.json())


def settle(api: str, expected: int, timeout: float = 120.0, still: float = 5.0) -> int:
    """Wait until the server holds ``expected`` final task runs (or the count stood still for ``still`` s)."""
    deadline = time.monotonic() + timeout
    seen, since = final_task_runs(api), time.monotonic()
    while seen < expected and time.monotonic() < deadline and time.monotonic() - since < still:
        time.sleep(0.1)
        now = final_task_runs(api)
        if now != seen:
            seen, since = now, time.monotonic()
    return seen


def plan_text(n: int) -> str:
    lines = ["objective: versions benchmark", "milestones:"]
    lines += [f"  - {{name: m{i:04d}, gate: 'true'}}" for i in range(n)]
    return "\n".join(lines) + "\n"


def one_drive(v: Version, api: str, n: int) -> float:
    (v.ws / "plan.yaml").write_text(plan_text(n))
    item = json.loads(v.run(api, "--json", "plan", "apply", "plan.yaml"))["id"]
    t0 = time.perf_counter()
    v.run(api, "drive", str(item))
    return time.perf_counter() - t0


def spread(xs: list[float]) -> float:
    return max(xs) / statistics.median(xs)


def report(versions: list[Version], n: int) -> None:
    print(f"whole `milepost drive`, {n} milestones with `true` gates, interleaved, median of {len(versions[0].times)}:")
    for v in versions:
        med = statistics.median(v.times)
        per = med * 1000 / n
        print(f"  {v.name:<7} {v.rev:<12} {med:7.2f} s  {per:6.1f} ms/milestone  spread {spread(v.times):.2f}")
    before, after = (statistics.median(v.times) for v in versions)
    print(f"  before / after {before / after:7.2f}x   (a fast path earns its keep above 1.10)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the git revision of the plain way")
    ap.add_argument("--after", required=True, help="the git revision of the change")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mp-versions-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        versions = []
        for name, rev in (("before", args.before), ("after", args.after)):
            checkout = stack.enter_context(worktree(rev, root / f"src-{name}"))
            (root / f"ws-{name}").mkdir()
            versions.append(Version(name, rev, checkout, root / f"ws-{name}"))
        (root / "prefect").mkdir()
        api = stack.enter_context(prefect_server(root / "prefect"))
        for v in versions:
            v.run(api, "init")
            code = "import milepost.flows.loop as m; print(m.__file__)"
            cmd = [sys.executable, "-c", code]
            used = subprocess.run(cmd, cwd=v.ws, env=v.env(api), capture_output=True, text=True, check=False)
            assert used.stdout.startswith(str(v.checkout)), (v.name, used.stdout, used.stderr)  # its own code runs
        recorded = final_task_runs(api)
        for r in range(args.repeat + 1):  # the first round warms the page cache and the server: not counted
            for v in versions if r % 2 == 0 else versions[::-1]:
                took = one_drive(v, api, args.n)
                recorded = settle(api, recorded + args.n)
                if r > 0:
                    v.times.append(took)
        report(versions, args.n)


if __name__ == "__main__":
    main()
