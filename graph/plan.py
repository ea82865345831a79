"""Plan files: one work item with its milestones, as data.

The models forbid unknown fields (a typo must not be ignored silently). This
module sees parsed data only; reading YAML/JSON text, with line numbers for
errors, is :mod:`milepost.planfile`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, StrictBool, Tag, model_validator

from milepost.graph.errors import DuplicateNameError, InvalidValueError
from milepost.graph.models import (
    DEFAULT_RETRIES,
    MODULE_PREFIX,
    Budget,
    CommandText,
    Delay,
    EachFile,
    EnvMap,
    EnvName,
    GateCommand,
    InputPattern,
    ItemDefaults,
    Milestone,
    ModelName,
    Retries,
    Seconds,
    Text,
    UsageForm,
    WorkItem,
    check_name,
)
from milepost.graph.status import Isolation, MilestoneStatus, PlanStatus
from milepost.graph.validate import validate_milestones

__all__ = [
    "Plan",
    "PlanCommand",
    "PlanDefaults",
    "PlanDoer",
    "PlanMilestone",
    "PlanPrice",
    "gate_entry",
    "plan_from_item",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlanCommand(_Strict):
    """One named command of a gate; all of a gate's commands must pass, in order."""

    name: str | None = Field(None, description="a slug naming the command in reports (default: step-N)")
    run: CommandText = Field(description="shell command, run with /bin/sh -c; exit 0 passes")
    cwd: Text | None = Field(None, description="working directory, relative to the workspace root")
    env: EnvMap = Field(default_factory=dict, description="extra environment variables")
    timeout: Seconds | None = Field(None, description="seconds before the command is killed")
    each: list[EachFile] | None = Field(
        None,
        description="files to run the command once each, with {file} in run replaced by the file's path; each run"
        " is a unit of proof kept under the digest of its command and inputs, shared by every gate that runs it",
    )

    @model_validator(mode="after")
    def _each_has_file(self) -> PlanCommand:
        if self.each is not None:
            if not self.each:
                raise ValueError("each: is empty: list the files to run the command on (or leave each: out)")
            if "{file}" not in self.run:
                raise ValueError("run has no {file}: a command with each: runs once per file, named by {file}")
        return self


def _gate_kind(v: Any) -> str:
    return "list" if isinstance(v, list) else "command"


# A gate is one command or a list of named ones: the discriminator keeps
# errors about the form that was written (not both forms' complaints).
GateField = Annotated[
    Annotated[CommandText, Tag("command")] | Annotated[list[PlanCommand], Tag("list")],
    Discriminator(_gate_kind),
]


class PlanMilestone(_Strict):
    """A milestone: a step of the work, proven by its gate."""

    name: str = Field(
        description="1-64 characters: lowercase letters, digits, '-', '_' or '.', starting with a letter",
        json_schema_extra={"pattern": r"^[a-z][a-z0-9._-]{0,63}$"},  # checked by check_name, with its message
    )
    deps: list[str] = Field(default_factory=list, description="names of the milestones this one needs done first")
    acceptance: Text = Field("", description="what a reviewer checks")
    gate: GateField | None = Field(
        None, description="a shell command (exit 0 passes), or a list of named commands that must all pass"
    )
    retries: Retries | None = Field(None, description="retry budget: at most 1 + retries gate attempts")
    timeout: Seconds | None = Field(None, description="seconds before a gate command is killed")
    review: StrictBool = Field(False, description="wait for an operator's approve/reject after the gate passes")
    fix: CommandText | None = Field(None, description="command run after a failed attempt, before the retry")
    retry_delay: Delay | None = Field(None, description="the drive waits d, 2d, 4d ... seconds before each retry")
    hypothesis: StrictBool = Field(False, description="proposed, not yet confirmed: not scheduled until confirmed")
    inputs: list[InputPattern] | None = Field(
        None,
        description="files the gate proves (gitignore-style patterns relative to the workspace root); a done"
        " milestone whose inputs changed is stale and re-proven (replaces defaults.inputs)",
    )
    cache: StrictBool = Field(
        True, description="a passed run with the same gate and inputs anywhere in the store may stand in for a run"
    )
    flaky: StrictBool = Field(
        False, description="retry a failure even when its inputs did not change (else it waits for a change)"
    )
    do: CommandText | None = Field(
        None,
        description="a command that does the milestone's work before its gate (a coding agent such as claude -p,"
        " or any script), in a git worktree of its own; its change is merged once the gate passes (docs/doers.md)",
    )
    do_timeout: Seconds | None = Field(None, description="seconds before the do command is killed (a failed attempt)")
    do_budget_usd: Budget | None = Field(
        None, description="dollars this milestone's doers may cost in all (what their usage reports say)"
    )
    do_usage: UsageForm | None = Field(
        None,
        description="the form of its doer's usage report: claude-json (claude -p --output-format json or"
        " stream-json), codex-json (codex exec --json) or file (MILEPOST_COST_FILE); default: doer.usage,"
        " else found in its output",
    )


