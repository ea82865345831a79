"""The drive summary's columns: aligned plain text, statuses coloured, user
text shown as written (markup and control characters neutralised)."""

from __future__ import annotations

import io

from rich.console import Console

from milepost.present.terminal import columns, styled


def _render(head: list[str], rows: list[list[str]], colour: bool = False) -> str:
    out = io.StringIO()
    con = Console(file=out, width=200, soft_wrap=True, highlight=False, color_system="standard" if colour else None)
    styles = {1: [styled(r[1]) for r in rows]}
    columns(con, head, rows, styles)
    return out.getvalue()


def test_columns_line_up_and_the_last_runs_on() -> None:
    rows = [["1", "done", "a reason"], ["12", "needs_fix", "exit 1: " + "x" * 150]]
    lines = _render(["id", "status", "last reason"], rows).splitlines()
    assert lines[0].split() == ["id", "status", "last", "reason"]
    # Every row's third column starts where its header does; the long reason is not cut.
    at = lines[0].index("last reason")
    assert all(line[at:].startswith(r[2][:10]) for line, r in zip(lines[1:], rows, strict=True))
    assert lines[2].endswith("x" * 150)
    assert lines[1].index("done") == lines[2].index("needs_fix") == lines[0].index("status")


def test_user_text_is_shown_as_written_and_statuses_are_coloured() -> None:
    rows = [["1", "stuck", "[bold]not markup[/] and a\x1b[31m escape"]]
    plain = _render(["id", "status", "last reason"], rows)
    assert "[bold]not markup[/]" in plain and "\x1b" not in plain
    coloured = _render(["id", "status", "last reason"], rows, colour=True)
    assert "\x1b[" in coloured.split("stuck")[0].splitlines()[-1]  # the status cell is styled
    assert "[bold]not markup[/]" in coloured
