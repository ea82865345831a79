"""When a part fails under a drive.

- **The store or the Prefect API is lost** (``flows.loop.finish_running``): the drive
  starts no new gate, lets the running ones end on their own (they write
  their verdicts into the files beside their logs), records each one when
  the store can still take it (one try each), and ends with the fault, which
  the CLI reports as exit 3 naming the part. What it could not record, the
  next drive recovers from the files without running a passed gate again
  (``service.takeover``).
- **A gate task dies before it reports** (:func:`crashed_result`): its attempt
  is ``interrupted`` (no budget spent) the first times; the same milestone
  crashing again and again in one drive (a full disk, a broken worker) is a
  failed attempt from the :data:`CRASH_LIMIT`-th time on, so the budget
  ends the loop: never an endless round of reclaims. The count is the
  drive's own (``Loop.crashes``), passed in.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from milepost.flows.gate_task import GateSpec, SpecBox, TaskKind
from milepost.flows.prefect_guard import task_failure
from milepost.gates.command import GateResult, Outcome
from milepost.service import interrupted_result

__all__ = ["CRASH_LIMIT", "crashed_result", "read_result"]

CRASH_LIMIT = 3
CRASHED = "the gate task crashed before reporting"


def crashed_result(spec: GateSpec, future: Any = None, crashes: dict[tuple[int, int], int] | None = None) -> GateResult:
    """The result of an attempt whose task ended without a verdict: a crash
    (see the module). ``crashes``: the drive's count of its gate tasks that
    died before reporting, by (item, milestone key), updated here."""
    crashes = crashes if crashes is not None else {}
    detail = task_failure(future)
    why = f"{CRASHED}: {detail}" if detail else CRASHED
    key = (spec.claim.item, spec.claim.pk)
    if spec.kind is TaskKind.GATE:
        crashes[key] = crashes.get(key, 0) + 1
        if crashes[key] >= CRASH_LIMIT:
            now = datetime.now(UTC)
            reason = f"{why} ({crashes[key]} times in this drive: counted as a failed attempt)"
            return GateResult(
                outcome=Outcome.FAILED,
                reason=reason,
                tail=reason,
                started_at=now,
                finished_at=now,
                log_path=spec.log_path,
            )
    return interrupted_result(spec.claim, datetime.now(UTC), reason=why)


def read_result(box: SpecBox, future: Any = None, crashes: dict[tuple[int, int], int] | None = None) -> GateResult:
    """A gate task's verdict: kept on its box when the task ran in this
    process (even when a full disk kept it from its file), else the file it
    wrote beside its log (a Dask worker), else :func:`crashed_result`."""
    if box.verdict is not None:
        return box.verdict
    written = box.spec.files.read_result()
    if written is None:  # the task died before writing its result (a crashed worker), or the disk is full
        return crashed_result(box.spec, future, crashes)
    return written
