"""The hint after an unknown name (graph/hints.py): the closest known name
when one is close, the first names and how many there are in all."""

from __future__ import annotations

import pytest

from milepost.errors import NotFoundError
from milepost.graph.dag import WorkGraph
from milepost.graph.hints import known_names
from milepost.graph.models import Milestone

NINE = ["analyze-a", "analyze-b", "analyze-c", "extract-a", "extract-b", "extract-c", "merge", "test", "commit"]


def test_a_misspelt_name_gets_the_closest_and_a_long_list_says_how_many() -> None:
    assert known_names("analyse-a", NINE) == (
        "did you mean 'analyze-a'? known: analyze-a, analyze-b, analyze-c, extract-a, extract-b, extract-c,"
        " merge, test, ... (9 in all)"
    )


def test_nothing_close_lists_the_names_alone() -> None:
    assert known_names("zzz", ["a", "b", "c"]) == "known: a, b, c"
    assert known_names("zzz", []) == "known: none yet"


def test_a_work_graph_refuses_an_unknown_name_with_the_hint() -> None:
    g = WorkGraph([Milestone(id=i + 1, name=n) for i, n in enumerate(NINE)])
    with pytest.raises(NotFoundError, match=r"no milestone 'comit' in this work item; did you mean 'commit'\?"):
        g.get("comit")


def test_a_plans_unknown_deps_get_the_closest_name_for_as_many_as_a_report_shows() -> None:
    from milepost.graph.validate import milestone_problems

    ms = [Milestone(id=i + 1, name=n) for i, n in enumerate(NINE)]
    ms += [Milestone(id=100 + i, name=f"late-{i}", deps=["comit"]) for i in range(60)]
    said = [str(e) for _, e in milestone_problems(ms)]
    assert len(said) == 60 and all("depends on unknown milestone 'comit'" in s for s in said), said[:2]
    assert all("did you mean 'commit'?" in s for s in said[:50]), said[0]
    assert not any("did you mean" in s for s in said[50:]) and "(69 in all)" in said[-1], said[-1]
