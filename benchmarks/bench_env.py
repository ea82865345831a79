"""Benchmark: what an ``env:`` input costs (issue 38, part 6).

A real virtualenv (``python -m venv --without-pip``) whose site-packages
holds D distributions (default 300 ``*.dist-info`` folders, as a large
project's development environment has), inside a workspace, and the
fingerprint of one ``env:.venv/bin/python`` entry taken four ways:

* cold: no ``.milepost/cache/envs.json``: the interpreter is asked (a
  subprocess) and every folder of its path read;
* stat path, new process: the cache file is read and each folder stat'ed,
  nothing else (what ``milepost list`` pays per process);
* stat path, same snapshot set-up: a fresh :class:`Snapshot` in this process
  with the cache file warm (what each gate's fingerprint pays);
* full scan: a distribution added (site-packages' stat moved): that folder
  read again, no subprocess.

Medians of R runs each.

    .venv/bin/python benchmarks/bench_env.py [--dists 300] [--repeat 9]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from milepost.gates.inputs import Snapshot
from milepost.gates.pyenv import ENV_CACHE_FILE

ENTRY = "env:.venv/bin/python"


def make_env(root: Path, dists: int) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / ".venv")], check=True)
    py = root / ".venv" / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    for i in range(dists):
        info = Path(site) / f"dist_{i:04d}-1.{i}.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: dist-{i:04d}\nVersion: 1.{i}.0\n")
    return Path(site)


def once(root: Path) -> tuple[float, int, int, int]:
    t0 = time.perf_counter()
    snap = Snapshot(root)
    fp = snap.fingerprint([ENTRY], "bench")
    snap.save()
    took = time.perf_counter() - t0
    return took, len(fp.files), snap.envs.probes, snap.envs.scans


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dists", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="milepost-bench-env-"))
    try:
        root = tmp / "ws"
        (root / ".milepost").mkdir(parents=True)
        site = make_env(root, args.dists)
        time.sleep(2.1)  # past the racy window: a folder changed within 2 s is read every time
        cache = root / ".milepost" / ENV_CACHE_FILE
        cold, warm, scan = [], [], []
        keys = probes = scans = 0
        for i in range(args.repeat):
            cache.unlink(missing_ok=True)
            took, keys, probes, _ = once(root)
            cold.append(took)
            took, _, p, s = once(root)
            assert p == 0 and s == 0, (p, s)
            warm.append(took)
            (site / f"extra_{i}-1.0.dist-info").mkdir()  # a distribution added: site-packages' stat moves
            took, _, p, scans = once(root)
            assert p == 0, p
            scan.append(took)
            time.sleep(2.1)  # settled (its ctime too): the next runs find it in the cache
        proc = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"from bench_env import once; from pathlib import Path; once(Path({str(root)!r}))",
                ],
                check=True,
                cwd=Path(__file__).parent,
            )
            proc.append(time.perf_counter() - t0)
        base = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import milepost.gates.inputs"], check=True)
            base.append(time.perf_counter() - t0)
        ms = lambda xs: f"{statistics.median(xs) * 1000:.1f} ms"  # noqa: E731
        print(f"env entry: {args.dists} distributions (+ one added per run), {keys} keys in the fingerprint")
        print(f"cold (interpreter asked, every folder read, {probes} probe): {ms(cold)}")
        print(f"stat path (cache file warm, {args.repeat} runs): {ms(warm)}")
        print(f"full scan of the changed folder ({scans} folder read, no probe): {ms(scan)}")
        print(
            f"whole process, stat path: {ms(proc)} (the same process importing milepost.gates.inputs only: {ms(base)})"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
