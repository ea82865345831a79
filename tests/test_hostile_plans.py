"""Generated plan documents, plain and with ``--json``: none crashes
milepost, and a refused one changes nothing (the table of
``tests/test_hostile.py`` holds the hand-made ones)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_hostile import fingerprint, run_main, strict_json, template

__all__ = ["template"]  # the workspace fixture this module copies


KEYS = [
    "objective",
    "milestones",
    "defaults",
    "plan_status",
    "name",
    "deps",
    "gate",
    "retries",
    "timeout",
    "acceptance",
    "review",
    "fix",
    "retry_delay",
    "hypothesis",
    "run",
    "env",
    "cwd",
    "x",
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["a", "b", "build", "true", "exit 1", "ready", "draft", "a\n", "\x00", "\x1b[2J"])
)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)
plans = (
    st.fixed_dictionaries(
        {"objective": st.text(min_size=1, max_size=30)},
        optional={
            "milestones": st.lists(
                st.dictionaries(st.sampled_from(KEYS), documents, max_size=5) | documents, max_size=4
            ),
            "defaults": documents,
            "plan_status": st.sampled_from(["draft", "ready", "bogus"]) | documents,
        },
    )
    | documents
)


@pytest.fixture(scope="module")
def plan_ws(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("plans") / "ws"
    shutil.copytree(template, ws)
    return ws


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=plans, as_yaml=st.booleans())
def test_generated_plan_documents_never_crash_and_refusals_change_nothing(
    doc: Any, as_yaml: bool, plan_ws: Path
) -> None:
    import yaml

    name = "gen.yaml" if as_yaml else "gen.json"
    text = yaml.safe_dump(doc, allow_unicode=True) if as_yaml else json.dumps(doc)
    (plan_ws / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    before = fingerprint(plan_ws)
    r = run_main(plan_ws, ["--json", "plan", "apply", name])
    assert "Traceback" not in r.err
    assert r.code in (0, 2), (r.code, r.out, r.err)
    out = strict_json(r.out)
    if r.code == 2:
        assert out["error"]["exit_code"] == 2 and "\n" not in out["error"]["message"]
        assert fingerprint(plan_ws) == before
    else:
        exported = run_main(plan_ws, ["--json", "plan", "export", str(out["id"])])
        assert exported.code == 0 and strict_json(exported.out)["objective"] == out["objective"]
