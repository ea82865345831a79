"""Every input that decides a test (issue 38, parts 6 and 7): pytest's
configuration, the conftest files between the root and a test file, the
gate's environment (``env:`` entries: the interpreter and its installed
distributions), and ``cache: false`` running every unit of its gate.

Real git work trees, real pytest runs in gates, real virtualenvs made with
``python -m venv`` and real ``pip install``/``pip uninstall`` of a tiny
distribution built offline from a folder in tmp (its own PEP 517 backend);
the store on SQLite, and on PostgreSQL where units are shared through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from milepost.errors import MilepostError
from milepost.gates.inputs import Snapshot, gate_fingerprint
from milepost.gates.pyenv import EnvProbe, gate_entries, gate_entry, interpreter_of
from milepost.gates.units import unit_digest
from milepost.graph.models import GateCommand
from milepost.planfile import parse_plan
from milepost.service import Service
from tests.conftest import CLI, InProcessCLI
from tests.venvs import bare_venv


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


PYPROJECT = '[project]\nname = "shop"\nversion = "1.0"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'
PACKAGE = {
    "pyproject.toml": PYPROJECT,
    "src/shop/__init__.py": "",
    "src/shop/prices.py": "def price(x):\n    return x * 2\n",
    "tests/conftest.py": "",
    "tests/test_prices.py": "from shop.prices import price\n\ndef test_price():\n    assert price(2) == 4\n",
    "tests/deep/conftest.py": "",
    "tests/deep/test_deep.py": "from shop.prices import price\n\ndef test_deep():\n    assert price(1) == 2\n",
}


@pytest.fixture
def pkg(workspace: Path) -> Path:
    write(workspace, PACKAGE)
    write(workspace, {".gitignore": ".venv/\n"})
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    return workspace


@pytest.fixture
def any_cli(store_url: str, workspace: Path) -> CLI:
    """The CLI in this process, in an initialized workspace, its store on SQLite and on PostgreSQL
    (``store_url``: the PostgreSQL one marked ``postgres``)."""
    c = InProcessCLI(workspace, {"MILEPOST_DB": store_url})
    assert c.json("init")["db"].partition(":")[0] == store_url.partition(":")[0]  # (that store, not the default)
    return c


def fp_files(root: Path, *entries: str) -> dict[str, str]:
    return Snapshot(root).fingerprint(list(entries), "spec").files


# -- pytest's configuration ----------------------------------------------------------------


def test_a_test_file_counts_pytests_sections_from_its_folder_up_to_the_root(pkg: Path) -> None:
    before = fp_files(pkg, "module:tests/deep/test_deep.py")
    assert "pyproject.toml[tool.pytest]" in before
    assert {"tests/conftest.py", "tests/deep/conftest.py"} <= set(before)  # (conftests: counted already)
    # A version bump in [project] is not pytest's: nothing changes.
    write(pkg, {"pyproject.toml": PYPROJECT.replace('version = "1.0"', 'version = "1.1"')})
    assert fp_files(pkg, "module:tests/deep/test_deep.py") == before
    # An option in pytest's table is.
    write(pkg, {"pyproject.toml": PYPROJECT + 'markers = ["slow"]\n'})
    changed = fp_files(pkg, "module:tests/deep/test_deep.py")
    assert changed["pyproject.toml[tool.pytest]"] != before["pyproject.toml[tool.pytest]"]
    # A nearer file that would shadow it (pytest takes the first it finds upwards), and ini sections.
    write(pkg, {"tests/deep/tox.ini": "[tox]\nenvlist = py3\n", "setup.cfg": "[metadata]\nname = shop\n"})
    found = fp_files(pkg, "module:tests/deep/test_deep.py")
    assert found["tests/deep/tox.ini[pytest]"] == "absent" and found["setup.cfg[tool:pytest]"] == "absent"
    write(pkg, {"tests/deep/tox.ini": "[tox]\nenvlist = py3\n[pytest]\naddopts = -x\n"})
    assert fp_files(pkg, "module:tests/deep/test_deep.py")["tests/deep/tox.ini[pytest]"].startswith("ini:")
    write(pkg, {"tests/pytest.ini": "[pytest]\n"})  # the whole file, as a file input's digest
    whole = fp_files(pkg, "module:tests/deep/test_deep.py")
    assert whole["tests/pytest.ini"] == fp_files(pkg, "tests/pytest.ini")["tests/pytest.ini"]
    # A module that is not a test file reads no configuration; nor does the other test file read tests/deep's.
    assert not any("[" in k for k in fp_files(pkg, "module:shop.prices"))
    assert "tests/deep/tox.ini[pytest]" not in fp_files(pkg, "module:tests/test_prices.py")
    # TOML pytest would refuse counts whole.
    write(pkg, {"pyproject.toml": PYPROJECT + "addopts = \n"})
    assert fp_files(pkg, "module:tests/test_prices.py")["pyproject.toml[tool.pytest]"].startswith("unparsed:")


def test_a_configuration_files_section_is_read_once_per_content_in_a_process(
    pkg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drive takes a snapshot per gate: the runner's section of each configuration file is parsed once per
    content in the process (not once per snapshot), and parsed again when the file changes."""
    from milepost.gates import inputs

    parsed: list[str] = []
    real = inputs.section_digest
    monkeypatch.setattr(inputs, "section_digest", lambda name, *a: parsed.append(name) or real(name, *a))
    first = fp_files(pkg, "module:tests/test_prices.py")
    assert fp_files(pkg, "module:tests/test_prices.py") == first and parsed.count("pyproject.toml") == 1
    write(pkg, {"pyproject.toml": PYPROJECT + 'markers = ["slow"]\n'})
    changed = fp_files(pkg, "module:tests/test_prices.py")
    assert changed["pyproject.toml[tool.pytest]"] != first["pyproject.toml[tool.pytest]"]
    assert parsed.count("pyproject.toml") == 2


