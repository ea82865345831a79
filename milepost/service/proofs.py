"""Proofs bound to inputs: which done milestones are stale, which failed
ones wait for a change of their inputs, the gate cache, and the stored
file lists of proofs.

A done milestone with inputs is *stale* when the fingerprint of its inputs
now differs from the one its proving attempt recorded (or none was
recorded). A needs_fix milestone whose inputs are unchanged since its
failed attempt is not retried blindly (unless it is ``flaky`` or has a fix
hook). Both are derived views: this module reads the files (through
:mod:`milepost.gates.inputs`) and the store, and writes nothing but file
lists. Milestones without inputs are never looked at, so an item without
inputs costs nothing here.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, and_, select

from milepost._schema import UNIT_PASSES, utcnow
from milepost.errors import InvalidValueError
from milepost.gates.imports import is_module_entry
from milepost.gates.inputs import Fingerprint, Snapshot, changed_paths, describe_changes, gate_fingerprint
from milepost.gates.outcome import CachedFrom, GateResult, Outcome
from milepost.gates.pyenv import interpreter_of, is_env_entry
from milepost.gates.unit_locks import UnitLocks
from milepost.gates.units import UnitBook
from milepost.graph.dag import WorkGraph
from milepost.graph.models import Milestone
from milepost.graph.status import MilestoneStatus
from milepost.results import StaleInfo
from milepost.retry import retried
from milepost.service._rows import MANIFESTS, MILESTONES, RUNS
from milepost.service._tx import Context

__all__ = [
    "Check",
    "cached_run",
    "check",
    "check_module_entries",
    "fingerprint",
    "input_files",
    "proven_files",
    "store_manifest",
    "store_unit_passes",
    "unit_book",
]

S = MilestoneStatus
# Changed paths kept in a stale milestone's view (the count says how many in all).
SHOWN_PATHS = 5


@dataclass
class Check:
    """What the inputs say about an item's milestones now."""

    stale: dict[str, StaleInfo] = field(default_factory=dict)
    # needs_fix milestones whose inputs are unchanged since their failed attempt -> the reason
    waiting: dict[str, str] = field(default_factory=dict)
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)


def check_module_entries(root: Path, milestones: Iterable[Milestone]) -> None:
    """Refuse ``module:`` inputs that name no module of the workspace now
    (all of them in one error, the first ten shown), before anything is written."""
    milestones = list(milestones)
    wanted = [(m, e) for m in milestones for e in m.inputs if is_module_entry(e)]
    if not wanted:
        return
    snap = Snapshot(root)
    bad: list[str] = []
    for m, entry in wanted:
        roots = snap.imports.roots_of([e for e in m.inputs if is_module_entry(e)])
        if snap.imports.resolve_entry(entry, roots) is None:
            body = entry.removeprefix("module:")
            where = "no such file" if body.endswith(".py") else f"not found in {', '.join(r or '.' for r in roots)}"
            bad.append(f"{entry} of {m.name!r} ({where})")
    if bad:
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise InvalidValueError(
            f"input {'entries name' if len(bad) > 1 else 'entry names'} no module of the workspace: "
            f"{'; '.join(bad[:10])}{more}; a module entry names a Python module in the workspace root or src/"
            " (module:pkg.mod) or its file (module:lib/pkg/mod.py)",
            field="inputs",
        )


def input_files(root: Path, m: Milestone) -> dict[str, Any]:
    """What a milestone's input entries stand for now: per entry its files
    (a ``module:`` entry: the module and what it imports as the files are
    now), or why it names nothing; and every file, once."""
    snap = Snapshot(root)
    try:
        roots = snap.imports.roots_of([e for e in m.inputs if is_module_entry(e)])
        entries = []
        every: set[str] = set()
        for e in m.inputs:
            extra: dict[str, Any] = {}
            if is_env_entry(e):
                files, (missing, extra) = [], environment_of(snap, e)
            elif is_module_entry(e):
                found = snap.imports.expand(e, roots)
                files, missing = sorted(found.files), found.missing
            else:
                files, missing = snap.matching([e]), None
            if not is_env_entry(e):
                extra = {"config": sorted(snap.runner_config(files))}
            every |= set(files)
            entries.append({"entry": e, "files": files, "missing": missing, **extra})
        # The last matching pattern wins: a negation removes files from those before it.
        files_now = snap.matching(m.inputs) if any(e.startswith("!") for e in m.inputs) else sorted(every)
    finally:
        snap.save()
    return {"milestone": m.name, "inputs": entries, "files": files_now}


