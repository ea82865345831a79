"""Benchmark: the sealed judge's overhead per doer attempt, beside the gate alone (issue 38).

On a real package nobody here wrote (``--repo``: a clone of
pallets/itsdangerous, ``src/`` layout), installed editable in a shared
virtualenv made here, a scripted doer makes a real small refactor of
``itsdangerous.encoding.want_bytes`` (a conditional expression): attempt 1
is wrong (it encodes bytes and passes str through), attempt 2 is the fix.
Each round, on the attempt's branch in its own worktree (gates/worktrees.py),
for each attempt:

* **judge**: the judge's checkout of the committed result made
  (``open_judge``: a detached worktree of the pool, cleaned, protected
  ``tests/**`` restored, its set-up ``python -m compileall -q src`` reused
  while ``pyproject.toml`` and ``uv.lock`` are unchanged) and the import
  rule applied (``import_rule``: the gate's python asked where
  ``itsdangerous`` resolves);
* **gate**: the plain gate ``python -m pytest -q -p no:cacheprovider tests``
  run in the judge's checkout (the judge's verdict), and for comparison in
  the doer's worktree as before the judge (where the editable install makes
  it test the workspace's copy: the wrong attempt passes there).

Printed: the medians per attempt, side by side, and each attempt's verdicts.
Needs ``flit_core`` and ``freezegun`` (installed into the shared venv from the
configured package index) and git.

    python benchmarks/bench_judge.py --repo /tmp/itsdangerous [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from milepost.gates import judge, worktrees
from milepost.gates.git import Repo
from milepost.graph.models import GateCommand

ORIGINAL = 'def want_bytes(\n    s: str | bytes, encoding: str = "utf-8", errors: str = "strict"\n) -> bytes:\n    if isinstance(s, str):\n        s = s.encode(encoding, errors)\n\n    return s\n'  # noqa: E501
_HEAD = ORIGINAL.split(") -> bytes:\n")[0] + ") -> bytes:\n"
WRONG = _HEAD + "    return s.encode(encoding, errors) if isinstance(s, bytes) else s  # type: ignore\n"
FIXED = _HEAD + "    return s.encode(encoding, errors) if isinstance(s, str) else s\n"
GATE = "python -m pytest -q -p no:cacheprovider -x tests"


def sh(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    return subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def shared_venv(where: Path, ws: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = sh(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    (Path(site) / "_outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # pytest, pip
    sh(str(python), "-m", "pip", "install", "-q", "flit_core", "freezegun")
    sh(str(python), "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", str(ws))
    return python


def gate(cwd: Path, env: dict[str, str]) -> tuple[float, bool]:
    t0 = time.monotonic()
    done = subprocess.run(["/bin/sh", "-c", GATE], cwd=cwd, env=env, capture_output=True, check=False)
    return time.monotonic() - t0, done.returncode == 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", type=Path, required=True, help="a clone of pallets/itsdangerous")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-judge-"))
    ws = tmp / "ws"
    sh("git", "clone", "-q", str(a.repo), str(ws))
    sh("git", "-C", str(ws), "config", "user.email", "bench@example.com")
    sh("git", "-C", str(ws), "config", "user.name", "bench")
    target = ws / "src" / "itsdangerous" / "encoding.py"
    assert ORIGINAL in target.read_text(), "want_bytes is not as this benchmark expects"
    python = shared_venv(tmp / "venv", ws)
    env = {**os.environ, "PATH": f"{python.parent}:{os.environ['PATH']}"}
    repo = Repo.find(ws)
    assert repo is not None
    tip = repo.tip("HEAD")
    wts = worktrees.Worktrees(repo)
    wt_path = tmp / "worktrees" / "item-1" / "refactor"
    setup = judge.SetupSpec("python -m compileall -q src", ("pyproject.toml", "uv.lock"))
    scrubbed = judge.judge_env(env, [], {})
    rows: dict[str, list[float]] = {"judge (checkout + set-up + import rule)": [], "gate in the judge": []}
    rows["gate in the doer's worktree (before)"] = []
    verdicts: list[str] = []
    first_setup = 0.0
    for rnd in range(a.rounds):
        wt = wts.reset_branch(wt_path, "milepost/1/refactor", tip)
        for attempt, text in ((1, WRONG), (2, FIXED)):
            f = wt.path / "src" / "itsdangerous" / "encoding.py"  # the scripted doer's edit
            f.write_text(f.read_text().replace(ORIGINAL if attempt == 1 else WRONG, text))
            commit = wt.commit_all(f"refactor, attempt {attempt}")
            assert commit is not None
            t0 = time.monotonic()
            j = judge.open_judge(
                ws, judge.judge_folder(wt.path), commit, tip, ["tests/**"], setup, scrubbed, tmp / "setup.log"
            )
            rule = judge.import_rule(j.path, ["itsdangerous"], [GateCommand(run=GATE)], scrubbed)
            took = time.monotonic() - t0
            assert rule.refusal is None, rule.refusal
            if j.setup_ran:
                first_setup = took
            else:
                rows["judge (checkout + set-up + import rule)"].append(took)
            g, ok = gate(j.path, {**scrubbed, **rule.env})
            j.release()
            rows["gate in the judge"].append(g)
            b, before = gate(wt.path, env)
            rows["gate in the doer's worktree (before)"].append(b)
            verdicts.append(f"round {rnd + 1} attempt {attempt}: judge {'pass' if ok else 'FAIL'}, "
                            f"doer's worktree {'pass' if before else 'FAIL'}")  # fmt: skip
    print(f"itsdangerous {sh('git', '-C', str(ws), 'rev-parse', '--short', 'HEAD').strip()}, "
          f"{a.rounds} rounds x 2 attempts, medians (s):")  # fmt: skip
    print(f"  first judge, set-up run:{first_setup:>33.3f}")
    for name, values in rows.items():
        print(f"  {name:<55} {statistics.median(values):.3f}  (n={len(values)})")
    for v in verdicts[:2]:
        print(f"  {v}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