class PlanDefaults(_Strict):
    """Defaults for every milestone of the plan."""

    retries: Retries = Field(DEFAULT_RETRIES, description="retry budget: at most 1 + retries gate attempts")
    timeout: Seconds | None = Field(None, description="seconds before a gate command is killed")
    fix: CommandText | None = Field(None, description="command run after a failed attempt, before the retry")
    retry_delay: Delay | None = Field(None, description="the drive waits d, 2d, 4d ... seconds before each retry")
    inputs: list[InputPattern] = Field(
        default_factory=list, description="input patterns of every milestone with a gate that names none"
    )


class PlanPrice(_Strict):
    """A model's list price for a streamed doer's running estimate."""

    input: Budget = Field(description="USD per million input tokens (cache writes 1.25x, 2x for 1 hour; reads 0.1x)")
    output: Budget = Field(description="USD per million output tokens")


class PlanDoer(_Strict):
    """How the milestones with a ``do:`` command are worked (docs/doers.md)."""

    isolate: Isolation = Field(
        Isolation.WORKTREE,
        description="worktree: each attempt in a git worktree of its own, merged when its gate passes;"
        " none: doers work in the workspace itself, one at a time",
    )
    base: Text | None = Field(
        None, description="the integration branch doers start from and merge into (default: the branch checked out)"
    )
    setup: CommandText | None = Field(None, description="run in a fresh worktree before its doer (install deps)")
    judge_setup: CommandText | None = Field(
        None,
        description="run in the judge's checkout of a doer's committed work before its gate (default: setup);"
        " its outputs are kept while the judge_key files are unchanged",
    )
    judge_key: list[InputPattern] = Field(
        default_factory=list,
        description="gitignore patterns of the files the judge's set-up is built from (default: pyproject.toml,"
        " setup.py, setup.cfg, requirements*.txt, *.lock, package.json, package-lock.json); a change runs it again",
    )
    protect: list[InputPattern] = Field(
        default_factory=list,
        description="gitignore patterns of paths a doer must not change (e.g. tests/**): such an attempt is refused",
    )
    env: list[EnvName] = Field(
        default_factory=list,
        description="environment variables passed on to doers (others of milepost's own and secrets are removed)",
    )
    budget_usd: Budget | None = Field(None, description="dollars the item's doers may cost in all")
    usage: UsageForm | None = Field(
        None,
        description="the form of its doers' usage reports: claude-json, codex-json or file (default: found in"
        " each doer's output, else its MILEPOST_COST_FILE)",
    )
    prices: dict[ModelName, PlanPrice] = Field(
        default_factory=dict,
        description="model prices for a streamed Claude Code doer's running cost estimate, by model id or family"
        " (claude-sonnet-4-5: {input: 3, output: 15}); added to, or replacing, milepost's table (docs/doers.md)",
    )

    @model_validator(mode="after")
    def _protect_paths(self) -> PlanDoer:
        if any(p.startswith(MODULE_PREFIX) for p in self.protect):
            raise ValueError("protect takes path patterns (such as tests/**), not module: entries")
        if any(p.startswith(MODULE_PREFIX) for p in self.judge_key):
            raise ValueError("judge_key takes path patterns (such as uv.lock), not module: entries")
        return self


