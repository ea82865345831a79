"""Reading plan files (YAML or JSON) into :class:`~milepost.graph.plan.Plan`,
with errors that point at the line.

Every problem found is reported at once (up to :data:`MAX_PROBLEMS`): each
as ``file:line: ...`` naming the line where it starts and a milestone by its
name, joined with ``; `` into the one line an error is. The error's details
carry the same problems as data (``problems: [{line, milestone, field,
message}]``, and ``more``: how many were left out).

YAML in the plain block form most plans are written in is read by
:mod:`milepost.plainyaml` (several times faster, the same data); any other
YAML, and the lines of every place for an error, by :mod:`milepost.plandoc`
(aliases bounded by :data:`MAX_ALIAS_NODES`). An honest plan without aliases
has no size limit but the file's.
"""

from __future__ import annotations

import functools
import gc
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import yaml
from pydantic import ValidationError
from yaml.nodes import Node

from milepost.errors import InputError, PlanFileError
from milepost.graph.plan import Plan
from milepost.graph.words import count
from milepost.plainyaml import read_plain
from milepost.planchecks import at_line as _at
from milepost.planchecks import plan_problems, raw_problems
from milepost.plandoc import (
    MAX_ALIAS_NODES,
    DuplicateKey,
    Loc,
    Problem,
    build,
    compose,
    duplicate_line,
    json_lines,
    line_map,
    no_duplicates,
    yaml_problem,
)

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_PROBLEMS",
    "dump_plan",
    "gc_paused",
    "load_plan",
    "parse_plan",
    "read_plan_text",
    "unchecked_plan",
]


MAX_PLAN_BYTES = 64 * 1024 * 1024
# Problems shown in one error; the rest are counted.
MAX_PROBLEMS = 50


def load_plan(path: Path) -> Plan:
    return parse_plan(read_plan_text(path), str(path))


def read_plan_text(path: Path) -> str:
    """The text of the plan file at ``path`` (refused: missing, a folder, larger than
    :data:`MAX_PLAN_BYTES`, not UTF-8)."""
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
    return text


def _refuse(source: str, problems: Sequence[Problem], error: InputError | None = None) -> NoReturn:
    """Raise one error holding every problem (the first ``MAX_PROBLEMS``),
    of the first problem's kind (``error``) or a :class:`PlanFileError`."""
    ordered = sorted(problems, key=lambda p: (p.line is None, p.line or 0))
    shown, more = ordered[:MAX_PROBLEMS], max(0, len(ordered) - MAX_PROBLEMS)
    message = "; ".join(p.segment(source) for p in shown)
    if more:
        message += f"; and {count(more, 'more problem')}"
    first = shown[0]
    details: dict[str, Any] = {"field": first.field, **(error.details if error else {})}
    details |= {"file": source, "line": first.line, "problems": [p.as_dict() for p in shown], "more": more}
    raise (type(error) if error else PlanFileError)(message, **details) from None


# -- the plan -------------------------------------------------------------------------


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: a large plan is millions of
    objects, none of them garbage, and each full collection walks them all
    (it took most of the time of reading and applying 100,000 milestones)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def parse_plan(text: str, source: str = "<plan>") -> Plan:
    """The plan in ``text`` (YAML or JSON), validated whole; every problem
    found is reported at once in one :class:`PlanFileError` (or the first
    problem's own kind), naming ``source`` and the line of each."""
    with gc_paused():
        return _parse_plan(text, source)


def _is_json(text: str, source: str) -> bool:
    return source.endswith(".json") or text.lstrip().startswith("{")


def _document(text: str, source: str) -> tuple[dict[str, Any], Node | None]:
    """The plan document in ``text`` (a mapping) and its YAML node tree when
    one was composed; anything else refused naming the line."""
    is_json = _is_json(text, source)
    root: Node | None = None
    try:
        if is_json:
            data = json.loads(text, object_pairs_hook=no_duplicates)
        else:
            data = read_plain(text)
            if data is None:
                root = compose(text)
                data = None if root is None else build(root)
    except json.JSONDecodeError as e:
        _refuse(source, [Problem(e.lineno, f"invalid JSON: {e.msg}")])
    except DuplicateKey as e:
        _refuse(source, [Problem(duplicate_line(text), f"invalid JSON: duplicate key {e.key!r}")])
    except RecursionError:
        _refuse(source, [Problem(None, "the document is nested too deeply")])
    except yaml.YAMLError as e:
        _refuse(source, [yaml_problem(e)])
    if not isinstance(data, dict):
        _refuse(
            source,
            [Problem(None, f"a plan file holds one mapping (objective, milestones, ...), found {type(data).__name__}")],
        )
    return data, root


