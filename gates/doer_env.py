"""What a doer is given and what it leaves: its environment (scrubbed of
milepost's own store and secrets), its prompt file, and the cost it reports.

A doer is the ``do:`` command of a milestone (a coding agent, or any
script). It runs as a task of the drive before the milestone's gate, in the
attempt's worktree (docs/doers.md). Nothing here runs it: the gate
supervisor does, as it runs a gate's commands.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from milepost.graph.models import Milestone

__all__ = ["DOER_AGENT", "Cost", "PromptFacts", "doer_env", "read_cost", "write_prompt"]

# A milepost command a doer runs acts as this agent, never as an operator.
DOER_AGENT = "doer"

# Variables a doer never inherits unless ``doer.env`` names them: milepost's own
# (MILEPOST_DB is the store's URL: a doer must not reach the store that judges it)
# and the usual carriers of credentials. PATH, HOME, LANG and the like pass.
_SCRUBBED_PREFIXES = ("MILEPOST_", "PREFECT_", "DATABASE_", "PG", "AWS_", "GOOGLE_", "AZURE_")
_SCRUBBED_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "APIKEY", "PRIVATE_KEY")


def _scrubbed(name: str) -> bool:
    upper = name.upper()
    return upper.startswith(_SCRUBBED_PREFIXES) or any(part in upper for part in _SCRUBBED_PARTS)


def doer_env(
    inherited: Mapping[str, str],
    allowed: Sequence[str],
    given: Mapping[str, str],
) -> dict[str, str]:
    """A doer's whole environment: ``inherited`` (the driver's) without
    milepost's own variables and likely secrets, except the names in
    ``allowed`` (the item's ``doer.env``), then what milepost gives it
    (``given``: MILEPOST_ITEM, MILEPOST_PROMPT...). An agent CLI's key
    (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``) passes only when listed."""
    keep = set(allowed)
    env = {k: v for k, v in inherited.items() if k in keep or not _scrubbed(k)}
    env.update(given)
    env["MILEPOST_AGENT"] = DOER_AGENT
    return env


@dataclass(frozen=True)
class PromptFacts:
    """What a doer's prompt says beyond its milestone."""

    objective: str
    item: int
    attempt: int
    worktree: str
    deps_done: Sequence[tuple[str, str]] = ()  # (name, what its doer did: a diff stat, or its acceptance)
    failure: str | None = None  # the last failed attempt's reason and log's end
    protect: Sequence[str] = ()
    isolated: bool = True  # in a worktree of its own (False: doer.isolate none, in the workspace itself)


def write_prompt(path: Path, m: Milestone, facts: PromptFacts) -> Path:
    """Write the prompt file ``MILEPOST_PROMPT`` names: the objective, the
    milestone's acceptance text, its gate commands, its inputs, what its
    deps did, and on a retry the failure. Markdown, for a person too."""
    lines = [
        f"# Milestone {m.name!r} of work item {facts.item} (attempt {facts.attempt})",
        "",
        "## Objective",
        facts.objective,
        "",
        "## Acceptance",
        m.acceptance or "(none written: the gate below decides)",
        "",
        "## The gate that decides whether this work is done",
        "It runs after you exit, in a clean checkout of your committed work (files outside git are not"
        " there; protected paths as the integration branch has them); every command must exit 0.",
        *(f"- `{c.run}`" for c in m.gate),
    ]
    if not m.gate:
        lines.append("- (no gate: the milestone is done when your work is merged)")
    if m.inputs:
        lines += ["", "## Files the gate proves (inputs)", *(f"- `{p}`" for p in m.inputs)]
    if facts.deps_done:
        lines += ["", "## Done before you (its work is in your worktree)", *(f"- {n}: {d}" for n, d in facts.deps_done)]
    if facts.protect:
        enforced = "an attempt that does is refused" if facts.isolated else "the gate's tests judge you"
        lines += ["", f"## Do not change ({enforced})", *(f"- `{p}`" for p in facts.protect)]
    if facts.failure:
        lines += ["", "## Your last attempt failed", "```", facts.failure.rstrip(), "```"]
    kept = "Your changes are committed for you when you exit 0." if facts.isolated else "Nothing is committed for you."
    lines += ["", f"Work in {facts.worktree}. {kept}", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@dataclass(frozen=True)
class Cost:
    """What a doer said its attempt cost (``MILEPOST_COST_FILE``)."""

    usd: float | None = None
    tokens: int | None = None
    problem: str | None = None  # the file was there but unreadable: said, not counted


def _amount(value: object, kind: type) -> bool:
    """Whether ``value`` is absent or a finite number >= 0 (whole for ``int``)."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        return False
    return math.isfinite(value) and value >= 0


def read_cost(path: Path) -> Cost:
    """The cost file a doer may write: ``{"usd": 0.12, "tokens": 3400}``.
    Absent: nothing known. Unreadable or of another form: nothing counted,
    with the problem named (the doer's log says so)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Cost()
    except OSError as e:
        return Cost(problem=f"cannot read {path.name}: {e.strerror}")
    try:
        data = json.loads(text)
    except ValueError:
        return Cost(problem=f'{path.name} is not JSON: write {{"usd": 0.12, "tokens": 3400}}')
    if not isinstance(data, dict):
        return Cost(problem=f'{path.name} holds a {type(data).__name__}: write {{"usd": 0.12, "tokens": 3400}}')
    usd, tokens = data.get("usd"), data.get("tokens")
    if not (_amount(usd, float) and _amount(tokens, int)):
        return Cost(problem=f"{path.name}: usd must be a number >= 0 and tokens a whole number >= 0")
    return Cost(usd=None if usd is None else float(usd), tokens=tokens)
