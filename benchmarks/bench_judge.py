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

    python benchmarks/bench_judge.py [--repo /tmp/itsdangerous] [--rounds 5]
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
from dataclasses import dataclass, field
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


@dataclass
class Bench:
    """One run: the workspace, its venv's environment, what is measured."""

    tmp: Path
    ws: Path
    env: dict[str, str]
    tip: str
    rows: dict[str, list[float]] = field(
        default_factory=lambda: {
            "judge (checkout + set-up + import rule)": [],
            "  of which the checkout (set-up reused)": [],
            "  of which the import rule (one python asked)": [],
            "gate in the judge": [],
            "gate in the doer's worktree (before)": [],
        }
    )
    verdicts: list[str] = field(default_factory=list)
    first_setup: float = 0.0

    def attempt(self, wt: worktrees.Worktree, attempt: int, text: str) -> None:
        """The scripted doer's edit committed, then the judge made and the gate run there and in the worktree."""
        f = wt.path / "src" / "itsdangerous" / "encoding.py"
        f.write_text(f.read_text().replace(ORIGINAL if attempt == 1 else WRONG, text))
        commit = wt.commit_all(f"refactor, attempt {attempt}")
        assert commit is not None
        scrubbed = judge.judge_env(self.env, [], {})
        setup = judge.SetupSpec("python -m compileall -q src", ("pyproject.toml", "uv.lock"))
        t0 = time.monotonic()
        folder = judge.judge_folder(wt.path)
        j = judge.open_judge(self.ws, folder, commit, self.tip, ["tests/**"], setup, scrubbed, self.tmp / "setup.log")
        t1 = time.monotonic()
        rule = judge.import_rule(j.path, ["itsdangerous"], [GateCommand(run=GATE)], scrubbed)
        t2 = time.monotonic()
        assert rule.refusal is None, rule.refusal
        if j.setup_ran:
            self.first_setup = t2 - t0
        else:
            self.rows["judge (checkout + set-up + import rule)"].append(t2 - t0)
            self.rows["  of which the checkout (set-up reused)"].append(t1 - t0)
            self.rows["  of which the import rule (one python asked)"].append(t2 - t1)
        g, ok = gate(j.path, {**scrubbed, **rule.env})
        j.release()
        self.rows["gate in the judge"].append(g)
        b, before = gate(wt.path, self.env)
        self.rows["gate in the doer's worktree (before)"].append(b)
        self.verdicts.append(
            f"attempt {attempt}: judge {'pass' if ok else 'FAIL'}, doer's worktree {'pass' if before else 'FAIL'}"
        )


def _from_sdist(base: Path) -> Path:
    """itsdangerous's sdist from the package index (it ships its tests), as a git repository."""
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "itsdangerous"]
    sh(*pip, "-d", str(base))
    shutil.unpack_archive(next(base.glob("itsdangerous-*.tar.gz")), base)
    repo = next(d for d in base.glob("itsdangerous-*") if d.is_dir())
    sh("git", "-C", str(repo), "init", "-q", "-b", "main")
    sh("git", "-C", str(repo), "add", "-A")
    sh("git", "-C", str(repo), "-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "itsdangerous")
    return repo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", type=Path, help="a clone of pallets/itsdangerous (default: its sdist from PyPI)")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-judge-"))
    if a.repo is None:
        a.repo = _from_sdist(tmp / "sdist")
    ws = tmp / "ws"
    sh("git", "clone", "-q", str(a.repo), str(ws))
    sh("git", "-C", str(ws), "config", "user.email", "bench@example.com")
    sh("git", "-C", str(ws), "config", "user.name", "bench")
    assert ORIGINAL in (ws / "src" / "itsdangerous" / "encoding.py").read_text(), "want_bytes is not as expected"
    python = shared_venv(tmp / "venv", ws)
    repo = Repo.find(ws)
    assert repo is not None
    bench = Bench(tmp, ws, {**os.environ, "PATH": f"{python.parent}:{os.environ['PATH']}"}, repo.tip("HEAD"))
    wts = worktrees.Worktrees(repo)
    for _ in range(a.rounds):
        wt = wts.reset_branch(tmp / "worktrees" / "item-1" / "refactor", "milepost/1/refactor", bench.tip)
        bench.attempt(wt, 1, WRONG)
        bench.attempt(wt, 2, FIXED)
    head = sh("git", "-C", str(ws), "rev-parse", "--short", "HEAD").strip()
    print(f"itsdangerous {head}, {a.rounds} rounds x 2 attempts, medians (s):")
    print(f"  {'first judge, its set-up run':<55} {bench.first_setup:.3f}")
    for name, values in bench.rows.items():
        print(f"  {name:<55} {statistics.median(values):.3f}  (n={len(values)})")
    for v in bench.verdicts[:2]:
        print(f"  {v}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