def test_a_conftest_edit_between_root_and_test_file_makes_that_unit_stale_not_others(
    any_service: Service, pkg: Path, tmp_path: Path
) -> None:
    service = any_service
    ledger = tmp_path / "ledger.txt"
    service.apply_plan(
        parse_plan(
            f"""
objective: units
milestones:
  - name: prices
    gate:
      - {{name: tests, run: "echo {{file}} >> {ledger} && grep -q def {{file}}",
          each: [tests/test_prices.py, tests/deep/test_deep.py]}}
    inputs: ["module:shop.prices", "module:tests/test_prices.py", "module:tests/deep/test_deep.py"]
"""
        )
    )
    service.start("prices")
    assert service.done("prices").passed
    assert ledger.read_text().split() == ["tests/test_prices.py", "tests/deep/test_deep.py"]
    write(pkg, {"tests/deep/conftest.py": "import os\n"})
    (view,) = service.milestone_views()[1]
    assert view.view == "stale" and view.stale is not None and view.stale.changed == ["tests/deep/conftest.py"]
    r = service.verify(["prices"])
    assert r.ok
    assert ledger.read_text().split()[2:] == ["tests/deep/test_deep.py"]  # only the unit under it ran again
    units = {c.file: c.outcome.value for c in service.runs("prices")[-1].commands}
    assert units == {"tests/test_prices.py": "cached", "tests/deep/test_deep.py": "passed"}


