"""The briefing for an agent's context (``milepost prime``, the MCP ``prime`` prompt)."""

from __future__ import annotations

from milepost.errors import MilepostError
from milepost.graph.status import MilestoneStatus
from milepost.graph.words import count
from milepost.service import Service

__all__ = ["HOW", "prime"]

HOW = """How to work (milepost: the work state lives in a store, not in this conversation):
- `next` names the lowest-id ready milestone; `start NAME` claims it; do the work;
  `done NAME` runs its gate: exit 0 -> done, else needs_fix with the gate's output.
- needs_fix: read the failure, fix the work, `start` and `done` again. stuck: the
  retry budget is spent; say why and ask an operator (`reset NAME --reason`).
- Never mark work done yourself: only a passing gate does. in_review waits for an
  operator's `approve`/`reject`. stale: done, but files it was proven on changed
  since; `verify` re-runs those gates.
- The plan is wrong or incomplete? Refine this item, never a new one for the
  same goal: `add`, `remove`, `edit NAME --gate CMD`, or `plan export --item N -o p.yaml`,
  edit it, `plan apply p.yaml --item N --dry-run`, then `plan apply p.yaml --item N`.
  Unchanged milestones keep their proofs; a changed gate, inputs or deps is
  proven again.
- When every milestone is done: complete the item with a report of what changed
  and the evidence (gate runs are kept; add refs for PRs)."""


def prime(svc: Service, item: int | None = None) -> str:
    """A short briefing for an agent's context: the focused item, what is
    ready (with acceptance text), what blocks the rest, how to prove work."""
    try:
        it, g = svc.graph(item)
    except MilepostError as e:
        return f"milepost: {e.message}\n\n{HOW}\n"
    lines = [f"milepost work item {it.id} (revision {it.revision}): {it.objective}"]
    lines.append(f"readiness: {it.readiness} — {it.readiness_reason}")
    done = sum(1 for m in g if m.status.is_done)
    lines.append(f"milestones: {done}/{len(g)} done")
    ready = g.ready()
    if ready:
        lines.append("ready (lowest id first):")
        for m in ready[:5]:
            gate = (
                f" — gate: {m.gate[0].run}"
                if len(m.gate) == 1
                else (f" — gate: {count(len(m.gate), 'command')}" if m.gate else "")
            )
            acc = f": {m.acceptance}" if m.acceptance else ""
            lines.append(f"  - {m.name}{acc}{gate}")
        if len(ready) > 5:
            lines.append(f"  ... and {len(ready) - 5} more")
    busy = [m.name for m in g if m.status is MilestoneStatus.IN_PROGRESS and not m.awaiting_review]
    if busy:
        lines.append("in progress: " + ", ".join(busy[:10]))
    for m in [m for m in g if m.status is MilestoneStatus.NEEDS_FIX and not m.is_stuck][:5]:
        lines.append(f"needs_fix: {m.name} (budget {m.attempts}/{m.max_attempts} used): {m.reason or ''}".rstrip(": "))
    stuck = [m for m in g if m.is_stuck]
    for m in stuck[:5]:
        below = g.descendants(m.name)
        blocks = f"; blocks {', '.join(below[:5])}{'...' if len(below) > 5 else ''}" if below else ""
        lines.append(f"stuck: {m.name}: {m.reason or 'budget spent'}{blocks}")
    blocked = g.blocked()
    if blocked:
        shown = [f"{m.name} (on {', '.join(d.name for d in deps[:3])})" for m, deps in blocked[:6]]
        more = f" and {len(blocked) - 6} more" if len(blocked) > 6 else ""
        lines.append("blocked: " + "; ".join(shown) + more)
    stale = g.stale()
    if stale:
        more = f" and {len(stale) - 8} more" if len(stale) > 8 else ""
        lines.append(f"stale (done, but their inputs changed): {', '.join(stale[:8])}{more}; `verify` re-proves them")
    if not ready:
        lines.append(g.why_nothing_ready())
    return "\n".join(lines) + "\n\n" + HOW.replace("--item N", f"--item {it.id}") + "\n"  # (the item it is about)
