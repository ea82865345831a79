"""How the CLI shows what the library returns (rich markup, tables, the one
colour map of :mod:`milepost.present.diagram`). Commands fetch; these format."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from milepost._text import last_lines
from milepost.events import cached_text
from milepost.gates.outcome import Outcome
from milepost.graph.status import MilestoneStatus
from milepost.graph.words import count, plural

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from rich.console import Console

    from milepost.graph.dag import WorkGraph
    from milepost.graph.models import GateCommand
    from milepost.graph.revise import PlanRevision
    from milepost.results import DoneResult, DoRun, DryRun, GateRun, MilestoneView, VerifyResult


def styled(status: str) -> str:
    from milepost.present.diagram import PALETTE

    colour = PALETTE.get(status)
    return f"[{colour.term}]{status}[/]" if colour else status


def esc(text: str) -> str:
    """User text for rich: control characters escaped, markup neutralised."""
    from rich.markup import escape

    from milepost._text import printable

    return escape(printable(text))


def run_outcome(r: GateRun, do: DoRun | None = None) -> str:
    """The line ``log`` ends with: ``=== attempt 2 failed: exit 3 (exit code 3, 0.41 s)``; with
    the attempt's doer: ``...; do passed: exit 0 (exit code 0, 3.20 s, $0.30, 1 file changed, ...)``."""
    from milepost._text import printable

    code = "" if r.exit_code is None else f"exit code {r.exit_code}, "
    line = f"=== attempt {r.attempt} {r.outcome.value}: {printable(r.reason)} ({code}{r.duration:.2f} s)"
    return line if do is None else f"{line}; {do_outcome(do)}"


def cost_facts(d: DoRun) -> list[str]:
    """What a do run cost, as far as its report said: ``["$0.30", "1552 tokens"]``."""
    return ([] if d.cost_usd is None else [f"${d.cost_usd:.2f}"]) + ([] if d.tokens is None else [f"{d.tokens} tokens"])


def do_outcome(d: DoRun) -> str:
    """A doer's attempt in a line: ``do refused: refused: the doer changed nothing (exit code 0,
    0.52 s, $0.10)``; a passed one adds its diff stat and the commit it left."""
    from milepost._text import printable

    facts = [] if d.exit_code is None else [f"exit code {d.exit_code}"]
    facts.append(f"{d.duration:.2f} s")
    facts += cost_facts(d)
    if d.session:
        facts.append(f"session {d.session}")
    if d.usage_warning:
        facts.append(f"usage not read: {printable(d.usage_warning)}")
    if d.diff_stat:
        facts.append(" ".join(d.diff_stat.split()))
    if d.result_commit:
        facts.append(f"commit {d.result_commit[:10]}")
    return f"do {d.outcome}: {printable(d.reason)} ({', '.join(facts)})"


def show_changes(con: Console, changes: list[Any], name: str) -> None:
    for ch in changes:
        extra = f" ({esc(ch.reason)})" if ch.reason and ch.milestone != name else ""
        con.print(f"{ch.milestone}: {ch.from_status} -> {styled(ch.to_status)}{extra}")


# Characters a field's value is shown in, and names a list's change shows.
SHORT = 60
LISTED = 5


