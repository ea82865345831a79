"""A work item's evidence: its plan.md artifact (written when the item is
created, never overwritten) and its work refs (gate runs add theirs; people
and agents add PRs, documents, ...)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select

from milepost._schema import utcnow
from milepost.errors import InvalidValueError
from milepost.graph.models import Milestone, PlanArtifact, WorkRef, check_text
from milepost.graph.status import ArtifactStatus
from milepost.retry import retried
from milepost.service._find import head, resolve
from milepost.service._rows import REFS
from milepost.service._tx import Context, ItemEvent, Tx, write

__all__ = ["add_ref", "keep_scaffold", "plan_artifact", "plan_path", "refs", "scaffold_base", "write_plan_md"]


# -- the plan artifact -----------------------------------------------------------


def plan_path(ctx: Context, item_id: int) -> Path:
    store = ctx.store
    path = store.evidence_dir("work-items") / str(item_id) / "plan.md"
    if store.legacy_layout and not path.exists():
        # Stores made before schema 0004 kept plan.md outside a store-id folder.
        old = store.home / "work-items" / str(item_id) / "plan.md"
        if old.exists():
            return old
    return path


def write_plan_md(ctx: Context, item_id: int, objective: str, milestones: list[Milestone]) -> None:
    lines = [f"# {objective}", "", "## Milestones", ""]
    for m in milestones:
        deps = f" (after {', '.join(m.deps)})" if m.deps else ""
        lines.append(f"- **{m.name}**{deps}: {m.acceptance or 'no acceptance text yet'}")
    if not milestones:
        lines.append("- none yet")
    lines += ["", "## Approach", "", "(edit this file: it is the durable plan of the work item)", ""]
    path = plan_path(ctx, item_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():  # never overwrite what someone wrote
        path.write_text("\n".join(lines))


def _scaffold_path(ctx: Context, item_id: int) -> Path:
    return ctx.store.evidence_dir("work-items") / str(item_id) / "scaffold.json"


def scaffold_base(ctx: Context, item_id: int) -> dict[str, Any] | None:
    """The plan ``plan scaffold`` last wrote for the item (the base a new
    scaffold is merged against: milepost/scaffold/rescaffold.py), or None."""
    try:
        data = json.loads(_scaffold_path(ctx, item_id).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def keep_scaffold(ctx: Context, item_id: int, plan: dict[str, Any]) -> None:
    """Keep what a scaffold applied to the item wrote, for the next one."""
    path = _scaffold_path(ctx, item_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(plan, indent=1))
    tmp.replace(path)


def plan_artifact(ctx: Context, item_id: int, preview_bytes: int = 1024) -> PlanArtifact:
    """The plan.md as found: available (hash, size, preview), missing or unreadable."""
    path = plan_path(ctx, item_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return PlanArtifact(path=str(path), status=ArtifactStatus.MISSING)
    except OSError:
        return PlanArtifact(path=str(path), status=ArtifactStatus.UNREADABLE)
    return PlanArtifact(
        path=str(path),
        status=ArtifactStatus.AVAILABLE,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        preview=data[:preview_bytes].decode("utf-8", errors="replace"),
        preview_complete=len(data) <= preview_bytes,
    )


# -- evidence ------------------------------------------------------------------


def add_ref(
    ctx: Context, kind: str, ref: str, reason: str = "", *, item: int | None = None, expect_revision: int | None = None
) -> WorkRef:
    for value, what in ((kind, "the ref's kind"), (ref, "the ref"), (reason, "the ref's reason")):
        check_text(value, what)
    if not kind.strip() or not ref.strip():
        raise InvalidValueError("a work ref needs a kind and a ref, e.g. `milepost ref add pr https://... --reason`")
    now = utcnow()

    def fn(tx: Tx) -> WorkRef:
        tx.check_open()
        tx.conn.execute(insert(REFS).values(item_id=tx.id, kind=kind.strip(), ref=ref.strip(), reason=reason, at=now))
        tx.emit(ItemEvent.REF, reason=f"{kind}: {ref}")
        return WorkRef(kind=kind.strip(), ref=ref.strip(), reason=reason, at=now)

    return write(ctx, resolve(ctx, item), fn, expect_revision)


@retried
def refs(ctx: Context, item: int | None = None) -> list[WorkRef]:
    item_id = resolve(ctx, item)
    with ctx.store.read() as conn:
        head(conn, item_id)
        found = conn.execute(select(REFS).where(REFS.c.item_id == item_id).order_by(REFS.c.id)).all()
    return [WorkRef.model_validate(r._mapping) for r in found]
