"""The tools: plain functions of a :class:`~milepost.service.Service` and
an argument model, compact views of what they return, and the list MCP
serves (names, descriptions, input and output schemas)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from milepost.agent.args import DriveArgs, GraphArgs, MilestoneArgs, ToolArgs, WaitArgs, WorkItemArgs
from milepost.errors import InputError, InvalidValueError
from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.models import Milestone, WorkItem
from milepost.graph.status import Action, ItemFilter
from milepost.results import MilestoneView
from milepost.service import Service

__all__ = ["TOOLS", "ToolSpec", "call_tool", "compact_schema", "tool_list"]

# -- compact views ------------------------------------------------------------------


def _milestone(m: Milestone, view: str | None = None, *, full: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": m.name, "status": view or m.status.value}
    if m.deps:
        out["deps"] = m.deps
    if m.attempts or full:
        out["budget"] = f"{m.attempts}/{m.max_attempts}"  # used/most; attempts are numbered on across resets
    if m.reason and m.status.value in ("needs_fix", "stuck"):
        out["reason"] = m.reason
    if full:
        if m.acceptance:
            out["acceptance"] = m.acceptance
        if m.gate:
            out["gate"] = [g.run for g in m.gate]
        if m.do:
            out["do"] = m.do
        if m.inputs:
            out["inputs"] = m.inputs
    return out


def _viewed(v: MilestoneView) -> dict[str, Any]:
    """A milestone of a list: its view, and why when it is stale or waits for a change."""
    out = _milestone(v, v.view)
    if v.stale is not None:
        out["reason"] = v.stale.reason
    elif v.waiting_for_change:
        out["reason"] = v.waiting_for_change
    return out


def _item(it: WorkItem, svc: Service, *, milestones: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": it.id,
        "objective": it.objective,
        "state": it.state.value,
        "plan_status": it.plan_status.value,
        "readiness": it.readiness,
        "why": it.readiness_reason,
        "revision": it.revision,
    }
    if it.todo_list:
        out["todo"] = [f"{t.text}: {t.state}" for t in it.todo_list]
    if milestones:
        g = WorkGraph(it.milestones)  # the item already holds them: no second read of the store
        svc.check_proofs(it.id, g)  # marks the stale ones
        out["milestones"] = [_milestone(m, display_status(g, m)) for m in g]
    return out


def _change(r: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"item": r.item, "revision": r.revision, "milestone": _milestone(r.milestone)}
    if r.changes[1:]:  # what the action moved besides the milestone (reopened dependents)
        out["also"] = [f"{c.milestone}: {c.from_status} -> {c.to_status}" for c in r.changes[1:]]
    return out


# -- the tools ------------------------------------------------------------------------


def _need(value: Any, what: str, action: str) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InvalidValueError(f"{action} needs {what}")
    return value


def work_item(svc: Service, a: WorkItemArgs) -> dict[str, Any]:
    rev = a.expect_revision
    if a.action == "create":
        if a.plan is not None:
            from milepost.planfile import parse_plan

            return _item(svc.apply_plan(parse_plan(a.plan, "<plan>")), svc)
        it = svc.create_item(_need(a.objective, "objective (or plan)", "create"))
        return _item(it, svc)
    if a.action == "revise":
        text = _need(a.plan, "plan", "revise")
        revised = svc.revise_text(text, "<plan>", item=a.id, expect_revision=rev, dry_run=a.dry_run)
        return {"revised": revised.model_dump(mode="json", exclude={"item_fields"}) | {"summary": revised.summary()}}
    if a.action == "show":
        return _item(svc.graph(a.id)[0], svc)  # readiness knows the stale milestones
    if a.action == "list":
        items = svc.list_items((a.filter or ItemFilter.OPEN).value)
        return {
            "items": [
                {
                    "id": i.id,
                    "objective": i.objective,
                    "readiness": i.readiness,
                    "why": i.readiness_reason,
                    "current": i.current,
                    "revision": i.revision,
                }
                for i in items
            ]
        }
    if a.action == "pick":
        it = svc.pick(_need(a.id, "id", "pick"), clear_blocker=a.clear_blocker, reason=a.reason, expect_revision=rev)
        return _item(it, svc)
    if a.action == "update":
        it = svc.update_item(a.id, objective=a.objective, plan_status=a.plan_status, todo=a.todo, expect_revision=rev)
        return _item(it, svc, milestones=False)
    if a.action == "complete":
        r = svc.complete(_need(a.report, "report", "complete"), item=a.id, expect_revision=rev)
        return {"completed": r.item.id, "already": r.already, "warnings": r.warnings}
    it = svc.cancel(_need(a.reason, "reason", "cancel"), item=a.id, expect_revision=rev)
    return _item(it, svc, milestones=False)


def milestone(svc: Service, a: MilestoneArgs) -> dict[str, Any]:
    rev = a.expect_revision
    if a.action == "next":
        pick = svc.next(a.item)
        nxt = _milestone(pick.milestone, full=True) if pick.milestone else None
        return {"item": pick.item, "next": nxt, "why": pick.reason, "ready": pick.ready}
    if a.action == "list":
        it, views = svc.milestone_views(a.item)
        return {"item": it.id, "revision": it.revision, "milestones": [_viewed(v) for v in views]}
    if a.action == "verify":
        r = svc.verify([a.name] if a.name else None, item=a.item)
        return {
            "item": r.item,
            "ok": r.ok,
            "message": r.message,
            "verified": [
                {
                    "name": v.milestone,
                    "outcome": v.outcome.value if v.outcome else "skipped",
                    "status": v.status.value,
                    "reason": v.reason,
                    **({"reopened": v.reopened} if v.reopened else {}),
                    **({"cached_from": v.cached_from.model_dump()} if v.cached_from else {}),
                }
                for v in r.verified
            ],
        }
    name = _need(a.name, "name", a.action)
    if a.action == "runs":
        return runs(svc, name, a.item)
    if a.action in ("add", "remove", "edit"):
        return _plan_change(svc, name, a)
    if a.action == "done":
        d = svc.done(name, verdict=a.verdict, item=a.item, expect_revision=rev)
        out: dict[str, Any] = {"item": d.item, "revision": d.revision, "passed": d.passed}
        out["milestone"] = _milestone(d.milestone, "in_review" if d.milestone.awaiting_review else None)
        if d.gate_run is not None:
            run = d.gate_run
            out["gate"] = {
                "attempt": run.attempt,
                "outcome": run.outcome.value,
                "reason": run.reason,
                "seconds": round(run.duration, 2),
            }
            if not d.passed:
                out["gate"]["tail"] = "\n".join(run.tail.rstrip().splitlines()[-15:])
                out["gate"]["log"] = run.log_path
        if d.note:
            out["note"] = d.note
        return out
    if a.action in ("approve", "reject"):
        return _change(svc.review(name, a.action == "approve", reason=a.reason, item=a.item, expect_revision=rev))
    return _change(svc.act(name, Action(a.action), reason=a.reason, item=a.item, expect_revision=rev))


def _plan_change(svc: Service, name: str, a: MilestoneArgs) -> dict[str, Any]:
    """``add``, ``remove``, ``edit``: the item's plan changed by one milestone (at any plan status)."""
    rev = a.expect_revision
    if a.action == "add":
        added = svc.add_milestone(
            name,
            a.deps,
            acceptance=a.acceptance or "",
            gate=a.gate,
            retries=a.retries,
            timeout=a.timeout,
            review=a.review,
            inputs=a.inputs,
            do=a.do,
            do_timeout=a.do_timeout,
            do_budget_usd=a.do_budget_usd,
            do_usage=a.do_usage,
            item=a.item,
            expect_revision=rev,
        )
        return _change(added)
    if a.action == "remove":
        return _change(svc.remove_milestone(name, item=a.item, expect_revision=rev))
    return _edit(svc, name, a)


