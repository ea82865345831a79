"""The judge of a doer's attempt and the import rule (gates/judge.py, issue 38),
on real git repositories and a real shared virtualenv holding editable
installs of a ``src/`` and a flat package: the rules for a gate's python,
where a package resolves, the judge's checkout (ignored files gone,
protected paths restored, its set-up cached by key)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from milepost.gates import judge as J
from milepost.gates.outcome import GateResult
from milepost.graph.models import GateCommand
from tests.venvs import BROKEN, git, install_editable, package_repo, shared_venv


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """One virtualenv with both packages installed editable; each package's workspace."""
    base = tmp_path_factory.mktemp("shared")
    python = shared_venv(base / "venv")
    spaces = {}
    for layout in ("src", "flat"):
        ws = base / layout
        ws.mkdir()
        package_repo(ws, f"kv{layout}", layout)
        install_editable(python, ws)
        spaces[layout] = ws
    return python, spaces


def _checkout(ws: Path, where: Path) -> Path:
    git(ws, "worktree", "add", "-q", "--detach", str(where), "HEAD")
    return where


# -- the rules of a gate's python ----------------------------------------------------------


def test_a_gates_python_is_its_program_or_its_scripts_shebang(tmp_path: Path) -> None:
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "pytest"
    script.write_text(f"#!{sys.executable}\nprint('hi')\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    via_env = tmp_path / "tool"
    via_env.write_text("#!/usr/bin/env python3\n")
    via_env.chmod(0o755)
    sh = tmp_path / "run.sh"
    sh.write_text("#!/bin/sh\n")
    sh.chmod(0o755)
    py = J.gate_interpreter(f"{sys.executable} -m pytest -q", tmp_path, env)
    assert py is not None and py.python == Path(sys.executable) and not py.script
    assert J.gate_interpreter("pytest -q tests", tmp_path, env) == J.Interpreter(Path(sys.executable), True, {})
    with_vars = J.gate_interpreter("cd sub && PYTHONPATH=src env X=1 python3 -I -m pytest", tmp_path, env)
    assert with_vars is not None and with_vars.env == {"PYTHONPATH": "src", "X": "1"} and with_vars.flags == ("-I",)
    tool = J.gate_interpreter("./tool --x", tmp_path, env)
    assert tool is not None and tool.python.name.startswith("python3") and tool.script
    assert J.gate_interpreter("./run.sh", tmp_path, env) is None
    assert J.gate_interpreter("test -f src/a.py && make test", tmp_path, env) is None
    assert J.gate_interpreter("'unclosed", tmp_path, env) is None
    # the same words as the env: entries' rule (gates/pyenv.py): exec/command prefixes, subshells, pypy
    for run in ("exec python3 -m pytest", "command python3 -m pytest", "(cd sub && python3 -m pytest)"):
        found = J.gate_interpreter(run, tmp_path, env)
        assert found is not None and found.python.name.startswith("python3") and not found.script, run
    (tmp_path / "bin" / "pypy3").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "pypy3").chmod(0o755)
    pypy = J.gate_interpreter("pypy3 -m pytest", tmp_path, env)
    assert pypy is not None and pypy.python == tmp_path / "bin" / "pypy3"
    # pip's trampoline for a python whose path is too long for a shebang line (127 bytes)
    long = tmp_path / "bin" / "long-pytest"
    long.write_text(f"#!/bin/sh\n'''exec' '{sys.executable}' \"$0\" \"$@\"\n' '''\nprint('hi')\n")
    long.chmod(0o755)
    assert J.gate_interpreter("long-pytest -q", tmp_path, env) == J.Interpreter(Path(sys.executable), True, {})


