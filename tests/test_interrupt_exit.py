"""Exit 130 on an interrupt stays 130 under ``python -m milepost``, even when
the interrupt landed inside code run from a string (as Prefect's import runs
thousands: dataclasses, namedtuples). CPython flags such an interrupt and a
``-m`` process would otherwise kill itself with SIGINT at exit (status -2):
seen once in CI as a Ctrl-C drive in a terminal ending -2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

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


SWALLOWING = """
import os, signal
class Plugin:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.{sig})
        for _ in range(10**6):
            pass
try:  # as Prefect's plugin loader does: any Exception is logged and the import goes on
    class Settings:
        plugin = Plugin()
except BaseException as e:
    CAUGHT = e  # (3.11: a RuntimeError whose cause is the KeyboardInterrupt)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_swallowed_inside_an_import_still_interrupts(
    tmp_path: Path, sig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from milepost.cli._interrupts import import_keeping_interrupts

    (tmp_path / f"swallowing_{sig.lower()}.py").write_text(SWALLOWING.replace("{sig}", sig))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        import_keeping_interrupts(f"swallowing_{sig.lower()}")
    caught = sys.modules[f"swallowing_{sig.lower()}"].CAUGHT  # it was swallowed there
    assert isinstance(caught, KeyboardInterrupt) or isinstance(caught.__cause__, KeyboardInterrupt), repr(caught)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before  # handlers given back


def test_an_import_without_a_signal_returns_the_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(Prefect's import, 1,500 modules: without the cyclic collector's passes, docs/benchmarks.md.)"""
    import gc

    from milepost.cli._interrupts import import_keeping_interrupts

    (tmp_path / "quiet_module.py").write_text("import gc\n\nVALUE = 7\nCOLLECTING = gc.isenabled()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert gc.isenabled()
    module = import_keeping_interrupts("quiet_module")
    assert module.VALUE == 7 and module.COLLECTING is False and gc.isenabled()