def test_a_bad_pytest_option_makes_the_proofs_stale_and_removing_it_serves_the_cache(any_cli: CLI, pkg: Path) -> None:
    cli = any_cli
    python = sys.executable  # a real pytest, run by the gate
    write(
        pkg,
        {
            "plan.yaml": f"""
objective: config
milestones:
  - name: prices
    gate:
      - {{name: pytest, run: "PYTHONPATH=src {python} -m pytest -q -p no:randomly -p no:cacheprovider {{file}}",
          each: [tests/test_prices.py]}}
    inputs: ["module:shop.prices", "module:tests/test_prices.py"]
"""
        },
    )
    cli("plan", "apply", "plan.yaml", check=True)
    cli("start", "prices", check=True)
    cli("done", "prices", check=True)
    shown = cli("inputs", "prices", check=True).out
    assert "  pyproject.toml[tool.pytest] (the test runner's configuration)" in shown
    assert cli.json("inputs", "prices")["inputs"][1]["config"] == ["pyproject.toml[tool.pytest]"]
    write(pkg, {"pyproject.toml": PYPROJECT + 'addopts = "--no-such-option"\n'})
    (m,) = cli.json("list")["milestones"]
    assert m["view"] == "stale" and m["stale"]["changed"] == ["pyproject.toml[tool.pytest]"]
    r = cli("--json", "verify")
    assert r.code == 1, r.err
    (v,) = r.data["verified"]
    assert v["outcome"] == "failed" and "exit 4" in v["reason"]
    write(pkg, {"pyproject.toml": PYPROJECT})  # put back as proven: the gate cache serves it
    r = cli("--json", "verify")
    assert r.code == 0, r.err
    (v,) = r.data["verified"]
    assert v["outcome"] == "cached" and v["status"] == "done"


# -- cache: false --------------------------------------------------------------------------


def test_cache_false_runs_every_unit_however_fresh_a_shared_result_is(
    any_service: Service, pkg: Path, tmp_path: Path
) -> None:
    service = any_service
    ledger = tmp_path / "ledger.txt"
    write(pkg, {"notes.txt": "notes\n"})
    step = f'{{name: tests, run: "echo {{file}} >> {ledger} && grep -q def {{file}}", each: [tests/test_prices.py]}}'
    service.apply_plan(
        parse_plan(
            f"""
objective: cache
milestones:
  - {{name: shared, gate: [{step}], inputs: ["module:tests/test_prices.py"]}}
  - {{name: live, deps: [shared], cache: false, gate: [{step}], inputs: ["module:tests/test_prices.py", "./notes.txt"]}}
  - {{name: after, deps: [live], gate: [{step}], inputs: ["module:tests/test_prices.py", "./pyproject.toml"]}}
"""
        )
    )
    for name in ("shared", "live", "after"):
        service.start(name)
        assert service.done(name).passed
    assert ledger.read_text().split() == ["tests/test_prices.py"] * 2  # shared ran it, live ran it, after reused
    live = service.runs("live")[-1]
    assert [c.outcome.value for c in live.commands] == ["passed"]
    assert "cached" not in live.reason, live.reason
    (after,) = service.runs("after")[-1].commands
    assert after.outcome.value == "cached" and after.cached_from is not None
    assert after.cached_from.milestone == "shared"  # (live's pass is not offered to others)
    # Stale by a file its unit does not read: live runs its unit again, though passes of it are in the store.
    write(pkg, {"notes.txt": "edited\n"})
    r = service.verify(["live"])
    assert r.ok
    assert ledger.read_text().split() == ["tests/test_prices.py"] * 3
    assert [c.outcome.value for c in service.runs("live")[-1].commands] == ["passed"]


# -- env: entries: forms, and which interpreter a gate runs --------------------------------


