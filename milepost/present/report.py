"""A drive's result where CI looks: a JUnit XML report (one test case per
milestone) and a markdown summary for ``GITHUB_STEP_SUMMARY``.

JUnit, as CI systems read it: a milestone that is done passed; a stuck (or
needs_fix) one failed, its failure carrying the last reason and the tail of
its last log; a stale one (done, but its inputs changed and its re-proof did
not happen) failed with the changed paths; a milestone that could not run
(blocked — also behind a reopened dep —, locked, hypothesis, waiting for
review, outside ``--until``, held by another driver) is skipped with what
holds it. Attempts, status and host are properties; the time is the gate
time spent in this drive. A milestone whose attempt in this drive was
``cached`` (a passed run on the same gate and inputs stood in, nothing ran)
passed, and says so: the properties ``outcome`` (``cached``) and
``cached_from_item``, ``cached_from_milestone``, ``cached_from_attempt``
name the run reused, and its ``system-out`` says it in a sentence. A
milestone proven in an earlier drive (done, not run in this one) passed and
says so too: ``outcome`` ``proven_earlier``, ``proven_in_attempt`` and
``proven_at`` (its passed run), and a ``system-out`` sentence; the step
summary's time reads ``earlier (attempt N)``. The suite's time is the
drive's wall time (its gates ran side by side: their sum is not it).

A milestone with a ``do:`` command (docs/doers.md) carries its doer's
evidence as properties: ``do_runs``, ``do_cost_usd_total`` and
``do_tokens_total`` (all its do runs), and its last do run's ``do_attempt``,
``do_outcome``, ``do_reason``, ``do_exit_code``, ``do_duration``,
``do_cost_usd``, ``do_tokens``, ``do_session`` (its agent's session),
``do_usage_warning`` (a usage report not read), ``do_base_commit``,
``do_result_commit``, ``do_merge_commit``, ``do_diff_stat``, ``do_files``
(the paths its change touched, separated by spaces) and ``do_log``; a
failure's text names the doer's outcome
when one ran in the last attempt. The suite's properties add the drive's
doers in all (``do_runs``, ``do_passed``, ``do_cost_usd``, ``do_tokens``)
when any ran."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from milepost.events import DriveSummary, MilestoneSummary, cached_text
from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.status import DisplayStatus
from milepost.present.diagram import to_mermaid
from milepost.present.terminal import cost_facts, do_outcome
from milepost.results import DoRun, GateRun
from milepost.service import Service

__all__ = ["junit_xml", "step_summary"]

TAIL_LINES = 40
# Characters XML 1.0 cannot hold (a gate's output may have any byte).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def junit_xml(svc: Service, summary: DriveSummary) -> str:
    _, g = svc.graph(summary.item, proofs=False)
    views = {m.name: m for m in summary.milestones}
    scope = set(summary.scope) if summary.scope is not None else None
    suite_name = _xml_text(f"work item {summary.item}: {summary.objective}")
    failures = skipped = 0
    total_time = summary.duration  # the drive's wall time (see the module)
    began = datetime.now(UTC) - timedelta(seconds=summary.duration)
    cases = []
    for ms in summary.milestones:
        m = g.get(ms.name)
        case = ET.Element(
            "testcase", classname=f"milepost.item-{summary.item}", name=ms.name, time=f"{ms.duration:.3f}"
        )
        dos = svc.do_runs(ms.name, summary.item) if m.has_doer else []
        earlier = proven_earlier(svc, summary.item, ms, began)
        props = ET.SubElement(case, "properties")
        for key, value in _case_props(ms, earlier) + _do_props(dos):
            ET.SubElement(props, "property", name=str(key), value=_xml_text(str(value)))
        if ms.cached_from is not None:
            said = f"cached: not run; the passed run of {cached_text(ms.cached_from)} on the same gate and inputs"
            said += " stood in"
            ET.SubElement(case, "system-out").text = _xml_text(said)
        elif earlier is not None:
            when = f"{earlier.finished_at:%Y-%m-%d %H:%M:%S} UTC"
            said = f"proven in an earlier drive: attempt {earlier.attempt}, passed at {when}; not run in this one"
            ET.SubElement(case, "system-out").text = _xml_text(said)
        view = views[ms.name].view if ms.name in views else display_status(g, m)
        if scope is not None and ms.name not in scope and view is not DisplayStatus.DONE:
            skipped += 1
            ET.SubElement(case, "skipped", message=_xml_text(f"outside --until {summary.until}"))
        elif view is DisplayStatus.DONE:
            pass
        elif view is DisplayStatus.STALE:
            failures += 1
            why = ms.stale.reason if ms.stale is not None else "inputs changed since proven"
            failure = ET.SubElement(case, "failure", message=_xml_text(f"stale: {why}"), type=view)
            failure.text = _xml_text(_last_tail(svc, summary.item, ms.name, dos))
        elif view in (DisplayStatus.STUCK, DisplayStatus.NEEDS_FIX):
            failures += 1
            reason = ms.waiting_for_change or ms.last_reason or m.reason or view
            failure = ET.SubElement(case, "failure", message=_xml_text(f"{view}: {reason}"), type=view)
            failure.text = _xml_text(_last_tail(svc, summary.item, ms.name, dos))
        else:
            skipped += 1
            ET.SubElement(case, "skipped", message=_xml_text(_held_by(g, ms.name, view)))
        cases.append(case)
    root = ET.Element(
        "testsuites",
        name="milepost",
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{total_time:.3f}",
    )
    suite = ET.SubElement(
        root,
        "testsuite",
        name=suite_name,
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{total_time:.3f}",
        timestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("item", summary.item),
        ("ok", summary.ok),
        ("message", summary.message),
        ("flow_run", summary.flow_run_url or summary.flow_run_id or ""),
        ("gate_runs", summary.gate_runs),
        ("cached", summary.cached),
        *_do_totals(summary),
    ):
        ET.SubElement(props, "property", name=key, value=_xml_text(str(value)))
    suite.extend(cases)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def proven_earlier(svc: Service, item: int, ms: MilestoneSummary, began: datetime) -> GateRun | None:
    """The passed run that proved a done milestone before this drive (which
    ``began`` then), when the drive did not run it; else None."""
    if ms.view is not DisplayStatus.DONE or ms.cached_from is not None or ms.duration > 0:
        return None
    passed = [r for r in svc.runs(ms.name, item) if r.passed]
    if not passed or passed[-1].finished_at >= began:
        return None
    return passed[-1]


def _case_props(ms: MilestoneSummary, earlier: GateRun | None = None) -> list[tuple[str, object]]:
    """A milestone's properties: status, budget, attempts, time (and the run a
    cached attempt reused, or the earlier drive's run that proved it)."""
    props: list[tuple[str, object]] = [
        ("status", ms.view),
        ("budget", f"{ms.attempts}/{ms.max_attempts}"),
        ("id", ms.id),
        ("last_attempt", ms.last_attempt or ""),
        ("total_time", f"{ms.total_duration:.3f}"),
    ]
    if ms.cached_from is not None:
        src = ms.cached_from
        props += [
            ("outcome", "cached"),
            ("cached_from_item", src.item),
            ("cached_from_milestone", src.milestone),
            ("cached_from_attempt", src.attempt),
        ]
    elif earlier is not None:
        props += [
            ("outcome", "proven_earlier"),
            ("proven_in_attempt", earlier.attempt),
            ("proven_at", earlier.finished_at.isoformat()),
        ]
    return props


