"""The plain block reader (the fast path of a plan file) against PyYAML.

Whatever text it accepts, it must give exactly the data PyYAML's safe
loader gives (types included: ``yes`` is True, ``010`` is 8); whatever it
does not accept, PyYAML reads. Generated documents mix the form's lines with
the characters and shapes that leave it.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from milepost.errors import PlanFileError
from milepost.plainyaml import read_plain
from milepost.plandoc import build, compose
from milepost.planfile import parse_plan


def precise(text: str) -> tuple[bool, Any]:
    try:
        node = compose(text)
        return True, None if node is None else build(node)
    except (yaml.YAMLError, RecursionError):
        return False, None


def same(text: str) -> Any:
    """read_plain's answer, checked against PyYAML's (repr: True is not 1)."""
    fast = read_plain(text)
    if fast is not None:
        ok, data = precise(text)
        assert ok, f"the fast path read what PyYAML refuses: {text!r}"
        assert repr(fast) == repr(data), text
    return fast


# Scalars: words with the characters that end, start or change a YAML scalar.
_NASTY = st.sampled_from([*" :#-'\"[]{},&*!|>%@`?~=.<+^$/\\()_", "yes", "no", "on", "0x1", "1_0", "1e3", "~"])
_WORD = st.text(alphabet="abcnoyNYTF019_", min_size=1, max_size=6)
_SCALAR = st.lists(st.one_of(_WORD, _WORD, _WORD, _WORD, _NASTY), min_size=0, max_size=4).map("".join)
# Mostly valid YAML: words, and the marks a plan's commands and texts hold inside.
_INNER = st.sampled_from([*" -./:=,()'\"$+~^", "  ", " -", "./", ": ", "::", " #x", "a#b"])
_CLEAN = st.lists(st.one_of(_WORD, _WORD, _INNER), min_size=1, max_size=5).map(lambda xs: "a" + "".join(xs))


def _quoted(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _values(scalar: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        scalar,
        _WORD,
        scalar.map(_quoted),
        scalar.map(lambda s: f'"{s}"'),
        st.lists(st.one_of(scalar, _WORD), max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        scalar.map(lambda s: f"{s} # note"),
    )


_KEYS = st.sampled_from(["name", "deps", "gate", "acceptance", "yes", "1", "a.b", "on", "x-y", "n", "y", "null"])


@st.composite
def documents(draw: st.DrawFn, clean: bool = False) -> str:
    lines: list[str] = []
    _VALUE = _values(_CLEAN if clean else _SCALAR)
    _KEY = _KEYS if clean else st.one_of(_KEYS, _SCALAR)

    def mapping(indent: int, depth: int, first_prefix: str = "") -> None:
        for k in range(draw(st.integers(1, 4))):
            pad = first_prefix if k == 0 and first_prefix else " " * indent
            key = draw(_KEY)
            kind = draw(st.integers(0, 5 if depth < 3 else 2))
            if kind <= 2:
                lines.append(f"{pad}{key}: {draw(_VALUE)}".rstrip() if kind else f"{pad}{key}:")
            elif kind == 3:
                lines.append(f"{pad}{key}:")
                mapping(indent + draw(st.sampled_from([1, 2, 4])), depth + 1)
            else:
                lines.append(f"{pad}{key}:")
                sequence(indent + draw(st.sampled_from([0, 2])), depth + 1)
            if draw(st.integers(0, 9)) == 0:
                lines.append(draw(st.sampled_from(["", "# c", "   # c", "  ", " " * (indent + 3) + "more"])))

    def sequence(indent: int, depth: int) -> None:
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                lines.append(" " * indent + "- " + draw(_VALUE))
            else:
                mapping(indent + 2, depth + 1, first_prefix=" " * indent + "- ")

    mapping(0, 0)
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n", "\n...\n", "\n---\n"]))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_what_the_fast_path_reads_is_what_pyyaml_reads(text: str) -> None:
    same(text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(clean=True))
def test_documents_of_words_and_inner_marks_read_the_same(text: str) -> None:
    same(text)


@settings(max_examples=300, deadline=None)
@given(documents(clean=True), st.integers(0, 10_000), st.sampled_from(list(" -:#'\"[]\n\t&*!|>{}")))
def test_one_changed_character_never_makes_the_paths_differ(text: str, at: int, ch: str) -> None:
    at %= len(text) + 1
    same(text[:at] + ch + text[at:])
    same(text[:at] + text[at + 1 :])


def test_a_plan_in_the_usual_form_takes_the_fast_path() -> None:
    text = """\
# a plan
objective: ship it   # the goal
defaults:
  retries: 3
milestones:
- name: build
  gate: python3 -m compileall -q src
  inputs: [src/**, ./setup.py]
- name: test
  deps: [build]
  acceptance: 'the tests pass, all of them'
  gate:
    - name: unit
      run: "pytest -q tests"
      timeout: 60.5
  review: yes
  cache: off
"""
    data = same(text)
    assert data == {
        "objective": "ship it",
        "defaults": {"retries": 3},
        "milestones": [
            {"name": "build", "gate": "python3 -m compileall -q src", "inputs": ["src/**", "./setup.py"]},
            {
                "name": "test",
                "deps": ["build"],
                "acceptance": "the tests pass, all of them",
                "gate": [{"name": "unit", "run": "pytest -q tests", "timeout": 60.5}],
                "review": True,
                "cache": False,
            },
        ],
    }
    plan = parse_plan(text, "plan.yaml")
    assert [m.name for m in plan.milestones] == ["build", "test"]


@pytest.mark.parametrize(
    "text",
    [
        "a: &x 1\nb: *x\n",  # anchors
        "a: !!str 1\n",  # tags
        "a: |\n  text\n",  # block scalars
        "a: one\n  two\n",  # a scalar over two lines
        'a: "tab\\there"\n',  # escapes
        "a: 1\na: 2\n",  # a duplicate key (PyYAML's path names both lines)
        "a:\tb\n",  # a tab
        "a: caf\u00e9\n",  # non-ASCII
        "---\na: 1\n",
        "a: {b: 1}\n",
        "a: =\n",  # YAML 1.1's value tag: PyYAML has no constructor for it (and says so, with the line)
        "=: 1\n",
        "- =\n  - ^h\n",
        "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 700)),  # nested deeper than the reader goes
    ],
)
def test_what_leaves_the_form_goes_to_pyyaml(text: str) -> None:
    assert read_plain(text) is None


def test_a_scalar_pyyaml_cannot_make_is_refused_with_its_line() -> None:
    with pytest.raises(PlanFileError, match=r"^p.yaml:4: invalid YAML: a bare = is YAML 1.1's 'value' mark, not text"):
        parse_plan("objective: x\nmilestones:\n- name: a\n  acceptance: =\n", "p.yaml")
    with pytest.raises(PlanFileError, match=r"^p.yaml:3: invalid YAML: the tag '!foo' is not plain data .*: remove"):
        parse_plan("objective: x\nmilestones:\n- name: !foo a\n", "p.yaml")
    with pytest.raises(PlanFileError, match=r"^p.yaml:2: .*the tag 'tag:yaml.org,2002:python/name:os.system' is not"):
        parse_plan("objective: x\nmilestones: !!python/name:os.system\n", "p.yaml")