def _edit(svc: Service, name: str, a: MilestoneArgs) -> dict[str, Any]:
    """``edit``: the fields given replace the milestone's (as ``milepost edit``), a plan revision."""
    fields = ("gate", "deps", "inputs", "retries", "timeout", "acceptance", "do")
    changes = {f: getattr(a, f) for f in fields if getattr(a, f) is not None}
    if not changes:
        raise InvalidValueError(f"edit needs a field to change: {', '.join(fields)}")
    if changes.get("do") == "":
        changes["do"] = None  # '' drops the doer
    r = svc.edit_milestone(name, changes, item=a.item, expect_revision=a.expect_revision)
    return {"revised": r.model_dump(mode="json", exclude={"item_fields"}) | {"summary": r.summary()}}


def runs(svc: Service, name: str, item: int | None) -> dict[str, Any]:
    """A milestone's evidence, as ``milepost --json runs NAME`` prints it: every
    gate run, and every do run when a doer ran (docs/doers.md)."""
    out: dict[str, Any] = {"milestone": name, "runs": [r.model_dump(mode="json") for r in svc.runs(name, item)]}
    dos = svc.do_runs(name, item)
    if dos:
        out["do_runs"] = [d.model_dump(mode="json") for d in dos]
    return out


def wait(svc: Service, a: WaitArgs) -> dict[str, Any]:
    if a.action == "wake":
        return {"woken": svc.wake(_need(a.resource, "resource", "wake"))}
    it = svc.wait_item(
        _need(a.kind, "kind", "wait").value,
        _need(a.reason, "reason", "wait"),
        resource=a.resource,
        until=a.until,
        item=a.item,
        expect_revision=a.expect_revision,
    )
    return _item(it, svc, milestones=False)