def unchecked_plan(text: str, source: str = "<plan>") -> Plan | None:
    """The plan in ``text`` with its fields validated but not its milestones
    as a set (an unknown dep or a cycle is let through), or None when its
    fields are not sound: what a plan refused by :func:`parse_plan` would
    change of a work item (milepost/service/revise.py)."""
    with gc_paused():
        try:
            data, _ = _document(text, source)
            return Plan.model_validate(data)
        except (InputError, ValidationError):
            return None


def _parse_plan(text: str, source: str) -> Plan:
    data, root = _document(text, source)
    is_json = _is_json(text, source)

    @functools.cache
    def lines() -> dict[Loc, int]:  # only wanted for an error
        return json_lines(text) if is_json else line_map(root if root is not None else compose(text))

    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        # Fields first, then what the sound entries show across milestones
        # (names, deps, cycles on the edges that are known): one pass, not rounds.
        fields = _field_problems(e, data, lines())
        bad = {p.field for p in fields}
        _refuse(source, fields + [p for p in raw_problems(data, lines()) if p.field not in bad])
    del data  # a large plan's data (100 MB at 100,000 milestones): its memory serves the milestones made next
    try:
        plan.check()
    except InputError as e:
        problems = plan_problems(plan, lines())
        if problems:
            _refuse(source, [p for p, _ in problems], problems[0][1])
        name = e.details.get("milestone")
        index = next((i for i, m in enumerate(plan.milestones) if m.name == name), None)
        line = lines().get(("milestones", index)) if index is not None else None
        _refuse(source, [Problem(line, e.message, _field("milestones", index), name)], e)
    return plan


def _field(*path: str | int | None) -> str | None:
    return None if None in path else ".".join(str(p) for p in path)


def _entry(data: Any, *path: str | int) -> Any:
    for p in path:
        if not isinstance(data, dict | list):
            return None
        try:
            data = data[p]  # type: ignore[index]
        except (LookupError, TypeError):
            return None
    return data


def _named(entry: Any) -> str | None:
    name = entry.get("name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) and name else None


def _where(loc: Loc, data: Any) -> tuple[str | None, str, Loc]:
    """Who holds the field at ``loc`` (a milestone by its name), and the
    field's path inside it: (milestone, words, path)."""
    if len(loc) >= 2 and loc[0] == "milestones" and isinstance(loc[1], int):
        entry = _entry(data, "milestones", loc[1])
        name = _named(entry)
        who = f"milestone {name!r}" if name else f"milestone #{loc[1] + 1}"
        rest = loc[2:]
        if len(rest) >= 2 and rest[0] == "gate" and isinstance(rest[1], int):
            cmd = _named(_entry(entry, "gate", rest[1]))
            who += f", gate command {cmd!r}" if cmd else f", gate command {rest[1] + 1}"
            rest = rest[2:]
        return name, who, rest
    if loc[:1] == ("defaults",):
        return None, "defaults", loc[1:]
    return None, "", loc


def _dotted(path: Loc) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _field_problems(e: ValidationError, data: Any, lines: dict[Loc, int]) -> list[Problem]:
    out = []
    for err in e.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in ("command", "list")))
        milestone, who, rest = _where(loc, data)
        prefix = f"{who}: " if who else ""
        if err["type"] == "extra_forbidden":
            msg = f"{prefix}unknown field {_dotted(rest)!r}; allowed here: {_allowed(loc)}"
        elif err["type"] == "missing":  # (its input is the entry around it: nothing to show)
            msg = f"{prefix}missing {_dotted(rest) or 'entry'}: it is required"
        else:
            found = err.get("input")
            shown = repr(found) if not isinstance(found, dict | list) else type(found).__name__
            if len(shown) > 80:
                shown = shown[:77] + "..."
            detail = str(err["msg"]).removeprefix("Value error, ")
            what = _dotted(rest) or "entry"
            msg = f"{prefix}invalid {what}: {detail[:1].lower()}{detail[1:]} (found {shown})"
            if err["type"] == "string_type" and isinstance(found, bool | int | float):
                e_g = ", e.g. gate: 'true'" if what == "gate" else ""
                msg += f"; YAML reads an unquoted true, false, yes, no or number as one: quote it{e_g}"
        out.append(Problem(_at(lines, loc), msg, ".".join(str(p) for p in loc) or None, milestone))
    return out


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
