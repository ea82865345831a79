"""Reading plan files (YAML or JSON) into :class:`~milepost.graph.plan.Plan`,
with errors that point at the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from milepost.errors import InputError, PlanFileError
from milepost.graph.plan import Plan

__all__ = ["dump_plan", "load_plan", "parse_plan"]


def load_plan(path: Path) -> Plan:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanFileError(f"plan file {str(path)!r} not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanFileError(f"cannot read plan file {str(path)!r}: {e}", file=str(path)) from None
    return parse_plan(text, str(path))


def _lines(text: str) -> dict[tuple[Any, ...], int]:
    """Map every path in the document (keys and list indexes) to its 1-based line."""
    out: dict[tuple[Any, ...], int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return out

    def walk(node: yaml.Node, path: tuple[Any, ...]) -> None:
        out.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = k.value
                out[(*path, key)] = k.start_mark.line + 1
                walk(v, (*path, key))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i))

    if root is not None:
        walk(root, ())
    return out


def parse_plan(text: str, source: str = "<plan>") -> Plan:
    is_json = source.endswith(".json") or text.lstrip().startswith("{")
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise PlanFileError(f"{source}:{e.lineno}: invalid JSON: {e.msg}", file=source, line=e.lineno) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        where = f"{source}:{line}" if line else source
        raise PlanFileError(f"{where}: invalid YAML: {problem}", file=source, line=line) from None
    if not isinstance(data, dict):
        raise PlanFileError(
            f"{source}: a plan file holds one mapping (objective, milestones, ...), found {type(data).__name__}",
            file=source,
        )
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in ("str", "list[PlanCommand]")))
        lines = _lines(text)
        line = None
        for cut in range(len(loc), -1, -1):
            line = lines.get(loc[:cut])
            if line is not None:
                break
        where = f"{source}:{line}" if line else source
        field = ".".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            allowed = _allowed(loc)
            msg = f"{where}: unknown field {field!r}; allowed here: {allowed}"
        else:
            found = err.get("input")
            shown = repr(found) if not isinstance(found, dict | list) else type(found).__name__
            msg = f"{where}: invalid {field}: {err['msg'].lower()} (found {shown})"
        more = len(e.errors()) - 1
        if more:
            msg += f" (and {more} more problem{'s' if more > 1 else ''})"
        raise PlanFileError(msg, file=source, line=line, field=field) from None
    try:
        plan.to_milestones()
    except InputError as e:
        # Point at the milestone the problem is about.
        name = e.details.get("milestone")
        index = next((i for i, m in enumerate(plan.milestones) if m.name == name), None)
        line = _lines(text).get(("milestones", index)) if index is not None else None
        where = f"{source}:{line}" if line else source
        raise type(e)(f"{where}: {e.message}", **e.details, file=source, line=line) from None
    return plan


def _allowed(loc: tuple[Any, ...]) -> str:
    from milepost.graph.plan import PlanCommand, PlanDefaults, PlanMilestone

    model: type[Any] = Plan
    if loc[:1] == ("milestones",):
        model = PlanCommand if len(loc) >= 4 and loc[2] == "gate" else PlanMilestone
    elif loc[:1] == ("defaults",):
        model = PlanDefaults
    return ", ".join(model.model_fields)


def dump_plan(data: dict[str, Any], fmt: str = "yaml") -> str:
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