def environment_of(snap: Snapshot, entry: str) -> tuple[str | None, dict[str, Any]]:
    """What an ``env:`` entry stands for now: (why it names nothing, or None),
    and ``{"environment": {interpreter, executable, version, distributions}}``."""
    interpreter, why = interpreter_of(entry[len("env:") :], snap.root, os.environ.get("PATH"))
    if interpreter is None:
        return why, {}
    try:
        facts = snap.envs.facts(interpreter, os.environ)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return f"{interpreter} could not be asked: {e}", {}
    return None, {
        "environment": {
            "interpreter": interpreter,
            "executable": facts.executable,
            "version": facts.version.split()[0] if facts.version else "",
            "distributions": dict(sorted(facts.distributions.items())),
        }
    }


def fingerprint(snap: Snapshot, m: Milestone) -> Fingerprint:
    """``m``'s fingerprint now: its inputs, its gate's spec and its ``each:`` steps' environments."""
    return gate_fingerprint(snap, m.inputs, m.gate, m.timeout)


def _wants_check(m: Milestone) -> bool:
    if not m.has_inputs:
        return False
    if m.status is S.DONE:
        return True
    return m.status is S.NEEDS_FIX and m.fingerprint is not None and not m.flaky and not m.fix


def check(
    ctx: Context, item_id: int, g: WorkGraph, names: Iterable[str] | None = None, snap: Snapshot | None = None
) -> Check:
    """Fingerprint the done (and needs_fix) milestones with inputs (or just
    ``names``) and compare with what their attempts recorded; marks the
    graph's stale milestones. One pass over the workspace's files."""
    wanted = set(names) if names is not None else None
    targets = [m for m in g if _wants_check(m) and (wanted is None or m.name in wanted)]
    out = Check()
    if not targets:
        if wanted is None:
            g.mark_stale(())
        return out
    own = snap is None
    snap = snap or Snapshot(ctx.store.root)
    try:
        for m in targets:
            fp = fingerprint(snap, m)
            out.fingerprints[m.name] = fp
            if m.status is S.DONE:
                if fp.digest is None or fp.digest != m.fingerprint:
                    out.stale[m.name] = StaleInfo(changed=[], changed_count=0, reason="")  # reason below
            elif fp.digest is not None and fp.digest == m.fingerprint:
                out.waiting[m.name] = "inputs unchanged since its failed attempt: waiting for a change"
    finally:
        if own:
            snap.save()
    if out.stale:
        _explain(ctx, item_id, g, out)
    if out.waiting:
        _attempt_numbers(ctx, item_id, out)
    marked = set(out.stale) if wanted is None else (set(g.stale()) - wanted) | set(out.stale)
    g.mark_stale(marked)
    return out


@retried
def _explain(ctx: Context, item_id: int, g: WorkGraph, out: Check) -> None:
    """The reason of each stale milestone: the paths changed since its proof."""
    names = list(out.stale)
    with ctx.store.read() as conn:
        proofs = {
            r.name: r
            for r in conn.execute(
                select(MILESTONES.c.name, RUNS.c.inputs_digest, RUNS.c.rewrote)
                .join(
                    RUNS, and_(RUNS.c.milestone_id == MILESTONES.c.id, RUNS.c.fingerprint == MILESTONES.c.fingerprint)
                )
                .where(MILESTONES.c.item_id == item_id, MILESTONES.c.name.in_(names))
                .order_by(RUNS.c.attempt)
            )
        }
        lists = {d: proven_files(conn, d) for d in {p.inputs_digest for p in proofs.values() if p.inputs_digest}}
    for name in names:
        fp = out.fingerprints[name]
        proof = proofs.get(name)
        files = lists.get(proof.inputs_digest) if proof is not None and proof.inputs_digest else None
        changed = changed_paths(files, fp.files) if files is not None else []
        parts = []
        if changed:
            parts.append(f"changed since proven: {describe_changes(changed)}")
        if fp.unreadable:
            parts.append(f"unreadable: {fp.problems()}")
        if g.get(name).fingerprint is None:
            parts.append(
                "no fingerprint recorded (proven before its inputs were fingerprinted, or on unreadable files)"
            )
        elif not changed and not fp.unreadable:
            parts.append("inputs changed since proven (the proven file list is not in the store)")
        rewrote = set(proof.rewrote or []) if proof is not None else set()
        if rewrote and rewrote & set(changed):
            parts.append("its own gate changes its inputs")
        out.stale[name] = StaleInfo(
            changed=changed[:SHOWN_PATHS] or sorted(fp.unreadable)[:SHOWN_PATHS],
            changed_count=len(changed) or len(fp.unreadable),
            reason="; ".join(parts),
        )