def _do_props(dos: list[DoRun]) -> list[tuple[str, object]]:
    """A doer milestone's evidence (docs/doers.md): how many do runs, what they
    cost in all, and its last do run's outcome, exit, cost, commits and change."""
    if not dos:
        return []
    d = dos[-1]

    def blank(value: object) -> object:
        return "" if value is None else value

    return [
        ("do_runs", len(dos)),
        ("do_cost_usd_total", f"{sum(r.cost_usd or 0.0 for r in dos):.4f}"),
        ("do_attempt", d.attempt),
        ("do_outcome", d.outcome),
        ("do_reason", d.reason),
        ("do_exit_code", blank(d.exit_code)),
        ("do_duration", f"{d.duration:.3f}"),
        ("do_cost_usd", blank(d.cost_usd)),
        ("do_tokens", blank(d.tokens)),
        ("do_tokens_total", sum(r.tokens or 0 for r in dos)),
        ("do_session", blank(d.session)),
        ("do_usage_warning", blank(d.usage_warning)),
        ("do_base_commit", blank(d.base_commit)),
        ("do_result_commit", blank(d.result_commit)),
        ("do_merge_commit", blank(d.merge_commit)),
        ("do_diff_stat", " ".join((d.diff_stat or "").split())),
        ("do_files", " ".join(d.files or [])),
        ("do_log", blank(d.log_path)),
    ]