def test_env_entries_of_a_plan_are_checked_at_their_lines() -> None:
    text = (
        "objective: o\n"  # 1
        "milestones:\n"  # 2
        "  - name: a\n"  # 3
        "    gate: 'true'\n"  # 4
        "    inputs:\n"  # 5
        "      - env:.venv/bin/python\n"  # 6
        "      - 'env:'\n"  # 7
        "  - name: b\n"  # 8
        "    gate: 'true'\n"  # 9
        "    inputs: ['env:../v/bin/python', 'env:py thon', 'env:~/venv/bin/python', 'env:.venv/', 'env:py*']\n"  # 10
        "  - {name: c, gate: 'true', inputs: ['env:python3', 'env:./.venv/bin/python', 'env:/usr/bin/python3']}\n"
    )
    with pytest.raises(MilepostError) as info:
        parse_plan(text, "plan.yaml")
    msg = info.value.message
    assert "\n" not in msg
    assert "plan.yaml:7: milestone 'a': invalid inputs[1]: names no interpreter" in msg
    assert "plan.yaml:10: milestone 'b': invalid inputs[0]: has a '..' part" in msg
    assert "plan.yaml:10: milestone 'b': invalid inputs[1]: contains white space" in msg
    assert "plan.yaml:10: milestone 'b': invalid inputs[2]: is not a command name or a path" in msg
    assert "plan.yaml:10: milestone 'b': invalid inputs[3]: names a folder, not an interpreter" in msg
    assert "plan.yaml:10: milestone 'b': invalid inputs[4]: is not a command name or a path" in msg
    assert "milestone 'c'" not in msg and "plan.yaml:6" not in msg
    good = parse_plan(text.split("  - name: b")[0].replace("      - 'env:'\n", ""), "plan.yaml")
    assert good.milestones[0].inputs == ["env:.venv/bin/python"]
    c = parse_plan("objective: o\nmilestones:\n" + text.splitlines(keepends=True)[-1], "p.yaml")
    assert c.milestones[0].inputs == ["env:python3", "env:.venv/bin/python", "env:/usr/bin/python3"]


def test_an_env_entry_refused_by_add_names_it_and_writes_nothing(cli: CLI) -> None:
    cli("item", "create", "envs", check=True)
    r = cli("add", "x", "--gate", "true", "--inputs", "env:$VENV/bin/python")
    assert r.code == 2 and "env:$VENV/bin/python" in r.err and r.err.strip().count("\n") == 0
    assert cli.json("list")["milestones"] == []


def test_the_interpreter_a_gate_runs_is_found_from_its_command(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    bin_ = root / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "python").symlink_to(sys.executable)
    (bin_ / "pytest").write_text(f"#!{bin_ / 'python'}\nimport sys\n")
    (bin_ / "tool").write_text("#!/usr/bin/env python3\n")
    (bin_ / "make-it").write_text("#!/bin/sh\nexit 0\n")
    for f in ("pytest", "tool", "make-it"):
        (bin_ / f).chmod(0o755)
    path = f"{bin_}:{os.environ.get('PATH', '')}"
    assert gate_entry("python3 -m pytest -q {file}", None, root, path) == "env:python3"
    assert gate_entry("PYTHONPATH=src python -m pytest {file}", None, root, path) == "env:python"
    assert gate_entry(".venv/bin/pytest -q {file}", None, root, path) == "env:.venv/bin/pytest"
    assert gate_entry("../.venv/bin/python -m pytest", "sub", root, path) == "env:.venv/bin/python"
    assert gate_entry(f"{bin_ / 'python'} -m pytest", None, root, path) == "env:.venv/bin/python"
    assert gate_entry("pytest -q {file}", None, root, path) == "env:pytest"  # on PATH, a script of Python
    assert gate_entry("make test", None, root, path) is None
    assert gate_entry("make-it", None, root, path) is None
    # Each simple command of a shell line: the interpreters of all of them, in order.
    assert gate_entries("cd x && python3 -m pytest 2>&1 | tee log", None, root, path) == ["env:python3"]
    line = "echo {file} >> ledger && python3 -m compileall -q {file}; .venv/bin/pytest -q {file}"
    assert gate_entries(line, None, root, path) == ["env:python3", "env:.venv/bin/pytest"]
    assert gate_entries("$PY -m pytest", None, root, path) == []  # (not a plain word: name it)
    assert gate_entries("sh -c 'python3 x.py", None, root, path) == []  # (unclosed quote)
    # An entry resolves to the interpreter itself, through a script's shebang (env's lookup on PATH too).
    assert interpreter_of(".venv/bin/pytest", root, path) == (str(bin_ / "python"), "")
    found, _ = interpreter_of("tool", root, path)
    assert found is not None and Path(found).name.startswith("python")
    assert interpreter_of("make-it", root, path)[0] is None
    assert interpreter_of("nope-xyz", root, path) == (None, "nope-xyz: not found on PATH")


