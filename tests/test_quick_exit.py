"""The process's entry points leave with ``os._exit`` once an exit's duties
are done (milepost/cli/_leave.py): the non-daemon threads joined, the atexit
handlers run, output flushed, the command's exit code kept; the interpreter's
teardown (0.5 s after Prefect's import) skipped."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path
from milepost.cli._leave import QuickExit

here = Path(sys.argv[1])
leaving = QuickExit()  # registered first: runs last


class Teardown:
    def __init__(self, path):
        self.path = str(path)

    def __del__(self, _open=open):  # runs only when the interpreter tears its modules down
        with _open(self.path, "w") as f:
            f.write("ran")


keep = Teardown(here / "teardown")
atexit.register(lambda: (here / "atexit").write_text("ran"))  # a handler of the command's (Prefect's drains)


def late():
    time.sleep(0.5)
    (here / "thread").write_text("joined")


threading.Thread(target=late).start()  # not a daemon: an exit waits for it
sys.stdout.write("x" * 200_000)  # more than a pipe holds: still buffered at the end
how = sys.argv[2]
if how == "code":
    leaving.ended(SystemExit(7))
elif how == "ok":
    leaving.ended(None)
elif how == "coverage":
    sys.modules["coverage"] = type(sys)("coverage")
    leaving.ended(SystemExit(7))
# "unknown": the command ended by an exception that is no exit: leave as Python does
sys.exit(7)
"""


def _run(tmp_path: Path, how: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "leave.py"
    script.write_text(textwrap.dedent(SCRIPT))
    return subprocess.run([sys.executable, str(script), str(tmp_path), how], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("how", "code"), [("code", 7), ("ok", 0)])
def test_a_finished_command_leaves_at_once_after_the_exit_duties(tmp_path: Path, how: str, code: int) -> None:
    p = _run(tmp_path, how)
    assert p.returncode == code, p.stderr
    assert len(p.stdout) == 200_000  # flushed
    assert (tmp_path / "thread").read_text() == "joined"  # joined before the handlers ran
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "teardown").exists()  # the teardown was skipped


@pytest.mark.parametrize("how", ["unknown", "coverage"])
def test_without_an_exit_code_or_under_coverage_python_exits_as_usual(tmp_path: Path, how: str) -> None:
    p = _run(tmp_path, how)
    assert p.returncode == 7 and len(p.stdout) == 200_000, p.stderr
    assert (tmp_path / "atexit").read_text() == "ran" and (tmp_path / "thread").exists()
    assert (tmp_path / "teardown").read_text() == "ran"  # the interpreter tore down its modules


def test_the_entry_points_are_run(tmp_path: Path) -> None:
    """Both entry points go through ``run`` (the quick exit), and exit codes and output are the command's."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["milepost"] == "milepost.cli:run"
    assert "run()" in (root / "milepost" / "__main__.py").read_text()
    p = subprocess.run(
        [sys.executable, "-m", "milepost", "--json", "next"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 3 and '"exit_code": 3' in p.stdout, p  # no store here: exit 3, its JSON whole