def graph(svc: Service, a: GraphArgs) -> dict[str, Any]:
    from milepost.graph.analysis import critical_path

    it, g = svc.graph(a.item)
    nxt = g.next_ready()
    crit = critical_path(g, svc.last_durations(it.id))  # by the gates' last durations, as the CLI's
    return {
        "item": it.id,
        "revision": it.revision,
        "layers": [[m.name for m in layer] for layer in g.layers()],
        "critical_path": [m.name for m in crit.milestones],
        "critical_path_by": crit.describe(),
        "ready": [m.name for m in g.ready()],
        "next": nxt.name if nxt else None,
        "blocked": {m.name: [d.name for d in deps] for m, deps in g.blocked()},
        "stuck": [m.name for m in g if m.is_stuck],
        "stale": g.stale(),
        "why": g.why_nothing_ready() if nxt is None else f"{nxt.name} is ready",
    }


def drive(svc: Service, a: DriveArgs) -> dict[str, Any]:
    """Runs in its own service (a drive keeps state), with Prefect configured for the workspace."""
    from milepost.flows.server import configure_prefect

    item = svc.resolve_item(a.item)
    svc.check_can_drive(item, a.expect_revision, until=a.until)
    configure_prefect(svc.store.home)
    from milepost.flows.drive import run_drive

    own = Service(
        svc.store, svc.agent, operator=svc.operator, lease_ttl=svc.lease_ttl.total_seconds(), clock=svc.ctx.clock
    )
    s = run_drive(
        own, item, max_parallel=a.max_parallel, max_doers=a.max_doers, until=a.until, expect_revision=a.expect_revision
    )
    return {
        "item": s.item,
        "ok": s.ok,
        "message": s.message,
        "gate_runs": s.gate_runs,
        "cached": s.cached,
        "milestones": {m.name: m.view for m in s.milestones},
        "flow_run": s.flow_run_url or s.flow_run_id,
        **({"doers": s.doers.model_dump()} if s.doers is not None else {}),
    }


def _out(**props: str) -> dict[str, Any]:
    """A compact output schema: the answer's top-level fields and their JSON types
    (``"object|null"`` for either); which ones appear depends on the action."""
    return {"type": "object", "properties": {k: {"type": v.split("|") if "|" in v else v} for k, v in props.items()}}