# -- the environment: real virtualenvs, real pip ----------------------------------------------

BACKEND = """
import base64, hashlib, os, zipfile
NAME, VERSION = "tinydep", open("VERSION").read().strip()
def _row(z, name, data):
    z.writestr(name, data)
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={d},{len(data)}"
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    fn = f"{NAME}-{VERSION}-py3-none-any.whl"
    info = f"{NAME}-{VERSION}.dist-info"
    with zipfile.ZipFile(os.path.join(wheel_directory, fn), "w") as z:
        rows = [
            _row(z, "tinydep.py", open("tinydep.py", "rb").read()),
            _row(z, f"{info}/METADATA", f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n".encode()),
            _row(z, f"{info}/WHEEL", b"Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"),
        ]
        z.writestr(f"{info}/RECORD", "\\n".join([*rows, f"{info}/RECORD,,"]) + "\\n")
    return fn
"""


def tiny_dist(folder: Path, version: str) -> Path:
    """A distribution ``tinydep`` in a folder, built by pip with its own backend (no setuptools, no network)."""
    write(
        folder,
        {
            "pyproject.toml": (
                '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
                f'[project]\nname = "tinydep"\nversion = "{version}"\n'
            ),
            "backend.py": BACKEND,
            "VERSION": version,
            "tinydep.py": "def value():\n    return 1\n",
        },
    )
    return folder


def pip(python: Path, *args: str) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "-q", "--disable-pip-version-check", *args],
        check=True,
        capture_output=True,
        env={**os.environ, "PIP_NO_INDEX": "1", "PIP_NO_CACHE_DIR": "1"},
    )


def install(python: Path, dist: Path) -> None:
    pip(python, "install", "--no-index", "--no-build-isolation", "--no-deps", str(dist))


def test_the_probe_reads_a_folder_again_only_when_its_stat_changed(pkg: Path, tmp_path: Path) -> None:
    python = bare_venv(pkg / ".venv")
    probe = EnvProbe(pkg, pkg / ".milepost" / "cache" / "envs.json", racy_ns=0)
    first = probe.facts(str(python), os.environ)
    assert "tinydep" not in first.distributions and "pytest" in first.distributions
    assert probe.probes == 1 and probe.scans >= 1
    scans = probe.scans
    assert probe.facts(str(python), os.environ) == first
    assert (probe.probes, probe.scans) == (1, scans)  # nothing changed: a stat of each folder, no read
    install(python, tiny_dist(tmp_path / "tiny1", "1.0"))
    assert probe.facts(str(python), os.environ).distributions["tinydep"] == "1.0"
    assert probe.probes == 1 and probe.scans == scans + 1  # only the folder pip wrote in is read again
    install(python, tiny_dist(tmp_path / "tiny2", "2.0"))  # an upgrade
    assert probe.facts(str(python), os.environ).distributions["tinydep"] == "2.0"
    probe.save()
    again = EnvProbe(pkg, pkg / ".milepost" / "cache" / "envs.json", racy_ns=0)  # another process: from the file
    assert again.facts(str(python), os.environ).distributions["tinydep"] == "2.0"
    assert (again.probes, again.scans) == (0, 0)


