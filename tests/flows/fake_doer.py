"""A deterministic fake coding agent for the doer tests (and the example):
``python3 fake_doer.py SCENARIO.json [RECORD.jsonl]``.

SCENARIO maps ``milestone#attempt`` (or ``milestone``, for every attempt)
to a step: ``wait_for`` a file matching a glob pattern first (up to 60 s), ``say`` text (printed),
``write`` {path: text}, ``append`` {path: text}, ``delete`` [paths], ``cost`` {"usd": .., "tokens": ..},
``sleep`` seconds (after a ``touch`` path, if given), ``rm_worktree`` true, ``exit`` code. Each run appends
what it was given (its environment's MILEPOST_ and secret-looking variables, its pid, its folder, its prompt,
the failure log) to RECORD.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _wait_for(pattern: str) -> None:
    deadline = time.monotonic() + 60
    while not glob.glob(pattern, recursive=True) and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> int:
    scenario = json.loads(Path(sys.argv[1]).read_text())
    name, attempt = os.environ["MILEPOST_MILESTONE"], os.environ["MILEPOST_ATTEMPT"]
    step = scenario.get(f"{name}#{attempt}", scenario.get(name, {}))
    here = Path.cwd()
    if len(sys.argv) > 2:
        seen = {
            "key": f"{name}#{attempt}",
            "pid": os.getpid(),
            "env": {k: v for k, v in os.environ.items() if k.startswith(("MILEPOST_", "PREFECT_", "SECRET", "DOER_"))},
            "cwd": str(here),
            "files": sorted(str(p.relative_to(here)) for p in here.rglob("*.py")),
            "prompt": Path(os.environ["MILEPOST_PROMPT"]).read_text(),
        }
        if "MILEPOST_FAILURE_LOG" in os.environ:
            seen["failure"] = Path(os.environ["MILEPOST_FAILURE_LOG"]).read_text(errors="replace")
        with open(sys.argv[2], "a") as out:
            out.write(json.dumps(seen) + "\n")
    if "wait_for" in step:
        _wait_for(step["wait_for"])
    if "say" in step:
        print(step["say"], flush=True)
    for path, text in step.get("write", {}).items():
        (here / path).parent.mkdir(parents=True, exist_ok=True)
        (here / path).write_text(text)
    for path, text in step.get("append", {}).items():
        with open(here / path, "a") as f:
            f.write(text)
    for path in step.get("delete", []):
        (here / path).unlink()
    if step.get("commit"):  # an agent that commits its own work (git add -A; git commit)
        subprocess.run(["git", "add", "-A"], cwd=here, check=True)
        who = ["-c", "user.email=agent@example.com", "-c", "user.name=agent"]
        subprocess.run(["git", *who, "commit", "-qm", "agent's own commit"], cwd=here, check=True)
    if "cost" in step:
        Path(os.environ["MILEPOST_COST_FILE"]).write_text(json.dumps(step["cost"]))
    if "touch" in step:
        Path(step["touch"]).touch()
    time.sleep(step.get("sleep", 0))
    if step.get("rm_worktree"):
        shutil.rmtree(here)
    return int(step.get("exit", 0))


if __name__ == "__main__":
    sys.exit(main())