class Plan(_Strict):
    """A milepost plan file: one work item and its milestone DAG (YAML or JSON)."""

    objective: Annotated[Text, Field(min_length=1, description="what the work item should achieve")]
    plan_status: PlanStatus = Field(
        PlanStatus.DRAFT, description="draft, ready (stable enough to execute; the plan still changes) or needs_input"
    )
    defaults: PlanDefaults = Field(default_factory=PlanDefaults, description="defaults for every milestone")
    doer: PlanDoer | None = Field(None, description="how milestones with a do: command are worked (docs/doers.md)")
    milestones: list[PlanMilestone] = Field(
        default_factory=list, description="the milestones, in any order; ids follow this order"
    )
    # What check() validated (of which milestone list), kept for one take_milestones().
    _checked: tuple[list[PlanMilestone], list[Milestone]] | None = PrivateAttr(default=None)

    def check(self) -> None:
        """Validate the milestone set whole (:meth:`to_milestones`) and keep
        the result for :meth:`take_milestones`: a plan read from a file is
        validated once, not again when it is applied."""
        self._checked = (self.milestones, self.to_milestones())

    def take_milestones(self) -> list[Milestone]:
        """The milestones :meth:`check` validated (handed out once), or
        :meth:`to_milestones` now."""
        checked, self._checked = self._checked, None
        if checked is not None and checked[0] is self.milestones:
            return checked[1]
        return self.to_milestones()

    def to_milestones(self) -> list[Milestone]:
        """The plan's milestones with ids in file order, validated whole:
        names, duplicates, self-deps, unknown deps, cycles."""
        out = self.each_milestone()
        validate_milestones(out)
        return out

    def each_milestone(self) -> list[Milestone]:
        """The plan's milestones with ids in file order, each validated on its
        own but not as a set (a dep may be unknown, the deps may form a cycle):
        what a refused revision is compared with (:func:`milepost.graph.revise.running_problems`)."""
        out = []
        d = self.defaults
        pending, hypothesis = MilestoneStatus.PENDING, MilestoneStatus.HYPOTHESIS
        make = Milestone.model_validate
        for i, pm in enumerate(self.milestones, start=1):
            # (the loop is a hot path: 100,000 milestones in a large plan)
            gate = _gate_commands(pm)
            inputs = pm.inputs
            if inputs is None:
                inputs = d.inputs if gate else []
            elif inputs and not gate:
                raise InvalidValueError(
                    f"milestone {pm.name!r} has inputs but no gate: inputs bind a gate's proof to files;"
                    " add a gate or drop the inputs",
                    milestone=pm.name,
                )
            deps = pm.deps
            out.append(
                make(  # a dict through the model's validator: twice as fast as keywords through __init__
                    {
                        "id": i,
                        "name": pm.name,
                        "deps": list(dict.fromkeys(deps)) if len(deps) > 1 else deps,
                        "acceptance": pm.acceptance,
                        "gate": gate,
                        "retries": d.retries if pm.retries is None else pm.retries,
                        "timeout": d.timeout if pm.timeout is None else pm.timeout,
                        "review": pm.review,
                        "fix": d.fix if pm.fix is None else pm.fix,
                        "retry_delay": d.retry_delay if pm.retry_delay is None else pm.retry_delay,
                        "status": hypothesis if pm.hypothesis else pending,
                        "inputs": list(dict.fromkeys(inputs)) if len(inputs) > 1 else inputs,
                        "cache": pm.cache,
                        "flaky": pm.flaky,
                        "do": pm.do,
                        "do_timeout": pm.do_timeout,
                        "do_budget_usd": pm.do_budget_usd,
                        "do_usage": pm.do_usage,
                    }
                )
            )
        return out