def proven_with_tinydep(cli: CLI, pkg: Path, tmp_path: Path, more_inputs: str) -> tuple[Path, Path]:
    """A milestone whose pytest unit imports ``tinydep`` 1.0 from the workspace's ``.venv``, done: that
    interpreter and the distribution (``more_inputs``: written after its module entries)."""
    python = bare_venv(pkg / ".venv")
    dist = tiny_dist(tmp_path / "tiny", "1.0")
    install(python, dist)
    write(
        pkg,
        {
            "tests/test_prices.py": PACKAGE["tests/test_prices.py"] + "\nimport tinydep\n",
            "plan.yaml": """
objective: env
milestones:
  - name: prices
    gate:
      - {name: pytest, run: "PYTHONPATH=src .venv/bin/python -m pytest -q -p no:randomly -p no:cacheprovider {file}",
         each: [tests/test_prices.py]}
    inputs: ["module:shop.prices", "module:tests/test_prices.py"MORE]
""".replace("MORE", more_inputs),
        },
    )
    cli("plan", "apply", "plan.yaml", check=True)
    cli("start", "prices", check=True)
    cli("done", "prices", check=True)
    return python, dist


@pytest.mark.slow  # (five pip runs and three pytest gates: about 20 s on 2 cores)
def test_uninstalling_a_dependency_makes_the_proofs_stale_and_reinstalling_serves_the_cache(
    any_cli: CLI, pkg: Path, tmp_path: Path
) -> None:
    cli = any_cli
    python, dist = proven_with_tinydep(cli, pkg, tmp_path, ', "env:.venv/bin/python"')
    shown = cli.json("inputs", "prices")["inputs"][2]
    assert shown["entry"] == "env:.venv/bin/python" and shown["environment"]["distributions"]["tinydep"] == "1.0"
    assert shown["environment"]["interpreter"] == str(pkg / ".venv" / "bin" / "python")
    human = cli("inputs", "prices", check=True).out
    assert "env:.venv/bin/python: " in human and "tinydep 1.0" in human
    assert "pyproject.toml[tool.pytest] (the test runner's configuration)" in human

    pip(python, "uninstall", "-y", "tinydep")
    (m,) = cli.json("list")["milestones"]
    assert m["view"] == "stale" and m["stale"]["changed"] == ["env:.venv/bin/python[tinydep]"]
    r = cli("--json", "verify")
    assert r.code == 1, r.err
    assert r.data["verified"][0]["outcome"] == "failed"

    install(python, dist)
    r = cli("--json", "verify")
    assert r.code == 0, r.err
    (v,) = r.data["verified"]
    assert v["outcome"] == "cached" and v["status"] == "done"
    # A unit in the same state, in another item's gate, is served from the store too.
    cli("item", "create", "again", check=True)
    cli("plan", "apply", "plan.yaml", check=True)
    cli("start", "prices", check=True)
    cli("done", "prices", "--no-cache", check=True)  # the milestone-level cache off: the unit decides
    (unit,) = cli.json("runs", "prices")["runs"][-1]["commands"]
    assert unit["outcome"] == "cached", unit


@pytest.mark.slow  # (four pip runs and two pytest gates)
def test_uninstalling_a_dependency_makes_a_plan_without_env_entries_stale_and_reinstalling_serves_the_cache(
    any_cli: CLI, pkg: Path, tmp_path: Path
) -> None:
    """A hand-written milestone whose pytest step runs per file, with no
    ``env:`` entry: its fingerprint covers the step's environment (docs/proofs.md)."""
    cli = any_cli
    python, dist = proven_with_tinydep(cli, pkg, tmp_path, "")
    (m,) = cli.json("list")["milestones"]
    assert m["view"] == "done"
    pip(python, "uninstall", "-y", "tinydep")
    (m,) = cli.json("list")["milestones"]
    assert m["view"] == "stale" and m["stale"]["changed"] == ["env:.venv/bin/python[tinydep]"]
    install(python, dist)
    (m,) = cli.json("list")["milestones"]
    assert m["view"] == "done"  # put back as proven
    pip(python, "install", "--no-index", "--no-build-isolation", "--no-deps", str(tiny_dist(tmp_path / "t2", "2.0")))
    (m,) = cli.json("list")["milestones"]
    assert m["view"] == "stale" and m["stale"]["changed"] == ["env:.venv/bin/python[tinydep]"]  # upgraded
    r = cli("--json", "verify")
    assert r.code == 0, r.err
    assert [v["outcome"] for v in r.data["verified"]] == ["passed"]  # run on 2.0
    install(python, dist)  # (a downgrade: 1.0 again)
    (m,) = cli.json("list")["milestones"]
    assert m["view"] == "stale"
    r = cli("--json", "verify")
    assert r.code == 0, r.err
    (v,) = r.data["verified"]
    assert v["outcome"] == "cached" and v["status"] == "done"  # the proof on 1.0 serves it


