"""Reading plan files (YAML or JSON) into :class:`~milepost.graph.plan.Plan`,
with errors that point at the line."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from milepost.errors import InputError, PlanFileError
from milepost.graph.plan import Plan

__all__ = ["dump_plan", "load_plan", "parse_plan"]


# A plan expanded through YAML aliases beyond this many nodes is refused (an
# alias bomb would otherwise expand into gigabytes).
MAX_NODES = 200_000
MAX_PLAN_BYTES = 64 * 1024 * 1024


def load_plan(path: Path) -> Plan:
    try:
        if path.stat().st_size > MAX_PLAN_BYTES:
            raise PlanFileError(
                f"plan file {str(path)!r} is larger than {MAX_PLAN_BYTES // (1024 * 1024)} MiB", file=str(path)
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanFileError(f"plan file {str(path)!r} not found", file=str(path)) from None
    except IsADirectoryError:
        raise PlanFileError(f"plan file {str(path)!r} is a folder: give a YAML or JSON file", file=str(path)) from None
    except UnicodeDecodeError as e:
        raise PlanFileError(
            f"plan file {str(path)!r} is not UTF-8 text (byte {e.start}): save it as UTF-8", file=str(path)
        ) from None
    except OSError as e:
        raise PlanFileError(f"cannot read plan file {str(path)!r}: {e.strerror or e}", file=str(path)) from None
    return parse_plan(text, str(path))


class _PlanLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (the
    last one would win silently), with the line of the second."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # unhashable: the base constructor reports it
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {first})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _check_nodes(root: yaml.Node) -> None:
    """Refuse recursive aliases (a node inside itself) and documents that
    aliases expand beyond MAX_NODES; iterative, so depth costs no stack."""
    visits = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, leaving = stack.pop()
        if leaving:
            open_.discard(id(node))
            continue
        if id(node) in open_:
            raise yaml.composer.ComposerError(
                None, None, "recursive alias: a node that contains itself", node.start_mark
            )
        visits += 1
        if visits > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"the document expands beyond {MAX_NODES} nodes (aliases?)", node.start_mark
            )
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for kv in node.value for n in kv]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if children:
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(children))


def _load_yaml(text: str) -> Any:
    loader = _PlanLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen.add(key)
    return dict(pairs)


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
        # Nested too deeply to point at a line: the message still names the field.
        with contextlib.suppress(RecursionError):
            walk(root, ())
    return out


def parse_plan(text: str, source: str = "<plan>") -> Plan:
    is_json = source.endswith(".json") or text.lstrip().startswith("{")
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates) if is_json else _load_yaml(text)
    except json.JSONDecodeError as e:
        raise PlanFileError(f"{source}:{e.lineno}: invalid JSON: {e.msg}", file=source, line=e.lineno) from None
    except _DuplicateKey as e:
        line = None
        try:  # JSON is YAML: the YAML loader finds the line of the second key
            _load_yaml(text)
        except yaml.MarkedYAMLError as ye:
            line = ye.problem_mark.line + 1 if ye.problem_mark is not None else None
        except (yaml.YAMLError, RecursionError):
            pass
        where = f"{source}:{line}" if line else source
        raise PlanFileError(f"{where}: invalid JSON: duplicate key {e.key!r}", file=source, line=line) from None
    except RecursionError:
        raise PlanFileError(f"{source}: the document is nested too deeply", file=source) from None
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
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in ("command", "list")))
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
            if len(shown) > 80:
                shown = shown[:77] + "..."
            detail = str(err["msg"]).removeprefix("Value error, ")
            msg = f"{where}: invalid {field}: {detail[:1].lower()}{detail[1:]} (found {shown})"
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