_ITEM = {
    "id": "integer",
    "objective": "string",
    "state": "string",
    "plan_status": "string",
    "readiness": "string",
    "why": "string",
    "revision": "integer",
    "todo": "array",
    "milestones": "array",
}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    model: type[ToolArgs]
    run: Callable[[Service, Any], dict[str, Any]]
    mutates: bool
    output: dict[str, Any]

    @property
    def description(self) -> str:
        return (self.model.__doc__ or "").strip()


TOOLS: dict[str, ToolSpec] = {
    t.name: t
    for t in (
        ToolSpec(
            "work_item",
            WorkItemArgs,
            work_item,
            True,
            _out(**_ITEM, items="array", completed="integer", already="boolean", warnings="array", revised="object"),
        ),
        ToolSpec(
            "milestone",
            MilestoneArgs,
            milestone,
            True,
            _out(
                item="integer",
                revision="integer",
                milestone="object|string",
                next="object|null",
                why="string",
                ready="array",
                milestones="array",
                passed="boolean",
                gate="object",
                note="string",
                also="array",
                ok="boolean",
                message="string",
                verified="array",
                runs="array",
                do_runs="array",
                revised="object",
            ),
        ),
        ToolSpec("wait", WaitArgs, wait, True, _out(**_ITEM, woken="array")),
        ToolSpec(
            "graph",
            GraphArgs,
            graph,
            False,
            _out(
                item="integer",
                revision="integer",
                layers="array",
                critical_path="array",
                ready="array",
                next="string|null",
                blocked="object",
                stuck="array",
                stale="array",
                why="string",
            ),
        ),
        ToolSpec(
            "drive",
            DriveArgs,
            drive,
            True,
            _out(
                item="integer",
                ok="boolean",
                message="string",
                gate_runs="integer",
                cached="integer",
                milestones="object",
                flow_run="string|null",
                doers="object",
            ),
        ),
    )
}


def compact_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema without what an agent does not need to read:
    titles, null branches of optional fields, ``null`` defaults; references
    inlined. Validation still uses the model itself."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(defs[node["$ref"].rsplit("/", 1)[1]])
            node = {k: walk(v) for k, v in node.items() if k != "title"}
            if "anyOf" in node:
                branches = [b for b in node["anyOf"] if b != {"type": "null"}]
                if len(branches) == 1:
                    rest = {k: v for k, v in node.items() if k != "anyOf"}
                    node = {**branches[0], **rest}
            if node.get("default", 0) is None or node.get("default") is False:
                node.pop("default")
            return node
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out = walk(schema)
    out.pop("description", None)  # the tool's description says it
    return dict(out)


def tool_list() -> list[dict[str, Any]]:
    """The tools as MCP lists them: name, description, input and output schemas."""
    return [
        {"name": t.name, "description": t.description, "inputSchema": compact_schema(t.model), "outputSchema": t.output}
        for t in TOOLS.values()
    ]


def call_tool(svc: Service, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Validate ``arguments`` with the tool's model and run it. Raises
    :class:`MilepostError` (the CLI's errors) for bad input and refusals."""
    spec = TOOLS.get(name)
    if spec is None:
        raise InputError(f"unknown tool {name!r}: use one of {', '.join(TOOLS)}")
    try:
        args = spec.model.model_validate(arguments)
    except ValidationError as e:
        raise InputError(_validation_message(name, e)) from None
    return spec.run(svc, args)


def _validation_message(tool: str, e: ValidationError) -> str:
    err = e.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(arguments)"
    if err["type"] == "extra_forbidden":
        model = TOOLS[tool].model
        return f"{tool}: unknown field {field!r}; allowed: {', '.join(model.model_fields)}"
    found = json.dumps(err.get("input"), default=str)
    if len(found) > 60:
        found = found[:57] + "..."
    return f"{tool}: invalid {field}: {str(err['msg']).removeprefix('Value error, ')} (found {found})"
