"""Exit 130 on an interrupt stays 130 under ``python -m milepost``, even when
the interrupt landed inside code run from a string (as Prefect's import runs
thousands: dataclasses, namedtuples). CPython flags such an interrupt and a
``-m`` process would otherwise kill itself with SIGINT at exit (status -2):
seen once in CI as a Ctrl-C drive in a terminal ending -2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMAND = """
import os, signal
from milepost.cli import cli, main

@cli.command("interrupt-inside-exec")
def interrupt_inside_exec() -> None:
    exec("import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(10**6): pass")

main(["interrupt-inside-exec"{extra}])
"""


def run_as_module(tmp_path: Path, extra: str = "") -> subprocess.CompletedProcess[str]:
    (tmp_path / "interrupting.py").write_text(COMMAND.replace("{extra}", extra))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    return subprocess.run(
        [sys.executable, "-m", "interrupting"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )


def test_an_interrupt_inside_exec_still_exits_130(tmp_path: Path) -> None:
    r = run_as_module(tmp_path)
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert r.stderr.strip().splitlines()[-1] == "milepost: error: interrupted"


def test_the_json_error_too(tmp_path: Path) -> None:
    r = run_as_module(tmp_path, ', "--json"')
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert '"type": "interrupted"' in r.stdout
