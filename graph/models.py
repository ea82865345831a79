"""Pydantic models of the domain: gate commands, milestones, work items.

Read models (what the store hands out, what ``--json`` prints) ignore
unknown fields; the plan-file models in :mod:`milepost.graph.plan` forbid them.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt

from milepost.graph.errors import InvalidNameError, InvalidValueError
from milepost.graph.status import (
    ArtifactStatus,
    Isolation,
    ItemState,
    MilestoneStatus,
    PlanStatus,
    Readiness,
    ReadinessState,
    TodoState,
    WaitKind,
)

__all__ = [
    "DEFAULT_RETRIES",
    "MAX_ID",
    "MAX_RETRIES",
    "MAX_SECONDS",
    "MAX_TEXT",
    "MAX_USD",
    "NAME_PATTERN",
    "NAME_RULE",
    "Budget",
    "CommandText",
    "Delay",
    "DoerSettings",
    "EnvMap",
    "EnvName",
    "GateCommand",
    "InputPattern",
    "ItemDefaults",
    "Milestone",
    "ModelName",
    "ModelPrice",
    "PlanArtifact",
    "Retries",
    "Seconds",
    "Text",
    "TodoItem",
    "Wait",
    "WorkItem",
    "WorkRef",
    "check_command",
    "check_delay",
    "check_do",
    "check_env",
    "check_input_pattern",
    "check_inputs",
    "check_name",
    "check_retries",
    "check_text",
    "check_timeout",
]

DEFAULT_RETRIES = 2

# Limits of what milepost accepts. Each keeps a value meaningful and every
# output valid (a JSON document has no Infinity; PostgreSQL's INTEGER ends at
# 2**31 - 1; its TEXT holds no NUL character).
MAX_RETRIES = 100
MAX_SECONDS = 7 * 24 * 3600.0  # timeouts and retry delays: a week
MAX_ID = 2**31 - 1  # ids, attempts, revisions
MAX_TEXT = 1_000_000  # characters of an objective, acceptance text, reason or report
MAX_INPUTS = 1_000  # input patterns of one milestone
MAX_PATTERN = 1_000  # characters of one input pattern
MAX_USD = 1_000_000.0  # a doer budget in dollars

NAME_PATTERN = re.compile(r"[a-z][a-z0-9._-]{0,63}")  # a whole name (fullmatch)
NAME_RULE = "1-64 characters: lowercase letters, digits, '-', '_' or '.', starting with a letter"


def check_name(name: str, what: str = "milestone") -> str:
    """Return ``name`` if it is a valid slug, else raise :class:`InvalidNameError`."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidNameError(f"invalid {what} name {name!r}: use {NAME_RULE}", name=name)
    return name


def check_retries(value: int | None, owner: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES):
        raise InvalidValueError(
            f"invalid retries {value!r} for {owner}: must be a whole number from 0 to {MAX_RETRIES}",
            field="retries",
            value=repr(value),
        )
    return value


def _check_seconds(value: float | None, owner: str, field: str, *, zero_ok: bool) -> float | None:
    """A finite number of seconds up to MAX_SECONDS (> 0, or >= 0 with ``zero_ok``)."""
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not (ok and (value >= 0 if zero_ok else value > 0) and value <= MAX_SECONDS):
        rel = ">=" if zero_ok else ">"
        raise InvalidValueError(
            f"invalid {field} {value!r} for {owner}: must be a number of seconds {rel} 0 and <= {MAX_SECONDS:g}",
            field=field,
            value=repr(value),
        )
    return value


def check_timeout(value: float | None, owner: str) -> float | None:
    return _check_seconds(value, owner, "timeout", zero_ok=False)


def check_delay(value: float | None, owner: str) -> float | None:
    return _check_seconds(value, owner, "retry_delay", zero_ok=True)


def check_text(value: str, what: str) -> str:
    """Free text (objective, acceptance, reason, report): no NUL character
    (no database keeps it), at most MAX_TEXT characters."""
    if "\x00" in value:
        raise InvalidValueError(f"{what} contains a NUL character (\\x00): remove it", field=what)
    if len(value) > MAX_TEXT:
        raise InvalidValueError(f"{what} is {len(value)} characters long: at most {MAX_TEXT} are kept", field=what)
    return value