def test_the_packages_module_entries_name_and_their_source_roots(tmp_path: Path) -> None:
    entries = ["src/**", "module:kv.mod_c", "module:src/other/x.py", "module:flat/y.py", "module:tests/test_a.py"]
    assert J.named_packages(entries) == ["kv", "other", "flat", "tests"]
    for path in ("src/kv/__init__.py", "flat/__init__.py", "lone.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    roots, found = J.source_roots(tmp_path, ["kv", "flat", "lone", "other", "tests"])
    assert roots == [tmp_path / "src", tmp_path] and found == ["kv", "flat", "lone"]
    assert J.source_roots(tmp_path, []) == ([tmp_path / "src", tmp_path], ["kv", "flat"])  # none named: found


# -- where a package resolves -----------------------------------------------------------------


@pytest.mark.parametrize("layout", ["src", "flat"])
def test_an_editable_install_points_at_the_workspace_and_the_rule_points_the_gate_at_its_checkout(
    shared: tuple[Path, dict[str, Path]], tmp_path: Path, layout: str
) -> None:
    python, spaces = shared
    ws, name = spaces[layout], f"kv{layout}"
    checkout = _checkout(ws, tmp_path / "judge")
    gate = [GateCommand(run=f"{python} -m pytest -q")]
    # a script's python (pytest, not python -m: the cwd is not on sys.path) imports the workspace's copy
    plain = J.resolve(J.Interpreter(python, True, {}), [name], checkout, dict(os.environ))
    assert plain[name] is not None and Path(plain[name]).resolve().is_relative_to(ws.resolve())  # the leak
    started = time.monotonic()
    rule = J.import_rule(checkout, [name], gate, dict(os.environ))
    assert rule.refusal is None and rule.checked == 1
    assert time.monotonic() - started < 1.0
    first = rule.env["PYTHONPATH"].split(os.pathsep)[0]
    assert first == str(checkout / "src" if layout == "src" else checkout)
    ruled = J.resolve(J.Interpreter(python, True, {}), [name], checkout, {**os.environ, **rule.env})
    assert Path(str(ruled[name])).resolve().is_relative_to(checkout.resolve())
    # and the plain gate, run there, tests the checkout's code: break it there alone
    helpers = (checkout / "src" / name if layout == "src" else checkout / name) / "helpers.py"
    helpers.write_text(BROKEN)
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=checkout,
        env={**os.environ, **rule.env},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "test_odd" in run.stdout, run.stdout


def test_a_units_key_names_where_it_imports_from_so_one_import_root_never_serves_another(
    shared: tuple[Path, dict[str, Path]], tmp_path: Path
) -> None:
    """A unit run with the import rule (outside the workspace) and one without
    (the workspace's editable install; a unit run ahead before the fix) have
    other keys: a pass of one never stands for the other. Two checkouts with
    the rule share theirs (content decides, not where the checkout is)."""
    from milepost.gates.inputs import Snapshot
    from milepost.gates.unit_blocks import env_tag, unit_state
    from milepost.gates.units import import_tag

    python, spaces = shared
    ws = spaces["src"]
    one, two = _checkout(ws, tmp_path / "one"), _checkout(ws, tmp_path / "two")
    pytest_step = GateCommand(run=f"{python} -m pytest -q {{file}}", each=["tests/test_helpers.py"])
    plain_step = GateCommand(run=f"{python} -c 'import sys' {{file}}", each=["tests/test_helpers.py"])
    env = dict(os.environ)

    def ruled(root: Path) -> dict[str, str]:
        rule = J.import_rule(root, ["kvsrc"], [pytest_step], env)
        assert rule.refusal is None
        return {**env, **rule.env}

    plugin = f"{one / '.milepost' / 'cache' / 'pytest-plugin'}"
    assert import_tag(one, pytest_step, {"PYTHONPATH": f"{plugin}:{one}/src:/elsewhere:lib"}) == "src:/elsewhere:lib"
    for step in (pytest_step, plain_step):
        without = unit_state(Snapshot(one), step, "tests/test_helpers.py", None, env)
        with_one = unit_state(Snapshot(one), step, "tests/test_helpers.py", None, ruled(one))
        with_two = unit_state(Snapshot(two), step, "tests/test_helpers.py", None, ruled(two))
        assert without.digest and with_one.digest
        assert without.digest != with_one.digest
        assert with_one.digest == with_two.digest
    assert env_tag(Snapshot(one), pytest_step, env) != env_tag(Snapshot(one), pytest_step, ruled(one))
    assert env_tag(Snapshot(one), pytest_step, ruled(one)) == env_tag(Snapshot(two), pytest_step, ruled(two))


@pytest.mark.parametrize("gate", ["PYTHONPATH={ws}/src:{ws} {python} -m pytest", "{python} -I -m pytest"])
def test_a_package_that_resolves_outside_the_checkout_is_refused_naming_the_path(
    shared: tuple[Path, dict[str, Path]], tmp_path: Path, gate: str
) -> None:
    python, spaces = shared
    ws = spaces["src"]
    checkout = _checkout(ws, tmp_path / "judge")
    rule = J.import_rule(checkout, ["kvsrc"], [GateCommand(run=gate.format(ws=ws, python=python))], dict(os.environ))
    assert rule.refusal is not None and "\n" not in rule.refusal
    assert f"imports kvsrc from {ws / 'src' / 'kvsrc' / '__init__.py'}" in rule.refusal
    assert str(checkout) in rule.refusal and "doer.judge_setup" in rule.refusal


def test_a_gate_that_runs_no_python_is_not_asked(shared: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    _, spaces = shared
    checkout = _checkout(spaces["src"], tmp_path / "judge")
    rule = J.import_rule(checkout, ["kvsrc"], [GateCommand(run="test -f pyproject.toml")], dict(os.environ))
    assert rule.refusal is None and rule.checked == 0 and rule.env["PYTHONPATH"].startswith(str(checkout / "src"))


# -- the judge's checkout ---------------------------------------------------------------------------


def _attempt(ws: Path, tmp_path: Path) -> tuple[Path, str, str]:
    """A doer's worktree on its branch: a commit changing the helper and a
    protected test (and adding one), and an ignored file left beside it;
    the worktree, its commit and the tip it left."""
    tip = git(ws, "rev-parse", "HEAD").strip()
    wt = tmp_path / "wts" / "item-1" / "a"
    git(ws, "worktree", "add", "-q", "-b", "milepost/1/a", str(wt), tip)
    (wt / "src" / "kvsrc" / "helpers.py").write_text(BROKEN)
    (wt / "tests" / "test_helpers.py").write_text("def test_nothing():\n    pass\n")
    (wt / "tests" / "test_new.py").write_text("def test_more():\n    pass\n")
    git(wt, "add", "-A")
    git(wt, "-c", "user.name=doer", "-c", "user.email=d@x", "commit", "-q", "-m", "doer")
    (wt / "build").mkdir()
    (wt / "build" / "out.txt").write_text("left by the doer\n")  # ignored (.gitignore: build/)
    return wt, git(wt, "rev-parse", "HEAD").strip(), tip


def test_the_judge_holds_the_committed_result_with_protected_paths_restored(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    package_repo(ws, "kvsrc", "src")
    wt, commit, tip = _attempt(ws, tmp_path)
    folder = J.judge_folder(wt)
    assert folder == wt.parent / ".judge"
    j = J.open_judge(ws, folder, commit, tip, ["tests/**"], J.SetupSpec(None), os.environ, tmp_path / "j.log")
    try:
        assert j.path.parent == folder and j.path != wt
        assert (j.path / "src" / "kvsrc" / "helpers.py").read_text() == BROKEN  # the doer's committed work
        assert not (j.path / "build").exists()  # its ignored file is not there
        assert "test_odd" in (j.path / "tests" / "test_helpers.py").read_text()  # restored from the tip
        assert not (j.path / "tests" / "test_new.py").exists()  # the tip lacks it: removed
        assert j.restored == ["tests/test_helpers.py", "tests/test_new.py"]
        assert git(j.path, "rev-parse", "HEAD").strip() == commit
        # a second attempt meanwhile takes another checkout of the pool
        k = J.open_judge(ws, folder, tip, tip, [], J.SetupSpec(None), os.environ, tmp_path / "k.log")
        assert k.path != j.path
        k.release()
    finally:
        j.release()
    # junk a gate left goes before the next attempt in that checkout
    (j.path / "junk.txt").write_text("x")
    again = J.open_judge(ws, folder, tip, tip, [], J.SetupSpec(None), os.environ, tmp_path / "j2.log")
    again.release()
    assert again.path == j.path and not (j.path / "junk.txt").exists() and again.seconds < 1.0


def test_the_judges_setup_runs_once_per_key_and_a_failed_one_raises_with_its_log(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    package_repo(ws, "kvsrc", "src")
    wt, commit, tip = _attempt(ws, tmp_path)
    counter = tmp_path / "ran.txt"
    setup = J.SetupSpec(f"echo ran >> {counter} && mkdir -p .venv && touch .venv/made")
    folder = J.judge_folder(wt)

    def judge(at: str) -> J.Judge:
        j = J.open_judge(ws, folder, at, tip, ["tests/**"], setup, os.environ, tmp_path / "setup.log")
        j.release()
        return j

    first = judge(commit)
    assert first.setup_ran and (first.path / ".venv" / "made").exists()
    second = judge(commit)  # a retry with the same key: the outputs stay, the set-up does not run
    assert not second.setup_ran and (second.path / ".venv" / "made").exists() and second.seconds < 1.0
    assert counter.read_text() == "ran\n"
    (wt / "pyproject.toml").write_text((wt / "pyproject.toml").read_text() + "\n# a new dependency\n")
    git(wt, "commit", "-qam", "key changed")
    third = judge(git(wt, "rev-parse", "HEAD").strip())
    assert third.setup_ran and counter.read_text() == "ran\nran\n"
    broken = J.SetupSpec("echo cannot build; exit 3")
    with pytest.raises(J.SetupFailed) as failed:
        J.open_judge(ws, folder, commit, tip, [], broken, os.environ, tmp_path / "bad.log")
    assert failed.value.result.exit_code == 3 and "cannot build" in (tmp_path / "bad.log").read_text()
    # its slot was released: the next judge takes it again
    assert judge(commit).path == first.path


def test_the_judges_env_is_scrubbed_as_a_doers() -> None:
    env = J.judge_env({"PATH": "/bin", "MILEPOST_DB": "sqlite:///x", "GITHUB_TOKEN": "t", "KEEP_TOKEN": "k"},
                      ["KEEP_TOKEN"], {"MILEPOST_ITEM": "1"})  # fmt: skip
    assert env == {"PATH": "/bin", "KEEP_TOKEN": "k", "MILEPOST_ITEM": "1", "MILEPOST_AGENT": "doer"}


def test_the_judges_plan_fields_are_stored_exported_and_checked(tmp_path: Path) -> None:
    from milepost.errors import InputError
    from milepost.graph.plan import plan_from_item
    from milepost.planfile import parse_plan
    from milepost.service import Service
    from milepost.store import Store
    from milepost.workspace import init_workspace

    text = """objective: judged
doer: {judge_setup: 'python3 -m venv .venv', judge_key: [uv.lock, 'requirements*.txt']}
milestones:
  - {name: a, do: 'true', gate: 'true'}
"""
    ws = init_workspace(tmp_path)
    svc = Service(Store.open(ws.url, ws.home, ws.root, create=True))
    try:
        item = svc.get_item(svc.apply_plan(parse_plan(text)).id)
        assert item.doer.judge_setup == "python3 -m venv .venv"
        assert item.doer.judge_key == ["uv.lock", "requirements*.txt"]
        assert plan_from_item(item)["doer"] == {
            "judge_setup": "python3 -m venv .venv",
            "judge_key": ["uv.lock", "requirements*.txt"],
        }
    finally:
        svc.close()
    with pytest.raises(InputError, match="judge_key takes path patterns"):
        parse_plan(text.replace("uv.lock", "'module:kv'"))


def test_no_git_hook_runs_when_the_judge_is_made(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    package_repo(ws, "kvsrc", "src")
    wt, commit, tip = _attempt(ws, tmp_path)
    ran = tmp_path / "hook-ran"
    hook = Path(git(ws, "rev-parse", "--git-common-dir").strip())
    hook = (ws / hook if not hook.is_absolute() else hook) / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {ran}\n")  # as a doer could write it into the common git dir
    hook.chmod(0o755)
    for _ in range(2):  # made, then reused
        J.open_judge(
            ws, J.judge_folder(wt), commit, tip, [], J.SetupSpec(None), os.environ, tmp_path / "j.log"
        ).release()
    assert not ran.exists()
    git(ws, "checkout", "-q", "-b", "other")  # (the hook does run for git itself: the test can fail)
    assert ran.exists()


def test_make_judge_fails_the_attempt_with_its_log_and_frees_its_checkout(
    shared: tuple[Path, dict[str, Path]], tmp_path: Path
) -> None:
    python, spaces = shared
    ws = spaces["src"]
    tip = git(ws, "rev-parse", "HEAD").strip()
    folder = tmp_path / "wts" / J.JUDGE_DIR
    log = tmp_path / "attempt-1.log"
    order = J.JudgeOrder(str(ws), str(folder), tip, tip, setup="echo no compiler here; exit 2", log=str(log) + ".judge")
    failed = J.make_judge(order, [GateCommand(run="true")], dict(os.environ), log)
    assert isinstance(failed, GateResult) and failed.outcome.value == "failed" and failed.exit_code == 2
    assert failed.reason.startswith("judge set-up failed") and "no compiler here" in log.read_text()
    outside = [GateCommand(run=f"PYTHONPATH={ws}/src {python} -m pytest")]
    refused = J.make_judge(J.JudgeOrder(str(ws), str(folder), tip, tip, packages=("kvsrc",)), outside, {}, log)
    assert isinstance(refused, GateResult) and refused.reason.startswith("refused: the gate's python")
    made = J.make_judge(J.JudgeOrder(str(ws), str(folder), tip, tip, packages=("kvsrc",)), [], dict(os.environ), log)
    assert not isinstance(made, GateResult)
    judge, env = made
    judge.release()
    assert judge.path == folder / "0"  # each failure released it
    assert env["MILEPOST_WORKSPACE"] == str(judge.path) and env["PYTHONPATH"].startswith(str(judge.path / "src"))
