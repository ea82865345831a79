"""Dependencies as users need them: Dask comes with the ``dask`` extra, and
``--task-runner dask`` without it says which extra to install (exit 3, one
line, before anything runs); the default path never imports Dask."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from milepost.errors import EnvironmentProblem
from tests.conftest import CLI


@pytest.fixture
def no_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    """prefect-dask as if not installed (an import of it fails; find_spec finds nothing)."""
    monkeypatch.setitem(sys.modules, "prefect_dask", None)


def test_drive_with_the_dask_runner_without_the_extra_names_the_extra(cli: CLI, no_dask: None) -> None:
    cli("item", "create", "dask", check=True)
    cli("add", "a", "--gate", "true", check=True)
    r = cli("drive", "--task-runner", "dask")
    assert r.code == 3, (r.code, r.out, r.err)
    assert r.err.strip().count("\n") == 0, r.err  # one line
    assert "milepost[dask]" in r.err and "--task-runner dask" in r.err, r.err
    assert cli.json("list")["milestones"][0]["status"] == "pending"  # nothing ran


def test_the_library_refuses_the_dask_runner_without_the_extra(service, no_dask: None) -> None:  # type: ignore[no-untyped-def]
    from milepost.flows.drive import run_drive

    item = service.create_item("dask").id
    with pytest.raises(EnvironmentProblem, match=r"milepost\[dask\]"):
        run_drive(service, item, task_runner="dask")


def test_the_default_drive_path_imports_no_dask() -> None:
    """What `milepost drive` imports on threads (the CLI, the flows, the gate
    task, the loop) loads neither Dask nor prefect-dask: the wheel without
    extras runs it."""
    code = (
        "import sys, milepost.cli, milepost.cli.runtime, milepost.flows.drive, milepost.flows.loop;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'prefect_dask')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path.cwd())
    assert out.stdout.strip() == "[]", out.stdout