def check_command(run: str, what: str) -> str:
    """A shell command that can be executed: not blank, no NUL character."""
    if not run.strip():
        raise InvalidValueError(f"{what} is empty: give a shell command", field=what)
    if "\x00" in run:
        raise InvalidValueError(f"{what} contains a NUL character (\\x00): a command cannot hold one", field=what)
    return check_text(run, what)


def check_do(
    do: str | None, timeout: float | None, budget_usd: float | None, owner: str, usage: str | None = None
) -> None:
    """A milestone's doer: its command, its timeout, its budget in dollars,
    the form of its usage report (docs/doers.md)."""
    if do is not None:
        check_command(do, f"the do command of {owner}")
    if usage is not None and usage not in USAGE_FORMS:
        raise InvalidValueError(
            f"invalid do_usage {usage!r} for {owner}: use one of {', '.join(USAGE_FORMS)}",
            field="do_usage",
            value=repr(usage),
        )
    _check_seconds(timeout, owner, "do_timeout", zero_ok=False)
    ok = budget_usd is None or (
        not isinstance(budget_usd, bool)
        and isinstance(budget_usd, int | float)
        and math.isfinite(budget_usd)
        and 0 <= budget_usd <= MAX_USD
    )
    if not ok:
        raise InvalidValueError(
            f"invalid do_budget_usd {budget_usd!r} for {owner}: must be a number of dollars from 0 to {MAX_USD:g}",
            field="do_budget_usd",
            value=repr(budget_usd),
        )


def check_env(env: Mapping[str, str], what: str) -> Mapping[str, str]:
    """Environment entries that can be passed to a process."""
    for key, value in env.items():
        if not key or "=" in key or "\x00" in key:
            raise InvalidValueError(
                f"invalid environment variable name {key!r} in {what}: a non-empty name without '=' or NUL",
                field=what,
            )
        if "\x00" in value:
            raise InvalidValueError(f"environment variable {key!r} in {what} contains a NUL character", field=what)
    return env


INPUTS_RULE = (
    "gitignore-style patterns relative to the workspace root, e.g. 'src/pkg/**', './setup.py' (that file at the"
    " root only) or '!**/*.md', module entries such as 'module:pkg.mod' (the module and what it imports), or"
    " environment entries such as 'env:.venv/bin/python' or 'env:python3' (an interpreter, by its path or on the"
    " gate's PATH, and its installed distributions)"
)


def _pattern_problem(pattern: str) -> str | None:
    """What is wrong with an input pattern, or None. Pure checks of the
    gitignore syntax (the matching itself is :mod:`milepost.gates.inputs`)."""
    if not isinstance(pattern, str):
        return f"is a {type(pattern).__name__}, not text"
    if not pattern.strip():
        return "is empty"
    if len(pattern) > MAX_PATTERN:
        return f"is {len(pattern)} characters long (at most {MAX_PATTERN})"
    if "\x00" in pattern or "\n" in pattern or "\r" in pattern:
        return "contains a NUL or line-break character"
    if pattern.startswith((MODULE_PREFIX, ENV_PREFIX)):
        return module_entry_problem(pattern) if pattern.startswith(MODULE_PREFIX) else env_entry_problem(pattern)
    if pattern.startswith("#"):
        return "starts with '#', which makes it a comment in gitignore syntax (write '\\#' for a literal '#')"
    body = pattern[1:] if pattern.startswith("!") else pattern
    if not body.strip():
        return "negates nothing ('!' needs a pattern after it)"
    if body.startswith("/") or body.startswith("~"):
        return (
            "is absolute: patterns are relative to the workspace root (write 'src/x', or './x' for a file at the root)"
        )
    if ".." in body.split("/"):
        return "escapes the workspace ('..'): inputs are files inside it"
    if (len(body) - len(body.rstrip("\\"))) % 2 == 1:
        return "ends with an unescaped backslash"
    if any(m.group(1) for m in _SET.finditer(body)):
        return "has a '[' that no ']' closes: it matches no file (a set is '[ab]'; '\\[' is a literal '[')"
    return None