def test_a_units_digest_follows_the_environment_its_command_runs(pkg: Path, tmp_path: Path) -> None:
    python = bare_venv(pkg / ".venv")
    cmd = GateCommand(name="t", run=".venv/bin/python -m pytest -q {file}", each=["tests/test_prices.py"])
    other = GateCommand(name="t", run="grep -q def {file}", each=["tests/test_prices.py"])

    def digests() -> tuple[str | None, str | None]:
        snap = Snapshot(pkg)
        return unit_digest(snap, cmd, "tests/test_prices.py", None), unit_digest(
            snap, other, "tests/test_prices.py", None
        )

    before, plain = digests()
    assert before is not None and plain is not None
    install(python, tiny_dist(tmp_path / "tiny", "1.0"))
    time.sleep(0.01)
    after, plain_after = digests()
    assert after != before  # a distribution added where its interpreter imports from
    assert plain_after == plain  # a command that starts no Python does not follow it
    pip(python, "uninstall", "-y", "tinydep")
    assert digests() == (before, plain)  # put back: the same unit, its pass kept in the store applies


def test_a_gates_fingerprint_follows_the_environment_of_its_each_steps(pkg: Path, tmp_path: Path) -> None:
    """A milestone with an ``each:`` step whose command starts a Python is
    bound to that environment without an ``env:`` entry of its own, as its
    units are; a step that starts none, or runs once, is not."""
    python = bare_venv(pkg / ".venv")
    inputs = ["module:shop.prices", "module:tests/test_prices.py"]
    each = GateCommand(name="t", run=".venv/bin/python -m pytest -q {file}", each=["tests/test_prices.py"])
    plain = GateCommand(name="t", run="grep -q def {file}", each=["tests/test_prices.py"])
    once = GateCommand(name="t", run=".venv/bin/python -m pytest -q tests")

    def digests() -> list[str | None]:
        snap = Snapshot(pkg)
        return [gate_fingerprint(snap, inputs, [c], None).digest for c in (each, plain, once)]

    before = digests()
    assert all(before)
    derived = gate_fingerprint(Snapshot(pkg), inputs, [each], None).files
    assert derived["env:.venv/bin/python[pytest]"].startswith("dist:")
    named = gate_fingerprint(Snapshot(pkg), [*inputs, "env:.venv/bin/python"], [each], None)
    assert named.files == derived  # named on the milestone: the same keys, once
    install(python, tiny_dist(tmp_path / "tiny", "1.0"))
    time.sleep(0.01)
    after = digests()
    assert after[0] != before[0]  # a distribution added where its each: step's python imports from
    assert after[1:] == before[1:]  # no Python started per file, or no each: the plan's env: entries decide
    pip(python, "uninstall", "-y", "tinydep")
    assert digests() == before  # put back: the same fingerprint, the gate cache serves it


def test_an_env_entry_naming_no_interpreter_makes_the_fingerprint_incomplete(pkg: Path) -> None:
    fp = Snapshot(pkg).fingerprint(["env:.venv/bin/python"], "spec")
    assert fp.digest is None and fp.unreadable == {"env:.venv/bin/python": "no such file"}
    fp = Snapshot(pkg).fingerprint(["env:no-such-python-here"], "spec", {"PATH": str(pkg)})
    assert fp.unreadable == {"env:no-such-python-here": "not found on PATH"}
    assert json.dumps(fp.unreadable)
