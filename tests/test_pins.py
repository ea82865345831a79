"""The libraries whose internals milepost uses are pinned to one minor
version in pyproject.toml; this fails, naming the pinned range and what
milepost uses, when the installed version leaves it (an upgrade is then
a decision: run the suite and the benchmarks, move the pin)."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent

# The distribution, and what of its internals milepost uses.
INTERNALS = {
    "prefect": "flows/drive.py starts its temporary server (prefect.server.api.server.SubprocessASGIServer);"
    " flows/plan_nodes.py emits task-run state events (prefect.utilities.engine.emit_task_run_state_change_event)",
    "sqlalchemy": "milepost/service/_prepared.py compiles statements once (SQLCompiler.positiontup, .binds,"
    " BindParameter.effective_value) and runs them on the driver's cursor",
    "pyyaml": "milepost/plandoc.py overrides the loader's resolver hooks (descend_resolver, ascend_resolver,"
    " resolve) and reads yaml_implicit_resolvers; milepost/plainyaml.py types scalars by those rules",
}


def _pins() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    return {r.name.lower(): r for r in reqs}


@pytest.mark.parametrize("dist", sorted(INTERNALS))
def test_a_library_whose_internals_milepost_uses_is_in_its_pinned_range(dist: str) -> None:
    req = _pins()[dist]
    installed = version(dist)
    assert req.specifier.contains(installed, prereleases=True), (
        f"{dist} {installed} is outside the range pyproject.toml pins: {dist}{req.specifier}."
        f" milepost uses its internals: {INTERNALS[dist]}. Run the suite and benchmarks/bench_plan.py"
        " --plain-ways on the new version, then move the pin (and this test's reasons) together."
    )


@pytest.mark.parametrize("dist", sorted(INTERNALS))
def test_the_pin_is_one_minor_version(dist: str) -> None:
    """``>=X.Y...,<X.(Y+1)``: a pin widened to the next major would hide an upgrade."""
    spec = _pins()[dist].specifier
    lower = [Version(s.version) for s in spec if s.operator == ">="]
    upper = [Version(s.version) for s in spec if s.operator == "<"]
    assert len(lower) == 1 and len(upper) == 1, f"{dist}{spec}: expected >=X.Y,<X.(Y+1)"
    lo, hi = lower[0], upper[0]
    assert (hi.major, hi.minor) == (lo.major, lo.minor + 1), f"{dist}{spec} spans more than one minor version"


def test_every_pin_names_its_reason_in_pyproject() -> None:
    """The pinned lines say what they pin for (a comment), and nothing else is pinned that tightly unexplained."""
    text = (ROOT / "pyproject.toml").read_text()
    for dist in INTERNALS:
        line = next(x for x in text.splitlines() if re.match(rf'\s*"{dist}[>=<]', x, re.I))
        assert "#" in line, line