@retried
def _attempt_numbers(ctx: Context, item_id: int, out: Check) -> None:
    from sqlalchemy import func

    with ctx.store.read() as conn:
        last = dict(
            conn.execute(
                select(MILESTONES.c.name, func.max(RUNS.c.attempt))
                .join(RUNS, RUNS.c.milestone_id == MILESTONES.c.id)
                .where(MILESTONES.c.item_id == item_id, MILESTONES.c.name.in_(list(out.waiting)))
                .group_by(MILESTONES.c.name)
            ).all()
        )
    for name in out.waiting:
        if name in last:
            out.waiting[name] = f"failed at attempt {last[name]}; inputs unchanged since: waiting for a change"


# -- file lists and the gate cache -------------------------------------------------------


def proven_files(conn: Connection, digest: str) -> dict[str, str] | None:
    files = conn.execute(select(MANIFESTS.c.files).where(MANIFESTS.c.digest == digest)).scalar()
    return dict(files) if isinstance(files, dict) else None


def store_manifest(conn: Connection, digest: str, files: dict[str, str]) -> None:
    """Keep a proof's file list (once per distinct list)."""
    if conn.execute(select(MANIFESTS.c.digest).where(MANIFESTS.c.digest == digest)).first() is not None:
        return
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt: Any = pg_insert(MANIFESTS).on_conflict_do_nothing(index_elements=["digest"])
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(MANIFESTS).on_conflict_do_nothing(index_elements=["digest"])
    conn.execute(stmt.values(digest=digest, files=files, created_at=utcnow()))


@dataclass(frozen=True)
class CachedRun:
    """A passed run that can stand in for an attempt with the same fingerprint."""

    id: int
    item: int
    milestone: str
    attempt: int
    inputs_digest: str | None


@retried
def cached_run(ctx: Context, fp: str) -> CachedRun | None:
    """The earliest passed run anywhere in the store with fingerprint ``fp``."""
    with ctx.store.read() as conn:
        r = conn.execute(
            select(RUNS.c.id, RUNS.c.item_id, MILESTONES.c.name, RUNS.c.attempt, RUNS.c.inputs_digest)
            .join(MILESTONES, MILESTONES.c.id == RUNS.c.milestone_id)
            .where(RUNS.c.fingerprint == fp, RUNS.c.outcome == "passed")
            .order_by(RUNS.c.id)
            .limit(1)
        ).first()
    if r is None:
        return None
    return CachedRun(id=r.id, item=r.item_id, milestone=r.name, attempt=r.attempt, inputs_digest=r.inputs_digest)


# -- units of proof ----------------------------------------------------------------------


def unit_book(ctx: Context, workers: int = 1) -> UnitBook:
    """A book of units for one drive, ``done`` or ``verify``: passes kept in
    the store stand in for a unit in the same state; up to ``workers`` units
    run at once."""

    @retried
    def lookup(ctx: Context, digest: str) -> CachedFrom | None:
        with ctx.store.read() as conn:
            r = conn.execute(
                select(UNIT_PASSES.c.item_id, UNIT_PASSES.c.milestone, UNIT_PASSES.c.attempt).where(
                    UNIT_PASSES.c.digest == digest
                )
            ).first()
        return None if r is None else CachedFrom(item=r.item_id, milestone=r.milestone, attempt=r.attempt)

    book = UnitBook(functools.partial(lookup, ctx), workers)
    book.shared = UnitLocks(Path(ctx.store.root))  # units shared with the workspace's other drivers
    return book


def store_unit_passes(conn: Connection, item_id: int, milestone: str, attempt: int, result: GateResult) -> None:
    """Keep the units this attempt ran and passed (a unit kept already stays as it was)."""
    now = utcnow()
    values = [
        {
            "digest": c.unit,
            "item_id": item_id,
            "milestone": milestone,
            "attempt": attempt,
            "file": c.file or "",
            "duration": c.duration,
            "created_at": now,
        }
        for c in result.commands
        if c.unit and c.outcome is Outcome.PASSED
    ]
    if not values:
        return
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt: Any = pg_insert(UNIT_PASSES).on_conflict_do_nothing(index_elements=["digest"])
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(UNIT_PASSES).on_conflict_do_nothing(index_elements=["digest"])
    conn.execute(stmt, values)
