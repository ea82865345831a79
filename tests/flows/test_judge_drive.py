"""The sealed judge in real drives (issue 38): a package installed editable
in a shared virtualenv (``src/`` and flat layouts), doers scripted by
tests/flows/fake_doer.py, plain ``python -m pytest`` gates. A doer's gate
runs in the judge's checkout of its committed result and imports the code
it judges there: a broken change is never done nor merged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from milepost.flows.drive import run_drive
from milepost.gates.git import Repo
from milepost.gates.worktrees import repo_key, worktrees_root
from milepost.graph import MilestoneStatus
from milepost.service import Service
from tests.flows.test_doers import Doer, apply, merges, statuses
from tests.flows.test_doers import any_service as _on_both_stores  # noqa: F401 (the fixture any_service)
from tests.venvs import BROKEN, FIXED, HELPERS, git, install_editable, package_repo, shared_venv

pytestmark = pytest.mark.xdist_group("prefect")

S = MilestoneStatus


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared virtualenv (its bin folder), pytest and setuptools in reach."""
    return shared_venv(tmp_path_factory.mktemp("shared") / "venv").parent


def _package(ws: Path, venv: Path, layout: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The workspace as a package installed editable in the shared venv, whose python is first on PATH."""
    name = f"kv{layout}"
    package_repo(ws, name, layout)
    install_editable(venv / "python", ws)
    monkeypatch.setenv("PATH", f"{venv}:{__import__('os').environ['PATH']}")
    return name


def _helpers(name: str, layout: str) -> str:
    return f"src/{name}/helpers.py" if layout == "src" else f"{name}/helpers.py"


@pytest.mark.parametrize("layout", ["src", "flat"])
def test_a_doer_that_breaks_the_code_is_never_done_and_a_correct_one_is_merged(
    prefect_api: str,
    any_service: Service,
    workspace: Path,
    tmp_path: Path,
    venv: Path,
    layout: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = any_service  # (SQLite and PostgreSQL)
    name = _package(workspace, venv, layout, monkeypatch)
    path = _helpers(name, layout)
    doer = Doer(tmp_path, {"broken": {"write": {path: BROKEN}}, "fixed": {"write": {path: FIXED}}})
    gate = "python -m pytest -q -p no:cacheprovider tests"
    item = apply(
        service,
        f"""objective: judged
doer: {{protect: ['tests/**']}}
milestones:
  - {{name: broken, retries: 0, do: '{doer.command}', gate: '{gate}', inputs: ['module:{name}.helpers', 'tests/**']}}
  - {{name: fixed, deps: [broken], do: '{doer.command}', gate: '{gate}', inputs: ['module:{name}.helpers']}}
""",
    )
    summary = run_drive(service, item)
    assert not summary.ok
    assert statuses(service, item)["broken"] is S.STUCK
    [run] = service.runs("broken", item)
    assert run.outcome.value == "failed" and "test_odd" in Path(run.log_path or "").read_text()
    assert merges(workspace) == []  # never merged
    assert (workspace / path).read_text() == HELPERS
    # the same plain gate passes a correct change: unblock the chain by working it alone
    item2 = apply(
        service,
        f"""objective: judged again
doer: {{protect: ['tests/**']}}
milestones:
  - {{name: fixed, do: '{doer.command}', gate: '{gate}', inputs: ['module:{name}.helpers']}}
""",
    )
    summary = run_drive(service, item2)
    assert summary.ok, summary.message
    assert statuses(service, item2) == {"fixed": S.DONE}
    assert len(merges(workspace)) == 1 and (workspace / path).read_text() == FIXED


def test_the_judge_has_no_ignored_file_of_the_doer_and_its_setup_is_cached_by_key(
    prefect_api: str,
    service: Service,
    workspace: Path,
    tmp_path: Path,
    venv: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = _package(workspace, venv, "src", monkeypatch)
    path = _helpers(name, "src")
    # what the driver has that neither the judge's set-up nor its gate may see (as for a doer)
    monkeypatch.setenv("MILEPOST_DB", service.store.url)
    monkeypatch.setenv("SECRET_TOKEN", "s3cret-token-value")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/the-drivers-agent.sock")
    where, counter, seen = tmp_path / "where.txt", tmp_path / "setups.txt", tmp_path / "env.txt"
    doer = Doer(
        tmp_path,
        {
            "a#1": {"write": {path: BROKEN, "build/flag.txt": "the doer's ignored file\n"}},
            "a#2": {"write": {path: FIXED, "build/flag.txt": "again\n"}},
            "b": {"append": {"pyproject.toml": "# a key file changed\n", path: "X = 1\n"}},
        },
    )
    gate = (
        f"pwd >> {where} && env >> {seen} && test ! -e build/flag.txt && python -m pytest -q -p no:cacheprovider tests"
    )
    item = apply(
        service,
        f"""objective: judged with a set-up
doer: {{protect: ['tests/**'], judge_setup: 'echo ran >> {counter} && env >> {seen} && mkdir -p .built'}}
milestones:
  - {{name: a, retries: 1, do: '{doer.command}', gate: '{gate}'}}
  - {{name: b, deps: [a], do: '{doer.command}', gate: '{gate} && test -d .built'}}
""",
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    assert [r.outcome.value for r in service.runs("a", item)] == ["failed", "passed"]
    gates = where.read_text().split()
    worktrees = [Path(s["cwd"]) for s in doer.seen()]
    assert len(gates) == 3 and all("/.judge/" in g for g in gates)  # never where the doer ran
    assert not set(gates) & {str(w) for w in worktrees}
    assert all(Path(g).parent == w.parent / ".judge" for g, w in zip(gates, worktrees, strict=True))
    # a's two attempts: one set-up (the same key); b changed pyproject.toml: built again
    assert counter.read_text() == "ran\nran\n"
    assert (workspace / path).read_text() == FIXED + "X = 1\n"
    assert not (workspace / "build").exists()
    # the judge's set-up (twice) and gate (three times) ran with the scrubbed environment
    text = seen.read_text()
    assert text.count("MILEPOST_AGENT=doer") == 5 and "PATH=" in text
    assert "MILEPOST_DB" not in text and service.store.url not in text
    assert "SECRET_TOKEN" not in text and "s3cret-token-value" not in text and "SSH_AUTH_SOCK" not in text


def test_a_failing_judge_setup_and_a_package_resolving_outside_fail_their_attempts(
    prefect_api: str,
    service: Service,
    workspace: Path,
    tmp_path: Path,
    venv: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = _package(workspace, venv, "src", monkeypatch)
    path = _helpers(name, "src")
    doer = Doer(tmp_path, {"a": {"write": {path: FIXED}}, "b": {"write": {path: FIXED + "Y = 2\n"}}})
    item = apply(
        service,
        f"""objective: a broken set-up
doer: {{judge_setup: 'echo cannot build the environment; exit 3'}}
milestones:
  - {{name: a, retries: 0, do: '{doer.command}', gate: 'python -m pytest -q tests'}}
""",
    )
    assert not run_drive(service, item).ok
    [run] = service.runs("a", item)
    assert run.outcome.value == "failed" and run.reason.startswith("judge set-up failed"), run.reason
    assert "cannot build the environment" in Path(run.log_path or "").read_text()
    outside = f"PYTHONPATH={workspace}/src python -m pytest -q tests"
    item2 = apply(
        service,
        f"""objective: imports from the workspace
milestones:
  - {{name: b, retries: 0, do: '{doer.command}', gate: '{outside}', inputs: ['module:{name}']}}
""",
    )
    assert not run_drive(service, item2).ok
    [run] = service.runs("b", item2)
    assert run.reason.startswith("refused: the gate's python"), run.reason
    assert f"imports {name} from {workspace}/src/{name}/__init__.py" in run.reason
    assert merges(workspace) == [] and git(workspace, "status", "--porcelain") == ""


def test_gates_in_the_integration_worktree_import_from_it_or_are_refused(
    prefect_api: str,
    service: Service,
    workspace: Path,
    tmp_path: Path,
    venv: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Uncommitted changes: the drive's gates run in its integration worktree
    (docs/doers.md), and import the workspace's packages from there."""
    name = _package(workspace, venv, "src", monkeypatch)
    (workspace / "notes.txt").write_text("my notes\n")  # uncommitted
    where = tmp_path / "where.txt"
    doer = Doer(tmp_path, {"a": {"write": {_helpers(name, "src"): FIXED + "MERGED = True\n"}}})
    probe = f'python -c "import {name}.helpers as h; assert h.MERGED; print(h.__file__)" > {where}'
    item = apply(
        service,
        f"""objective: proven where merged
milestones:
  - {{name: a, do: '{doer.command}', gate: 'python -m pytest -q -p no:cacheprovider tests'}}
  - {{name: check, deps: [a], gate: '{probe}', inputs: ['module:{name}.helpers']}}
  - {{name: outside, deps: [a], retries: 0, gate: 'PYTHONPATH={workspace}/src {probe}'}}
""",
    )
    assert not run_drive(service, item).ok
    assert statuses(service, item) == {"a": S.DONE, "check": S.DONE, "outside": S.STUCK}
    listed = git(workspace, "worktree", "list", "--porcelain").splitlines()
    [integration] = [Path(w[9:]) for w in listed if w.startswith("worktree ") and w.endswith("_integration")]
    assert not integration.is_relative_to(workspace)  # (outside the workspace: docs/doers.md)
    assert Path(where.read_text().strip()) == integration / "src" / name / "helpers.py"
    [run] = service.runs("outside", item)
    assert f"imports {name} from {workspace}/src/{name}/__init__.py, outside {integration}" in run.reason
    assert (workspace / "notes.txt").read_text() == "my notes\n" and "MERGED" not in (
        workspace / _helpers(name, "src")
    ).read_text()


def test_a_unit_run_ahead_in_the_integration_worktree_imports_from_it_and_its_pass_proves_that_code(
    prefect_api: str,
    any_service: Service,
    workspace: Path,
    tmp_path: Path,
    venv: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Uncommitted changes: units of a dependent milestone run ahead (while
    its dependency's doer works) in the integration worktree, as its gate
    would: importing the package from there, not from the workspace the
    editable install points at. Their pass then names the code they ran: the
    doer's merged change (a broken helper) makes the dependent's unit run
    again, and fail. (Run ahead with the driver's environment, the unit
    proved the workspace's copy and its record, blind to it, stood for the
    merged code: the dependent was done on a broken helper.)"""
    service = any_service  # (SQLite and PostgreSQL: units' passes are kept in the store)
    name = _package(workspace, venv, "src", monkeypatch)
    ran = tmp_path / "imported.txt"  # where each run of the unit imported the helper from
    (workspace / "tests" / "test_odd.py").write_text(
        f"from {name} import helpers\nfrom {name}.helpers import is_even\n\n\n"
        f"def test_odd():\n    with open({str(ran)!r}, 'a') as f:\n        f.write(helpers.__file__ + '\\n')\n"
        "    assert not is_even(3)\n"
    )
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "a test of its own")
    (workspace / "notes.txt").write_text("my notes\n")  # uncommitted: the drive integrates elsewhere
    # a's doer breaks the helper once b's unit ran ahead, its record of the code it ran kept (in the
    # integration worktree: docs/doers.md), so that it ran on the code before the merge
    folder = worktrees_root(os.environ["MILEPOST_WORKTREES"]) / repo_key(Repo(workspace.resolve()))
    records = f"{folder}/item-*/_integration/.milepost/cache/units/*.json"
    doer = Doer(tmp_path, {"a": {"wait_for": records, "write": {_helpers(name, "src"): BROKEN}}})
    step = "{name: t, run: 'python -m pytest -q -p no:cacheprovider {file}', each: [tests/test_odd.py]}"
    item = apply(
        service,
        f"""objective: run ahead where merged
milestones:
  - {{name: a, do: '{doer.command}', gate: 'true'}}
  - {{name: b, deps: [a], retries: 0, gate: [{step}]}}
""",
    )
    assert not run_drive(service, item, max_parallel=2).ok
    assert statuses(service, item) == {"a": S.DONE, "b": S.STUCK}
    [run] = service.runs("b", item)
    assert run.outcome.value == "failed" and "assert not is_even(3)" in Path(run.log_path or "").read_text()
    [integration] = list(folder.glob("item-*/_integration"))
    # ahead (a's doer waited for its record), then b's gate: both imported the helper from where they ran
    assert ran.read_text().splitlines() == [str(integration / _helpers(name, "src"))] * 2
