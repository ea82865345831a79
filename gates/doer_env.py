"""What a doer is given and what it leaves: its environment (scrubbed of
milepost's own store and secrets) and its prompt file. What it cost is read
by :mod:`milepost.gates.usage`.

A doer is the ``do:`` command of a milestone (a coding agent, or any
script). It runs as a task of the drive before the milestone's gate, in the
attempt's worktree (docs/doers.md). Nothing here runs it: the gate
supervisor does, as it runs a gate's commands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (an annotation only: milepost.gates.git scrubs git's environment with this module, cheaply)
    from milepost.graph.models import Milestone

__all__ = ["DOER_AGENT", "PromptFacts", "doer_env", "scrubbed_env", "write_prompt"]

# A milepost command a doer runs acts as this agent, never as an operator.
DOER_AGENT = "doer"

# Variables a doer (and a judge's gate) never inherits unless ``doer.env`` names them: milepost's own
# (MILEPOST_DB is the store's URL: a doer must not reach the store that judges it), the usual carriers of
# credentials, an SSH agent's socket and a Kubernetes config; and any variable whose value holds a URL with
# credentials in it: a password (scheme://user:pass@host), or a user alone outside an ssh URL (a token given
# as the user: https://ghp_x@github.com; ssh://git@host names a login, its key is the agent's). PATH, HOME,
# LANG and the like pass.
_SCRUBBED_PREFIXES = ("MILEPOST_", "PREFECT_", "DATABASE_", "PG", "AWS_", "GOOGLE_", "AZURE_")
_SCRUBBED_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "APIKEY", "PRIVATE_KEY")
_SCRUBBED_NAMES = frozenset({"SSH_AUTH_SOCK", "SSH_AGENT_PID", "KUBECONFIG"})
_URL_USER = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/\s:@]*)(:[^/\s@]*)?@")
_LOGIN_SCHEMES = frozenset({"ssh", "git+ssh", "ssh+git", "sftp"})  # a user alone there is a login name


def _credential_url(value: str) -> bool:
    """Whether ``value`` holds a URL with a password, or with a user alone outside an ssh URL."""
    for m in _URL_USER.finditer(value):
        if m.group(3) is not None or (m.group(2) and m.group(1).lower() not in _LOGIN_SCHEMES):
            return True
    return False


def _scrubbed(name: str, value: str) -> bool:
    upper = name.upper()
    return (
        upper.startswith(_SCRUBBED_PREFIXES)
        or any(part in upper for part in _SCRUBBED_PARTS)
        or upper in _SCRUBBED_NAMES
        or _credential_url(value)
    )


def scrubbed_env(inherited: Mapping[str, str], allowed: Sequence[str]) -> dict[str, str]:
    """``inherited`` without milepost's own variables, likely secrets,
    ``SSH_AUTH_SOCK``, ``KUBECONFIG`` and any variable whose value holds a
    URL with credentials (``scheme://user:pass@host``, or
    ``https://token@host``: a user alone, outside an ssh URL), except the names in
    ``allowed`` (the item's ``doer.env``): what a doer, and the gate that
    judges it, may see of the driver's environment."""
    keep = set(allowed)
    return {k: v for k, v in inherited.items() if k in keep or not _scrubbed(k, v)}


def doer_env(
    inherited: Mapping[str, str],
    allowed: Sequence[str],
    given: Mapping[str, str],
) -> dict[str, str]:
    """A doer's whole environment: ``inherited`` (the driver's) scrubbed
    (:func:`scrubbed_env`, keeping the names in ``allowed``: the item's
    ``doer.env``), then what milepost gives it (``given``: MILEPOST_ITEM,
    MILEPOST_PROMPT...). An agent CLI's key (``ANTHROPIC_API_KEY``,
    ``OPENAI_API_KEY``) passes only when listed."""
    env = scrubbed_env(inherited, allowed)
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
