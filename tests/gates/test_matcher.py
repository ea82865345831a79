"""The fast file matcher (:class:`milepost.gates.listing.FileIndex`: literal
paths and folders by bisection, globs only under their literal folder) holds
equal to ``pathspec``'s gitignore rules, the definition it stands in for, on
generated patterns and trees."""

from __future__ import annotations

import pathspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from milepost.gates.listing import FileIndex, _git_form

NAMES = ["src", "pkg", "pkg2", "pkg.py", "a.py", "b.md", "tests", "x", "x.py", "s p"]
paths = st.lists(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4).map("/".join), min_size=1, max_size=25)


@st.composite
def patterns(draw: st.DrawFn) -> str:
    words = st.sampled_from([*NAMES, "*", "**", "*.py", "p*", "[ab].py", "?.py"])
    parts = draw(st.lists(words, min_size=1, max_size=3))
    body = "/".join(parts)
    if draw(st.booleans()):
        body = "./" + body
    body += draw(st.sampled_from(["", "", "/", "/**"]))
    return ("!" if draw(st.integers(0, 5)) == 0 else "") + body


def pathspec_match(files: list[str], pats: list[str]) -> list[str]:
    spec = pathspec.GitIgnoreSpec.from_lines([_git_form(p) for p in pats])
    return sorted(f for f in set(files) if spec.match_file(f))


# The strategies use no `random`; Hypothesis still says so when another thread of the worker process (a
# Prefect client left by an earlier test) moves the global random state while an example is drawn.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@settings(max_examples=400, deadline=None)
@given(files=paths, pats=st.lists(patterns(), min_size=1, max_size=4))
def test_the_fast_matcher_equals_pathspec(files: list[str], pats: list[str]) -> None:
    # A tree has no file that is also a folder.
    files = sorted({f for f in files if not any(g.startswith(f + "/") for g in files)})
    assert FileIndex(files).match(pats) == pathspec_match(files, pats)


def test_a_folder_pattern_is_that_folder_not_its_namesakes() -> None:
    files = ["src/pkg/a.py", "src/pkg/sub/b.py", "src/pkg2/x.py", "src/pkg.py", "src/pkg-old/c.py"]
    index = FileIndex(files)
    for pattern in ("src/pkg/**", "src/pkg/", "./src/pkg/**", "src/pkg"):
        assert index.match([pattern]) == ["src/pkg/a.py", "src/pkg/sub/b.py"], pattern
        assert index.match([pattern]) == pathspec_match(files, [pattern])
