"""The drive summary's columns: aligned plain text, statuses coloured, user
text shown as written (markup and control characters neutralised)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

from rich.console import Console

from milepost.events import JsonLinesReporter, LineReporter
from milepost.present.live import LiveReporter
from milepost.present.terminal import columns, last_lines, styled
from milepost.service import Service


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


def test_the_milestone_list_is_aligned_columns_with_long_cells_cut() -> None:
    """``list``: a milestone a line; the deps and inputs after the first
    that fit with how many more, the gate at 40 characters, user text
    neutralised, the status coloured."""
    from milepost.graph import GateCommand, MilestoneStatus
    from milepost.graph.status import DisplayStatus
    from milepost.present.terminal import milestone_table
    from milepost.results import MilestoneView

    many = [f"dep-number-{i}" for i in range(30)]
    views = [
        MilestoneView(id=1, name="a", view=DisplayStatus.READY, gate=[GateCommand(run="echo " + "y" * 80)]),
        MilestoneView(
            id=2,
            name="b",
            deps=many,
            view=DisplayStatus.BLOCKED,
            inputs=["src/**", "tests/**"],
            status=MilestoneStatus.PENDING,
            reason="[red]not markup[/] \x1b[2J",
        ),
    ]
    out = io.StringIO()
    milestone_table(Console(file=out, width=120, soft_wrap=True, highlight=False, color_system=None), views)
    head, first, second = out.getvalue().splitlines()
    assert head.split() == ["id", "name", "status", "budget", "deps", "gate", "inputs", "note"]
    assert "dep-number-0, dep-number-1, dep-number-2 +27" in second
    assert ("echo " + "y" * 34 + "…") in first and "src/** +1" in second
    assert second.endswith("[red]not markup[/] \\x1b[2J") and "\x1b" not in second
    assert first.index("ready") == second.index("blocked") == head.index("status")
    coloured = io.StringIO()
    milestone_table(Console(file=coloured, width=120, soft_wrap=True, color_system="standard"), views)
    assert "\x1b[" in coloured.getvalue().splitlines()[1].split("ready")[0]


def test_the_live_view_counts_a_gate_from_its_own_start(service: Service) -> None:
    """A first gate started while Prefect loaded is reported later, with its
    start: the live view's running time counts from that start, not from the
    report; a gate reported as it starts counts from now."""
    item = service.create_item("live").id
    service.add_milestone("early", gate="true", item=item)
    service.add_milestone("late", gate="true", item=item)
    session = service.drive_session(item, "me:1")
    early, late = session.claim_next(), session.claim_next()
    assert early is not None and late is not None
    live = LiveReporter(Console(file=io.StringIO(), width=120), service.milestone_views(item)[1])
    live.gate_started(early, datetime.now(UTC) - timedelta(seconds=42))
    live.gate_started(late)
    out = io.StringIO()
    Console(file=out, width=120).print(live._render())
    assert "early (42 s), late (0 s)" in out.getvalue(), out.getvalue()


def test_plain_lines_are_stamped_with_when_it_happened(service: Service) -> None:
    """A gate started before its report is stamped with its own start; one
    reported as it starts, with now."""
    item = service.create_item("stamps").id
    service.add_milestone("a", gate="true", item=item)
    session = service.drive_session(item, "me:1")
    claim = session.claim_next()
    assert claim is not None
    out = io.StringIO()
    at = datetime(2026, 12, 4, 9, 8, 7, tzinfo=UTC)
    LineReporter(out).gate_started(claim, at)
    LineReporter(out).gate_started(claim)
    first, second = out.getvalue().splitlines()
    assert first == f"{at.astimezone():%H:%M:%S} start  a (attempt 1)", first
    assert second.endswith("start  a (attempt 1)") and not second.startswith(f"{at.astimezone():%H:%M:%S}")


def test_reports_are_in_time_order_the_opening_first(service: Service) -> None:
    """Issue 42: the opening line is stamped with the drive's start (before
    its first gates), and a stamp never goes back, in text and in JSON: an
    event told after a later one carries that one's time."""
    item = service.create_item("order").id
    service.add_milestone("a", gate="true", item=item)
    session = service.drive_session(item, "me:1")
    claim = session.claim_next()
    assert claim is not None
    began = datetime(2026, 12, 4, 9, 8, 1, tzinfo=UTC)
    ran, later = began + timedelta(seconds=5), began + timedelta(seconds=9)
    text, lines = io.StringIO(), io.StringIO()
    for reporter in (LineReporter(text, started=began), JsonLinesReporter(lines, started=began)):
        reporter.drive_started(item, "order", 1, None)
        reporter.gate_started(claim, later)
        reporter.gate_started(claim, ran)  # told after a later event
    stamps = [line.split()[0] for line in text.getvalue().splitlines()]
    local = [f"{t.astimezone():%H:%M:%S}" for t in (began, later, later)]
    assert stamps == local, text.getvalue()
    events = [json.loads(line) for line in lines.getvalue().splitlines()]
    assert [e["at"] for e in events] == [t.isoformat() for t in (began, later, later)], events
    assert events[0]["event"] == "drive_started"


def test_a_failed_gates_last_lines_do_not_open_on_a_traceback_marker() -> None:
    tb = [
        "Traceback (most recent call last):",
        '  File "/x/m.py", line 3, in <module>',
        "    value = compute(1) + compute(2)",
        "            ^^^^^^^^^^",
        '  File "/x/m.py", line 1, in compute',
        "    return 1 / 0",
        "           ~~^~~",
        "ZeroDivisionError: division by zero",
    ]
    assert last_lines("\n".join(tb), 5) == tb[4:]  # (from the ^^^^ line on, its line above cut off)
    assert last_lines("\n".join(tb), 2) == tb[-1:]
    assert last_lines("\n".join(tb), 8) == tb
    assert last_lines("a\n^^^\n") == ["a", "^^^"]


def test_a_drive_that_integrated_aside_ends_with_the_command_that_brings_the_work_in() -> None:
    import json as _json

    from rich.console import Console

    from milepost.events import DriveSummary
    from milepost.present.terminal import show_summary

    line = "the merged work is on milepost/1/integration, not on main; bring it in: git merge milepost/1/integration"
    summary = DriveSummary(item=1, objective="o", ok=True, message="all done", bring_in=line)
    con = Console(record=True, width=300)
    show_summary(con, summary)
    assert con.export_text().splitlines()[-1] == line
    assert _json.loads(summary.model_dump_json())["bring_in"] == line
    plain = DriveSummary(item=1, objective="o", ok=True, message="all done")
    assert "bring_in" not in plain.model_dump() and "bring it in" not in _shown(plain)


def _shown(summary: object) -> str:
    from rich.console import Console

    from milepost.present.terminal import show_summary

    con = Console(record=True, width=300)
    show_summary(con, summary)
    return con.export_text()