# A '[' opens a set (git's wildmatch): closed, or alone (group 1: it never closes and the pattern matches
# nothing, as '[', '[]' and '[!]' whose first ']' is a member, or '[[:alpha:]'). Possessive: no second reading.
_SET = re.compile(r"\\.|\[[!^]?+\]?+(?:\[:[a-z]+:\]|\\.|[^\]\\])*+\]|(\[)")


MODULE_PREFIX = "module:"
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def module_entry_problem(entry: str) -> str | None:
    """What is wrong with the form of a ``module:`` input entry, or None
    (whether the module exists is the workspace's question)."""
    body = entry[len(MODULE_PREFIX) :]
    if not body.strip():
        return "names no module (module:NAME takes a dotted name such as kv.mod_c, or a .py file's path)"
    if body.endswith(".py"):
        if body.startswith(("/", "~")) or ".." in body.split("/") or "\\" in body or "*" in body:
            return "is not the path of a .py file relative to the workspace root (such as src/kv/mod_c.py)"
        return None
    if not _DOTTED.fullmatch(body):
        return "is neither a dotted module name (such as kv.mod_c) nor the path of a .py file (such as src/kv/mod_c.py)"
    return None


ENV_PREFIX = "env:"
_ENV_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def env_entry_problem(entry: str) -> str | None:
    """What is wrong with the form of an ``env:`` input entry, or None
    (whether the interpreter exists is the machine's question, asked when it is checked)."""
    body = entry[len(ENV_PREFIX) :]
    if not body.strip():
        return "names no interpreter"
    if any(c.isspace() for c in body):
        return "contains white space"
    if body.startswith("~") or "$" in body or any(c in body for c in "*?[]\\"):
        return "is not a command name or a path ('~', '$', '\\' and wildcards are not expanded)"
    if "/" not in body:
        return None if _ENV_WORD.fullmatch(body) else "is not a command name"
    if body.endswith("/"):
        return "names a folder, not an interpreter"
    if ".." in body.split("/"):
        return "has a '..' part (write the absolute path of an interpreter outside the workspace)"
    return None


def _normal_pattern(pattern: str) -> str:
    """``./src/**`` and ``src/**`` mean the same (a '/' inside anchors a
    pattern at the root): keep the second spelling. ``./setup.py`` anchors a
    name that would otherwise match at any depth: it keeps its ``./``."""
    if pattern.startswith(MODULE_PREFIX):
        return MODULE_PREFIX + pattern[len(MODULE_PREFIX) :].removeprefix("./")
    if pattern.startswith(ENV_PREFIX):
        body = pattern[len(ENV_PREFIX) :]
        return ENV_PREFIX + (body.removeprefix("./") if "/" in body.removeprefix("./") else body)
    neg = pattern.startswith("!")
    body = pattern[1:] if neg else pattern
    while body.startswith("././"):
        body = body[2:]
    if body.startswith("./") and "/" in body[2:].rstrip("/"):
        body = body[2:]
    return ("!" if neg else "") + body


def check_input_pattern(pattern: str, owner: str) -> str:
    """One input pattern, normalised, or :class:`InvalidValueError` naming ``owner`` and the pattern."""
    problem = _pattern_problem(pattern)
    if problem is not None:
        raise InvalidValueError(
            f"invalid input pattern {pattern!r} of {owner}: it {problem}; inputs are {INPUTS_RULE}",
            field="inputs",
            value=repr(pattern),
        )
    return _normal_pattern(pattern)