def _text(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def _short(value: Any) -> str:
    """A field's value on one line, cut at 60 characters."""
    text = _text(value)
    return text if len(text) <= SHORT else text[: SHORT - 3] + "..."


def _change(before: Any, after: Any) -> str:
    """A field's change on one line: ``before -> after`` when both fit; else
    what differs (a list's entries added and removed; a gate's commands by
    name, field by field), so that a long value's change is not cut away."""
    if len(_text(before)) <= SHORT and len(_text(after)) <= SHORT:
        return f"{_text(before)} -> {_text(after)}"
    if {type(before), type(after)} == {str, list}:  # a gate from one command to commands, or back
        return f"{_commands_text(before)} -> {_commands_text(after)}"
    if isinstance(before, list) and isinstance(after, list):
        if all(isinstance(x, str) for x in [*before, *after]):
            return _entries(before, after)
        if all(isinstance(x, dict) for x in [*before, *after]):
            return _commands(before, after)
    return f"{_short(before)} -> {_short(after)}"


def _entries(before: list[Any], after: list[Any]) -> str:
    """A list's change: ``+ added; - removed`` (the first few of each)."""

    def names(xs: list[Any]) -> str:
        more = f" and {len(xs) - LISTED} more" if len(xs) > LISTED else ""
        return ", ".join(_short(x) for x in xs[:LISTED]) + more

    added = [x for x in after if x not in before]
    removed = [x for x in before if x not in after]
    parts = ([f"+ {names(added)}"] if added else []) + ([f"- {names(removed)}"] if removed else [])
    return "; ".join(parts) or "the same entries, reordered"


def _commands_text(gate: Any) -> str:
    """A gate (a command, or a list of commands) on one line, each command's files counted."""
    if isinstance(gate, str):
        return gate if len(gate) <= 2 * SHORT else gate[: 2 * SHORT - 3] + "..."
    cut = [
        f"{c.get('run', '')}" + (f" (each of {count(len(c['each']), 'file')})" if c.get("each") else "")
        for c in gate
        if isinstance(c, dict)
    ]
    return _commands_text("; ".join(cut))


def _commands(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> str:
    """A gate's change, command by command (by name): added, removed, and each changed field."""
    old = {str(c.get("name")): c for c in before}
    new = {str(c.get("name")): c for c in after}
    parts = [f"+ command {n}" for n in new if n not in old] + [f"- command {n}" for n in old if n not in new]
    for n in (n for n in new if n in old and new[n] != old[n]):
        for key in dict.fromkeys([*old[n], *new[n]]):
            x, y = old[n].get(key), new[n].get(key)
            if x != y:
                said = _entries(x or [], y or []) if key == "each" else f"{_short(x)} -> {_short(y)}"
                parts.append(f"{n} {key}: {said}")
    return "; ".join(parts) or "the same commands, reordered"


def show_revision(con: Console, r: PlanRevision) -> None:
    """A plan revision: what it adds, removes, changes (field by field) and proves again."""
    if not r.changed_anything:
        con.print(f"work item {r.item}: the plan equals the item; nothing changed (revision {r.revision})")
        return
    head = "would change" if r.dry_run else f"revised (revision {r.revision})"
    con.print(f"work item {r.item} {head}:")
    for name in r.added:
        con.print(f"  + {name} (added)")
    for name in r.removed:
        kept = r.kept_evidence.get(name)
        runs = f"; its {count(kept, 'run')} kept as work refs" if kept else ""
        con.print(f"  - {name} (removed{runs})")
    for e in r.changed:
        again = "; proven again" if e.reprove else ""
        con.print(f"  ~ {e.name}{again}:")
        for f in e.fields:
            con.print(f"      {f.field}: {esc(_change(f.before, f.after))}")
    for f in r.item_fields:
        con.print(f"  ~ item {f.field}: {esc(_change(f.before, f.after))}")
    for name, why in r.stale.items():
        con.print(f"  ! {name}: {esc(why)}")
    if r.dry_run:
        con.print("dry run: nothing written")


def show_done(con: Console, r: DoneResult) -> None:
    m, run = r.milestone, r.gate_run
    if run is None and r.note:
        con.print(f"[yellow]{esc(r.note)}[/]")
        return
    if m.awaiting_review:
        gate = f"gate passed ({run.reason}); " if run else ""
        con.print(f"{m.name}: {styled('in_review')} — {gate}waiting for `milepost approve {m.name}` or `reject`")
        return
    if run is None:
        con.print(f"{m.name}: {styled('done')} (no gate)")
        return
    where = f"log: {run.log_path}"
    if r.note:
        con.print(f"[yellow]{esc(r.note)}[/]")
    if run.cached_from is not None:
        con.print(f"{m.name}: {styled('done')} — {esc(run.reason)} (attempt {run.attempt}, no budget spent)")
        return
    if r.passed:
        con.print(
            f"{m.name}: {styled('done')} — gate passed ({run.reason}, {run.duration:.2f} s,"
            f" attempt {run.attempt}); {where}"
        )
        return
    if m.status is MilestoneStatus.STUCK:
        con.print(
            f"{m.name}: {styled('stuck')} — gate failed: {esc(run.reason)} (attempt {run.attempt}; budget spent:"
            f" {budget(m.attempts, m.max_attempts)}); reset with `milepost reset {m.name} --reason TEXT`; {where}"
        )
    else:
        left = m.max_attempts - m.attempts
        con.print(
            f"{m.name}: {styled(m.status.value)} — gate failed: {esc(run.reason)} (attempt {run.attempt};"
            f" budget {budget(m.attempts, m.max_attempts)}, {left} left); {where}"
        )
    for line in last_lines(run.tail):
        con.print(f"  [dim]{esc(line)}[/]")


def budget(used: int, most: int) -> str:
    """The retry budget, apart from attempt numbers (which run on across resets): ``1 of 3 used``."""
    return f"{used} of {most} used"


def _gate_cell(gate: Sequence[GateCommand]) -> str:
    """A gate in a table cell: its one command (``x N files`` for a step run once per file), or a count."""
    if not gate:
        return "-"
    if len(gate) == 1:
        g = gate[0]
        return f"{g.run} x {len(g.each)} files" if len(g.each) > 1 else g.unit_run(g.each[0]) if g.each else g.run
    units = sum(len(g.each) for g in gate)
    return count(len(gate), "command") + (f" ({count(units, 'unit')})" if units else "")


def milestone_table(con: Console, views: list[MilestoneView]) -> None:
    """``list``: a milestone a line, in aligned columns (:func:`columns`; a
    rich ``Table`` took a minute for 100,000 milestones). Long cells are cut
    (the gate and the do command at 40 characters, the deps after those that
    fit in 40, the inputs after the first, with how many more): ``--json
    list`` and ``graph`` have them whole. The ``do`` column is there when a
    milestone has a do: command (docs/doers.md)."""
    if not views:
        con.print("no milestones yet: `milepost add NAME --gate CMD`")
        return
    doers = any(v.do for v in views)
    rows = []
    for v in views:
        row = [str(v.id), v.name, ", ".join(_shown(v)), f"{v.attempts}/{v.max_attempts}", _deps(v.deps)]
        row.append(_cut(_gate_cell(v.gate)))
        if doers:
            row.append(_cut(v.do or "-"))
        rows.append([*row, _inputs(v.inputs), _note(v)])
    head = ["id", "name", "status", "budget", "deps", "gate", *(["do"] if doers else []), "inputs", "note"]
    columns(con, head, rows, {2: [", ".join(styled(s) for s in _shown(v)) for v in views]})


def _cut(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _note(v: MilestoneView) -> str:
    """A list row's note: why it is stale or held, what it waits on, or what its last gate run said."""
    if v.stale is not None:
        return v.stale.reason
    if v.waiting_for_change:
        return v.waiting_for_change
    if v.waiting_on:
        return "waiting on " + ", ".join(v.waiting_on)
    if v.last_run is not None and v.reason in (None, v.last_run):
        return f"attempt {v.last_attempt}: {v.last_run}"  # what its last gate run said
    return v.reason or ""


def _shown(v: MilestoneView) -> list[str]:
    """A list row's status: its view, and ``ready`` for a needs_fix one with budget
    left and every dep done (``needs_fix, ready``: ``next`` names it, ``start`` takes it)."""
    return [v.view, "ready"] if v.view == "needs_fix" and not v.waiting_on else [v.view]


def _deps(names: list[str], width: int = 40) -> str:
    """The deps that fit in ``width`` characters, and how many more."""
    if not names:
        return "-"
    shown = names[0]
    for k, name in enumerate(names[1:], start=1):
        if len(shown) + 2 + len(name) > width:
            return f"{shown} +{len(names) - k}"
        shown += ", " + name
    return shown


def _inputs(patterns: list[str]) -> str:
    if not patterns:
        return "-"
    first = patterns[0] if len(patterns[0]) <= 30 else patterns[0][:29] + "…"
    return first + (f" +{len(patterns) - 1}" if len(patterns) > 1 else "")


def show_verify(con: Console, r: VerifyResult) -> None:
    for v in r.verified:
        changed = f" ({esc(v.stale.reason)})" if v.stale is not None and v.stale.reason else ""
        if v.outcome is None:
            con.print(f"{v.milestone}: {styled(v.status.value)} — not run: {esc(v.reason)}")
        elif v.outcome is Outcome.CACHED:
            src = v.cached_from
            where = f" as item {src.item} {esc(repr(src.milestone))} attempt {src.attempt}" if src is not None else ""
            con.print(
                f"{v.milestone}: {styled('done')} — cached{changed}: the same gate passed on the same inputs{where}"
                f" (attempt {v.attempt}, no gate run)"
            )
        elif v.outcome.proves:
            con.print(
                f"{v.milestone}: {styled('done')} — proven again{changed}: {esc(v.reason)}"
                f" (attempt {v.attempt}, {v.duration:.2f} s)"
            )
        else:
            also = f"; waiting behind it: {', '.join(v.reopened)}" if v.reopened else ""
            where = f"; log: {esc(v.log)}" if v.log else ""
            con.print(
                f"{v.milestone}: {styled(v.status.value)} — gate failed{changed}: {esc(v.reason)}"
                f" (attempt {v.attempt}){also}{where}"
            )
            for line in v.last_lines:
                con.print(f"  [dim]{esc(line)}[/]")
    if r.unchecked:
        shown = ", ".join(r.unchecked[:5]) + (f" and {len(r.unchecked) - 5} more" if len(r.unchecked) > 5 else "")
        con.print(f"[dim]not checked (no inputs): {shown}; `verify --all` re-runs their gates too[/]")
    verdict = "[green]verified[/]" if r.ok else "[red]not verified[/]"
    con.print(f"{verdict}: {esc(r.message)}")


# -- plan files --------------------------------------------------------------


def show_graph_text(
    con: Console, item_id: int, objective: str, g: WorkGraph, durations: Mapping[str, float] | None = None
) -> None:
    from milepost.graph.analysis import critical_path
    from milepost.graph.dag import display_status

    con.print(f"[bold]work item {item_id}[/]: {esc(objective)}")
    if not len(g):
        con.print("(no milestones)")
        return
    for i, layer in enumerate(g.layers(), start=1):
        con.print(f"[bold]layer {i}[/]")
        for m in layer:
            deps = f"  [dim]<- {', '.join(m.deps)}[/]" if m.deps else ""
            st = display_status(g, m)
            con.print(f"  {styled(st)}{' ' * (12 - len(st))} {m.name}{deps}")
    crit = critical_path(g, durations)
    con.print(f"critical path ({crit.describe()}): " + " -> ".join(m.name for m in crit.milestones))
    bn = g.bottlenecks(3)
    if bn:
        con.print("bottlenecks: " + ", ".join(f"{m.name} ({n} {plural(n, 'depends', 'depend')} on it)" for m, n in bn))
    nxt = g.next_ready()
    con.print(f"next: {nxt.name}" if nxt else g.why_nothing_ready())


def columns(
    con: Console, head: list[str], rows: list[list[str]], styles: Mapping[int, list[str]] | None = None
) -> None:
    """Rows of plain text in aligned columns, the last one left to run on,
    printed at once. ``styles``: markup for a column's cells (same text,
    coloured), by column index. Not rich's ``Table``, which measures every
    cell (docs/benchmarks.md, "Figures behind code choices")."""
    from milepost._text import printable

    cells = [[printable(c) for c in row] for row in rows]  # measured as shown
    widths = [max([len(head[i]), *(len(r[i]) for r in cells)]) for i in range(len(head) - 1)]
    marked = styles or {}

    def line(texts: list[str], row: int | None, plain: bool = False) -> str:
        out = []
        for i, text in enumerate(texts):
            pad = " " * (widths[i] - len(text)) if i < len(widths) else ""
            shown = text if plain else marked[i][row] if row is not None and i in marked else esc(text)
            out.append(shown + pad)
        return "  ".join(out).rstrip()

    if con.color_system is None:  # no colours here (a pipe, a file, NO_COLOR): the text without rich's markup pass
        text = "\n".join(line(r, None, plain=True) for r in [head, *cells])
        con.print(text, markup=False, emoji=False, highlight=False)
        return
    body = [f"[bold]{line(head, None)}[/]", *(line(r, n) for n, r in enumerate(cells))]
    con.print("\n".join(body))


def show_summary(con: Console, summary: Any) -> None:
    head = ["id", "milestone", "status", "budget", "last attempt", "time", "total", "last reason"]
    rows = []
    for m in summary.milestones:
        reason = m.stale.reason if m.stale is not None else (m.waiting_for_change or m.last_reason or "")
        took = f"{m.duration:.1f} s"
        if m.cached_from is not None:  # not run in this drive: a passed run on the same gate and inputs stood in
            took, reason = "cached", f"cached from {cached_text(m.cached_from)}"
        rows.append(
            [
                str(m.id),
                m.name,
                str(m.view),
                f"{m.attempts}/{m.max_attempts}",
                str(m.last_attempt or "-"),
                took,
                f"{m.total_duration:.1f} s",
                reason,
            ]
        )
    columns(con, head, rows, {2: [styled(m.view) for m in summary.milestones]})
    _show_failures(con, summary)
    verdict = "[green]ok[/]" if summary.ok else "[red]not done[/]"
    runs = count(summary.gate_runs, "gate run")
    cached = f", {summary.cached} cached" if summary.cached else ""
    doers = f", {summary.doers.text()}" if getattr(summary, "doers", None) else ""
    con.print(f"{verdict}: {esc(summary.message)} ({runs}{cached}{doers}, {summary.duration:.1f} s)")
    if getattr(summary, "bring_in", None):
        con.print(esc(summary.bring_in))
    if summary.flow_run_url:
        con.print(f"flow run: {summary.flow_run_url}")


def _show_failures(con: Console, summary: Any) -> None:
    """Each failed or stuck milestone: its last attempt's reason, its gate's
    last lines (as ``done`` shows them) and its log's path."""
    for m in summary.milestones:
        f = m.failure
        if f is None:
            continue
        con.print(f"{m.name}: {styled(m.view)} — attempt {f.attempt}: {esc(f.reason)}")
        for line in f.last_lines:
            con.print(f"  [dim]{esc(line)}[/]")
        if f.log:
            con.print(f"  log: {esc(f.log)}")


def show_dry_run(con: Console, plan: DryRun) -> None:
    for i, name in enumerate(plan.order, 1):
        stale = plan.stale.get(name)
        con.print(f"{i}. {name}" + (f" [dim](re-prove: {esc(stale.reason)})[/]" if stale is not None else ""))
    if not plan.order:
        con.print("nothing to run")
    for name, why in plan.waiting.items():
        con.print(f"[dim]not retried: {name}: {esc(why)}[/]")
    for name, why in plan.left.items():
        con.print(f"[dim]not run: {name}: {esc(why)}[/]")