def _do_totals(summary: DriveSummary) -> list[tuple[str, object]]:
    """The drive's doers in all, when any ran."""
    t = summary.doers
    if t is None:
        return []
    return [("do_runs", t.runs), ("do_passed", t.passed), ("do_cost_usd", f"{t.cost_usd:.4f}"), ("do_tokens", t.tokens)]


def _last_tail(svc: Service, item: int, name: str, dos: list[DoRun]) -> str:
    """A failure's text: its last attempt's reason and log, its doer's outcome
    when one ran in that attempt, and the tail of its log."""
    runs = svc.runs(name, item)
    if not runs:
        return ""
    last = runs[-1]
    lines = last.tail.rstrip().splitlines()[-TAIL_LINES:]
    head = [f"attempt {last.attempt}: {last.reason} (log: {last.log_path})"]
    do = next((d for d in dos if d.attempt == last.attempt), None)
    if do is not None:
        head.append(f"{do_outcome(do)} (do log: {do.log_path})")
    return "\n".join([*head, *lines])


def _held_by(g: WorkGraph, name: str, view: DisplayStatus) -> str:
    if view is DisplayStatus.BLOCKED:
        waiting = ", ".join(f"{d.name} ({display_status(g, d)})" for d in g.undone_deps(name))
        return f"blocked by {waiting}" if waiting else "blocked"
    return {
        "locked": "locked: held for an external condition",
        "hypothesis": "hypothesis: not confirmed",
        "in_review": "waiting for an operator's approve or reject",
        "in_progress": "in progress with another driver",
        "ready": "not run in this drive",
    }.get(view, view)


def step_summary(svc: Service, summary: DriveSummary) -> str:
    """The drive's summary as GitHub-flavoured markdown (GitHub renders the
    Mermaid block as a diagram). An item with doers has a ``do`` column: the
    last do run of each milestone, with its cost."""
    _, g = svc.graph(summary.item)
    verdict = "all done" if summary.ok else "not all done"
    cached = f", {summary.cached} cached" if summary.cached else ""
    doers = f", {summary.doers.text()}" if summary.doers is not None else ""
    dos = {m.name: svc.do_runs(m.name, summary.item) for m in g if m.has_doer}
    do_head, do_rule = (" do |", "---|") if dos else ("", "")
    lines: list[str] = [
        f"### milepost: work item {summary.item}: {summary.objective}",
        "",
        f"**{verdict}**: {summary.message} ({summary.gate_runs} gate runs{cached}{doers}, {summary.duration:.1f} s)",
        "",
        "```mermaid",
        to_mermaid(g).rstrip(),
        "```",
        "",
        f"| id | milestone | status | budget | last attempt | time | total |{do_head} last reason |",
        f"|---:|---|---|---|---:|---:|---:|{do_rule}---|",
    ]
    began = datetime.now(UTC) - timedelta(seconds=summary.duration)
    for m in summary.milestones:
        took, why = f"{m.duration:.1f} s", m.last_reason or ""
        if m.cached_from is not None:
            took, why = "cached", f"cached from {cached_text(m.cached_from)}"
        elif (earlier := proven_earlier(svc, summary.item, m, began)) is not None:
            took = f"earlier (attempt {earlier.attempt})"
        reason = why.replace("|", "\\|").replace("\n", " ")
        do = f" {_do_cell(dos.get(m.name, []))} |" if dos else ""
        lines.append(
            f"| {m.id} | {m.name} | {m.view} | {m.attempts}/{m.max_attempts} | {m.last_attempt or '-'} |"
            f" {took} | {m.total_duration:.1f} s |{do} {reason} |"
        )
    if summary.flow_run_url:
        lines += ["", f"[Flow run in the Prefect UI]({summary.flow_run_url})"]
    return "\n".join(lines) + "\n"


def _do_cell(dos: list[DoRun]) -> str:
    """A milestone's last do run in a cell: ``passed (attempt 2, $0.30)``; ``-`` when none ran."""
    if not dos:
        return "-"
    d = dos[-1]
    facts = [f"attempt {d.attempt}", *cost_facts(d)]
    if d.session:
        facts.append(f"session `{d.session}`")
    if d.usage_warning:
        facts.append("usage not read")
    return f"{d.outcome} ({', '.join(facts)})".replace("|", "\\|")