def check_inputs(patterns: Sequence[str], owner: str) -> list[str]:
    """A milestone's input patterns, checked and normalised (duplicates dropped, order kept)."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if len(patterns) > MAX_INPUTS:
        raise InvalidValueError(
            f"{owner} has {len(patterns)} input patterns: at most {MAX_INPUTS} (use '**' to cover folders)",
            field="inputs",
        )
    return list(dict.fromkeys(check_input_pattern(p, owner) for p in patterns))


def _input_pattern(v: str) -> str:
    problem = _pattern_problem(v)
    if problem is not None:
        raise ValueError(f"{problem}; inputs are {INPUTS_RULE}")
    return _normal_pattern(v)


def _no_nul(v: str) -> str:
    if "\x00" in v:
        raise ValueError("contains a NUL character (\\x00)")
    return v


def _command(v: str) -> str:
    if not v.strip():
        raise ValueError("is empty: give a shell command")
    return _no_nul(v)


def _env(v: dict[str, str]) -> dict[str, str]:
    for key, value in v.items():
        if not key or "=" in key or "\x00" in key:
            raise ValueError(f"invalid variable name {key!r}: a non-empty name without '=' or NUL")
        if "\x00" in value:
            raise ValueError(f"variable {key!r} contains a NUL character")
    return v


# Field types of the plan-file models: the same limits, reported by pydantic with the file's line.
Text = Annotated[str, Field(max_length=MAX_TEXT), AfterValidator(_no_nul)]
CommandText = Annotated[str, Field(min_length=1, max_length=MAX_TEXT), AfterValidator(_command)]
EnvMap = Annotated[dict[str, str], AfterValidator(_env)]
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
Delay = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
Retries = Annotated[StrictInt, Field(ge=0, le=MAX_RETRIES)]
Budget = Annotated[float, Field(ge=0, le=MAX_USD, allow_inf_nan=False)]
# The forms of a doer's usage report milepost reads (milepost.gates.usage; docs/doers.md).
UsageForm = Literal["claude-json", "codex-json", "file"]
USAGE_FORMS: tuple[str, ...] = get_args(UsageForm)
InputPattern = Annotated[str, AfterValidator(_input_pattern)]
# A model (its id, or its family: the id without its date) a plan prices for a streamed doer's estimate.
ModelName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_name(v: str) -> str:
    if not _ENV_NAME.fullmatch(v):
        raise ValueError(f"{v!r} is not a variable name (letters, digits and '_', not starting with a digit)")
    return v


EnvName = Annotated[str, AfterValidator(_env_name)]


def _each_file(v: str) -> str:
    v = v.removeprefix("./")
    if not v.strip() or v.startswith(("/", "~")) or ".." in v.split("/") or "\x00" in v or "\n" in v:
        raise ValueError(f"{v!r} is not a file path relative to the workspace root (such as tests/test_a.py)")
    return v


EachFile = Annotated[str, AfterValidator(_each_file)]


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore", use_enum_values=False)


class GateCommand(_Read):
    """One command of a gate: run with ``/bin/sh -c``; passes when it exits 0."""

    name: str = "gate"
    run: str
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    timeout: Annotated[float, Field(gt=0)] | None = None
    # Run once per file ({file} in run): each run a unit of proof (see milepost.gates.units).
    each: list[str] = Field(default_factory=list)

    def unit_run(self, path: str) -> str:
        """The command of one unit: ``{file}`` replaced by the path, quoted for the shell."""
        return self.run.replace("{file}", shlex.quote(path))


class Milestone(_Read):
    id: Annotated[int, Field(ge=1)]
    name: str
    deps: list[str] = Field(default_factory=list)
    acceptance: str = ""
    gate: list[GateCommand] = Field(default_factory=list)
    status: MilestoneStatus = MilestoneStatus.PENDING
    attempts: Annotated[int, Field(ge=0)] = 0
    retries: Annotated[int, Field(ge=0)] = DEFAULT_RETRIES
    timeout: Annotated[float, Field(gt=0)] | None = None
    review: bool = False
    awaiting_review: bool = False
    fix: str | None = None
    retry_delay: Annotated[float, Field(ge=0)] | None = None
    retry_at: datetime | None = None
    reason: str | None = None
    # Proof bound to inputs (see milepost.gates.inputs): the patterns, whether a
    # passed run with the same fingerprint may stand in for a run, whether a
    # failure on unchanged inputs may be retried, and the fingerprint of the
    # attempt that set the current status (done: what was proven).
    inputs: list[str] = Field(default_factory=list)
    cache: bool = True
    flaky: bool = False
    fingerprint: str | None = None
    # Agents as doers (docs/doers.md): the command that does the milestone's work before its gate,
    # the seconds it may take, and the dollars its attempts may cost (from MILEPOST_COST_FILE).
    do: str | None = None
    do_timeout: Annotated[float, Field(gt=0)] | None = None
    do_budget_usd: Annotated[float, Field(ge=0)] | None = None
    do_usage: UsageForm | None = None  # the form of its doer's usage report (None: the item's, else found)
    updated_at: datetime | None = None

    @property
    def has_doer(self) -> bool:
        """Whether a doer does its work before its gate proves it."""
        return bool(self.do)

    @property
    def max_attempts(self) -> int:
        return 1 + self.retries

    @property
    def budget_left(self) -> bool:
        return self.attempts < self.max_attempts

    @property
    def has_gate(self) -> bool:
        return bool(self.gate)

    @property
    def has_inputs(self) -> bool:
        """Whether its proof is bound to files (only a gated milestone's is)."""
        return bool(self.inputs) and bool(self.gate)

    @property
    def is_stuck(self) -> bool:
        """Stuck, or sent back for a fix with no budget left: only an
        operator's reset moves it again."""
        return self.status is MilestoneStatus.STUCK or (
            self.status is MilestoneStatus.NEEDS_FIX and not self.budget_left
        )


class ItemDefaults(_Read):
    retries: Annotated[int, Field(ge=0)] = DEFAULT_RETRIES
    timeout: Annotated[float, Field(gt=0)] | None = None
    fix: str | None = None
    retry_delay: Annotated[float, Field(ge=0)] | None = None
    inputs: list[str] = Field(default_factory=list)


class ModelPrice(_Read):
    """A model's list price, USD per million tokens, for a streamed doer's
    running estimate (milepost.gates.prices holds the ones milepost knows)."""

    input: Budget
    output: Budget


class DoerSettings(_Read):
    """An item's ``doer:`` block: how the milestones with a ``do:`` command
    are worked (docs/doers.md)."""

    isolate: Isolation = Isolation.WORKTREE  # (in a workspace that is not a git repository: none is needed)
    base: str | None = None  # the integration branch (None: the branch checked out when the drive starts)
    setup: str | None = None  # run in a fresh worktree before its doer (installing dependencies)
    judge_setup: str | None = None  # run in the judge's checkout before a doer's gate (None: setup)
    judge_key: list[str] = Field(default_factory=list)  # files the judge's set-up is built from ([]: the usual)
    protect: list[str] = Field(default_factory=list)  # gitignore patterns a doer must not change
    env: list[str] = Field(default_factory=list)  # names of variables passed on to doers (else scrubbed)
    budget_usd: Annotated[float, Field(ge=0)] | None = None  # what the item's doers may cost in all
    usage: UsageForm | None = None  # the form of its doers' usage reports (None: found by looking)
    prices: dict[ModelName, ModelPrice] = Field(default_factory=dict)  # added to or replacing milepost's prices

    @property
    def is_default(self) -> bool:
        return self == DoerSettings()


class TodoItem(_Read):
    text: str
    state: TodoState = TodoState.PENDING


class Wait(_Read):
    kind: WaitKind
    resource: str | None = None
    reason: str = ""
    deadline: datetime | None = None
    since: datetime | None = None


class WorkRef(_Read):
    """Evidence: a gate run's log, a fix, a PR, a document."""

    kind: str
    ref: str
    reason: str = ""
    at: datetime | None = None


class PlanArtifact(_Read):
    """The item's plan.md, as found on disk (never invented)."""

    path: str
    status: ArtifactStatus
    sha256: str | None = None
    size: int | None = None
    preview: str | None = None
    preview_complete: bool = False


class WorkItem(_Read):
    id: int
    agent: str
    objective: str
    state: ItemState = ItemState.OPEN
    plan_status: PlanStatus = PlanStatus.DRAFT
    readiness: Readiness = Readiness.RUNNABLE
    readiness_state: ReadinessState = ReadinessState.PLANNING
    readiness_reason: str = ""
    current: bool = False
    revision: int = 1
    todo_list: list[TodoItem] = Field(default_factory=list)
    blocked_by: str | None = None
    recheck_at: datetime | None = None
    waits: list[Wait] = Field(default_factory=list)
    after: int | None = None
    report: str | None = None
    cancel_reason: str | None = None
    defaults: ItemDefaults = Field(default_factory=ItemDefaults)
    doer: DoerSettings = Field(default_factory=DoerSettings)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    milestones: list[Milestone] = Field(default_factory=list)