def _gate_commands(pm: PlanMilestone) -> list[GateCommand]:
    if pm.gate is None:
        return []
    if isinstance(pm.gate, str):
        return [GateCommand.model_validate({"name": "gate", "run": pm.gate})]  # (the validator: faster than keywords)
    cmds = []
    seen: set[str] = set()
    for i, c in enumerate(pm.gate, start=1):
        name = check_name(c.name, f"gate command (milestone {pm.name!r})") if c.name else f"step-{i}"
        if name in seen:
            raise DuplicateNameError(f"milestone {pm.name!r} has two gate commands named {name!r}")
        seen.add(name)
        each = list(dict.fromkeys(c.each)) if c.each else []
        cmds.append(GateCommand(name=name, run=c.run, cwd=c.cwd, env=c.env, timeout=c.timeout, each=each))
    return cmds


def plan_from_item(item: WorkItem) -> dict[str, Any]:
    """The plan-file form of a stored work item (``plan export``): applying it
    again creates an item with the same milestones, deps and gates."""
    d = item.defaults
    milestones = [_milestone_entry(m, d) for m in item.milestones]
    out: dict[str, Any] = {"objective": item.objective, "plan_status": item.plan_status.value}
    defaults = d.model_dump(exclude_defaults=True)
    if defaults:
        out["defaults"] = defaults
    if not item.doer.is_default:
        out["doer"] = item.doer.model_dump(mode="json", exclude_defaults=True)
    out["milestones"] = milestones
    return out


def _milestone_entry(m: Milestone, d: ItemDefaults) -> dict[str, Any]:
    """One milestone's plan-file entry: its name, deps, acceptance and gate, then what differs from the defaults."""
    entry: dict[str, Any] = {"name": m.name}
    if m.deps:
        entry["deps"] = list(m.deps)
    if m.acceptance:
        entry["acceptance"] = m.acceptance
    gate = gate_entry(m)
    if gate is not None:
        entry["gate"] = gate
    entry.update(_milestone_settings(m, d))
    return entry


def gate_entry(m: Milestone) -> str | list[dict[str, Any]] | None:
    """The milestone's gate as a plan file writes it: one command's text, a list of commands, or None."""
    g0 = m.gate[0] if len(m.gate) == 1 else None
    if g0 is not None and g0.name == "gate" and not (g0.cwd or g0.env or g0.timeout or g0.each):
        return m.gate[0].run
    if m.gate:
        return [{"name": g.name} | g.model_dump(exclude_defaults=True) for g in m.gate]
    return None


def _milestone_settings(m: Milestone, d: ItemDefaults) -> dict[str, Any]:
    """The milestone's settings that differ from the item's defaults in plan-file order."""
    entry: dict[str, Any] = {}
    if m.retries != d.retries:
        entry["retries"] = m.retries
    if m.timeout != d.timeout:
        entry["timeout"] = m.timeout
    if m.review:
        entry["review"] = True
    if m.fix != d.fix:
        entry["fix"] = m.fix
    if m.retry_delay != d.retry_delay:
        entry["retry_delay"] = m.retry_delay
    if m.status is MilestoneStatus.HYPOTHESIS:
        entry["hypothesis"] = True
    if m.gate and m.inputs != d.inputs:
        entry["inputs"] = list(m.inputs)
    if not m.cache:
        entry["cache"] = False
    if m.flaky:
        entry["flaky"] = True
    entry.update({k: v for k in ("do", "do_timeout", "do_budget_usd", "do_usage") if (v := getattr(m, k)) is not None})
    return entry
