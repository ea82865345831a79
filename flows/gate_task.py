"""The gate task: one gate (or fix) attempt as a Prefect task, in the
driver's process or on a Dask worker. Everything it needs travels in a
picklable :class:`GateSpec`; its result goes to a JSON file beside the
attempt's log (not through Prefect's result machinery), and its final state
is named for what it means to the milestone (Needs fix, Stuck, Interrupted).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.states import Cancelled, Completed, Failed
from pydantic import BaseModel, Field

from milepost.gates.attempt import AttemptFiles
from milepost.gates.command import GateResult, Outcome, command_header, run_gate
from milepost.gates.judge import JudgeOrder, make_judge
from milepost.gates.liveness import Life, life
from milepost.gates.outcome import CachedFrom
from milepost.gates.prices import prices_from_env
from milepost.gates.supervisor import host_identity, own_identity
from milepost.gates.unit_runs import CACHED_UNIT
from milepost.gates.units import UnitBook, unit_command
from milepost.gates.usage import BudgetWatch
from milepost.graph.models import GateCommand
from milepost.graph.words import count
from milepost.results import Claim

if TYPE_CHECKING:
    from milepost.flows.early import EarlyGate

__all__ = [
    "GATE_TASKS",
    "GateSpec",
    "SpecBox",
    "TaskKind",
    "call_inline",
    "driver_identity",
    "forward_output",
    "gate_task",
    "new_monitor",
    "run_boxed_spec",
    "run_gate_spec",
    "task_run_name",
    "task_state",
]

# Gate output forwarded to the Prefect task-run log (the UI); the whole output
# stays in the log file.
MAX_LOG_LINES = 2000
# A line forwarded is cut here, and output without line ends is forwarded in
# pieces of this size: the driver never holds more than a chunk of a log.
MAX_LINE_BYTES = 4096
STOP_POLL_SECONDS = 0.2


class TaskKind(StrEnum):
    """What a task of the drive runs: a milestone's gate, the fix hook after
    a failed attempt, or the doer before the gate (docs/doers.md)."""

    GATE = "gate"
    FIX = "fix"
    DO = "do"


class GateSpec(BaseModel):
    """Everything one gate (or fix) task needs; pickled to Dask workers."""

    claim: Claim
    kind: TaskKind = TaskKind.GATE
    commands: list[GateCommand]
    cwd: str
    env: dict[str, str]
    inherit_env: bool = True  # False: env is the whole environment (a doer's, scrubbed: gates/doer_env.py)
    timeout: float | None = None
    log_path: str
    stop_file: str
    # The driver process (host, boot, pid, start): a gate task in another
    # process (a Dask worker) stops its gate when that process is gone.
    driver: dict[str, Any] = Field(default_factory=dict)
    # Input patterns (relative to ``cwd``, the workspace root): the attempt's fingerprint.
    inputs: list[str] = Field(default_factory=list)
    # A passed run with the same fingerprint stands in: the driver wrote the
    # result file already, the task runs nothing (it is the run's node in the UI).
    cached: bool = False
    # False (cache: false): every unit of the gate runs, none is answered by the store or the drive.
    reuse_units: bool = True
    # A doer's attempt: the judge its commands run in, made by the task (gates/judge.py); cwd is then its
    # worktree (the judge's path is known once made).
    judge: JudgeOrder | None = None

    @property
    def files(self) -> AttemptFiles:
        """The attempt's files (its verdict among them)."""
        return AttemptFiles(Path(self.log_path))


def driver_identity() -> dict[str, Any]:
    return own_identity()


def _driver_gone(driver: dict[str, Any]) -> bool:
    """Whether the driver that submitted a gate task has died. Known only on
    its own machine; a task in the driver's own process never asks."""
    pid, start = driver.get("pid"), driver.get("start")
    if not isinstance(pid, int) or pid == os.getpid() or driver.get("boot") != host_identity()["boot"]:
        return False
    return life(pid, start if isinstance(start, int) else None) is Life.GONE


class _Watched:
    """One running gate task, as the :class:`_Monitor` sees it: when to stop
    its gate, and its log's lines still to forward to the task-run logger.

    A command's header (``=== [name] $ run``) is forwarded with the first
    output after it, or at the end of an attempt that did not pass: a quiet
    passing gate sends no log line at all (one API log record per gate was a
    tenth of a drive of quiet gates' work, in the gate's thread, Prefect's
    log worker and the server). Nor does a unit answered by a pass (its
    header and the line that says so): the gate says how many at its end, in
    one line. On click, a no-op drive sent 500 records for 250 such units, and
    Prefect's log worker took 0.2 to 0.4 s to hand them over as the drive
    ended (docs/benchmarks.md). The log file keeps every line."""

    def __init__(self, spec: GateSpec, logger: Any, limit: int) -> None:
        self.spec = spec
        self.stopped = threading.Event()  # run_gate stops the running command's whole group
        self.logger = logger
        self.path = Path(spec.log_path)
        self.limit = limit
        self.sent = 0
        self.pos = 0
        self.buf = b""
        self.lock = threading.Lock()
        # Each command's header, line by line, in the order the log holds them.
        self.headers = [_header_lines(c) for c in spec.commands]
        self.next_header = 0  # the command whose header comes next
        self.in_header: list[bytes] = []  # the rest of the header being read
        self.held: list[bytes] = []  # header lines not forwarded yet
        # The one-line headers of the units of ``each`` steps (in whatever order their runs end).
        self.unit_headers = {
            h[0] for c in spec.commands for p in c.each if len(h := _header_lines(unit_command(c, p))) == 1
        }
        self.unit_header: bytes | None = None  # a unit's header, held until the line after it: cached or not
        self.cached = 0  # units answered by a pass, not forwarded

    def check(self) -> None:
        if not self.stopped.is_set() and (os.path.exists(self.spec.stop_file) or _driver_gone(self.spec.driver)):
            self.stopped.set()

    def _send(self, line: bytes) -> None:
        if self.sent < self.limit:
            self.logger.info(line[:MAX_LINE_BYTES].decode("utf-8", errors="replace"))
        self.sent += 1

    def _release(self) -> None:
        for line in self.held:
            self._send(line)
        self.held.clear()

    def forward(self) -> int:
        """Send the log's new complete lines; how many bytes were new."""
        with self.lock:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.pos)
                    chunk = f.read(_CHUNK)
            except FileNotFoundError:
                return 0
            self.pos += len(chunk)
            self.buf += chunk
            *lines, self.buf = self.buf.split(b"\n")
            if len(self.buf) > MAX_LINE_BYTES:  # output without line ends: forwarded in pieces
                lines.append(self.buf)
                self.buf = b""
            for line in lines:
                self._line(line)
            return len(chunk)

    def _line(self, line: bytes) -> None:
        if self._header_line(line):
            self.held.append(line)
            return
        unit, self.unit_header = self.unit_header, None
        if unit is not None and line.startswith(b"milepost: " + CACHED_UNIT.encode()):
            self.cached += 1  # (answered by a pass: neither line is news)
            return
        if unit is None and line in self.unit_headers:
            self.unit_header = line
            return
        self._release()
        if unit is not None:
            self._send(unit)
        self._send(line)

    def _header_line(self, line: bytes) -> bool:
        """Whether ``line`` is the next line of a command's header (by its
        place: output that looks like a header is output)."""
        if self.in_header:
            if line == self.in_header[0]:
                self.in_header.pop(0)
                return True
            self.in_header = []
        if self.next_header < len(self.headers) and line == self.headers[self.next_header][0]:
            self.in_header = self.headers[self.next_header][1:]
            self.next_header += 1
            return True
        return False

    def finish(self, passed: bool) -> None:
        """The gate ended: forward the rest (an unterminated last line too;
        the held headers unless it passed)."""
        while self.forward() == _CHUNK:
            pass
        with self.lock:
            if self.buf:
                self._line(self.buf)
                self.buf = b""
            if self.unit_header is not None:
                self._release()
                self._send(self.unit_header)
                self.unit_header = None
            if not passed:
                self._release()
            if self.cached:
                units = count(self.cached, "unit")
                self.logger.info(f"milepost: {units} answered by passes, not run again (the gate's log: {self.path})")
            if self.sent > self.limit:
                more = self.sent - self.limit
                self.logger.warning(f"{count(more, 'more line')} not forwarded; the whole output is in {self.path}")


_CHUNK = 1 << 16  # bytes of the log read at a time


def _header_lines(cmd: GateCommand) -> list[bytes]:
    return command_header(cmd).encode().split(b"\n")[:-1]


class _Monitor:
    """One thread per drive watches its running gate tasks (a task on a Dask
    worker watches its own): it stops a gate when its driver asks (the stop file) or is gone, and forwards the
    gate's output to its task-run log as it is written, both every
    ``STOP_POLL_SECONDS``. (Two threads per gate cost two thread starts and
    joins per milestone, a scheduling round trip each on a busy machine.)

    A gate's start does not wake it: it looks every ``STOP_POLL_SECONDS``
    while it has work, and ends after ``IDLE_SECONDS`` without (the next
    gate starts it again). Woken per gate, it took the interpreter from the
    gate's own threads once per milestone, only to find a gate that had
    ended (a `true` gate takes about a millisecond)."""

    IDLE_SECONDS = 5.0

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.watched: set[_Watched] = set()
        self.lock = threading.Lock()
        self.running = False

    def add(self, w: _Watched) -> None:
        with self.lock:
            self.watched.add(w)
            if not self.running:
                self.running = True
                threading.Thread(target=self._run, name="milepost-gate-monitor", daemon=True).start()

    def remove(self, w: _Watched) -> None:
        with self.lock:
            self.watched.discard(w)

    def _run(self) -> None:
        idle_since = time.monotonic()
        while True:
            time.sleep(STOP_POLL_SECONDS)
            with self.lock:
                now = list(self.watched)
                if not now and time.monotonic() - idle_since >= self.IDLE_SECONDS:
                    self.running = False
                    return
            if now:
                idle_since = time.monotonic()
            for w in now:
                try:
                    w.check()
                    w.forward()
                except Exception:  # a log line lost to the UI is no reason to stop watching
                    continue


def new_monitor() -> _Monitor:
    """A drive's gate monitor (its thread starts with the first gate it watches)."""
    return _Monitor()


def _budget_watch(spec: GateSpec) -> Callable[[], str | None] | None:
    """A doer's watch: it is stopped once its streamed cost passes what is
    left of its budget (``MILEPOST_BUDGET_LEFT_USD``, given it by the drive)."""
    left = spec.env.get("MILEPOST_BUDGET_LEFT_USD") if spec.kind is TaskKind.DO else None
    if left is None:
        return None
    try:
        dollars = float(left)
    except ValueError:
        return None
    prices = prices_from_env(spec.env.get("MILEPOST_DO_PRICES"))
    return BudgetWatch(Path(spec.log_path), dollars, spec.env.get("MILEPOST_DO_USAGE"), prices).check


def run_gate_spec(spec: GateSpec, units: UnitBook | None = None, box: SpecBox | None = None) -> State[Any]:
    """The body of :data:`gate_task`: run one gate (or fix) attempt and end
    in a state that says how it went (see :func:`task_state`). Its verdict
    goes to the file beside the log (the record) and, in the driver's own
    process, onto ``box`` (the loop takes it from there). (A plain
    module-level function, so Dask can pickle the task by reference.)"""
    box = box if box is not None else SpecBox(spec, units)
    if spec.cached:
        return task_state(
            spec.claim, spec.kind, box.keep(GateResult.model_validate_json(spec.files.result.read_text()))
        )
    if box.early is None and box.confirm is not None and not box.confirm():
        box.lost = True
        return task_state(spec.claim, spec.kind, box.keep(_lease_lost(spec)))
    # The run logger is bound to this task run's context: take it here, use it in the monitor's thread.
    watched = _Watched(spec, get_run_logger(), MAX_LOG_LINES)
    # The drive's monitor; a task in another process (a Dask worker) watches its gate with one of its own.
    monitor = box.monitor if box.monitor is not None else _Monitor()
    monitor.add(watched)
    passed = False
    try:
        result = _run_judged(spec, box, watched.stopped) if spec.judge is not None else _run(spec, box, watched.stopped)
        passed = result.passed
    finally:
        monitor.remove(watched)
        watched.finish(passed)
    if watched.stopped.is_set() and not result.passed:
        result = result.model_copy(update={"outcome": Outcome.INTERRUPTED, "reason": "interrupted: the drive stopped"})
        spec.files.write_result(result)
    return task_state(spec.claim, spec.kind, box.keep(result))


def _run(
    spec: GateSpec, box: SpecBox, stopped: threading.Event, cwd: Path | None = None, env: dict[str, str] | None = None
) -> GateResult:
    """Run the attempt's commands in ``cwd`` (default the spec's) with ``env`` (default the spec's)."""
    where = cwd if cwd is not None else Path(spec.cwd)
    # A command started before the flow run (flows/early.py) is waited for, not started again.
    return (box.early.run_gate if box.early is not None else run_gate)(
        spec.commands,
        Path(spec.log_path),
        default_cwd=where,
        env=env if env is not None else spec.env,
        inherit_env=spec.inherit_env,
        default_timeout=spec.timeout,
        stop=stopped,
        # Run by call_inline, in the thread Ctrl-C and SIGTERM reach: the
        # interrupt stops the gate as the drive's stop file would (and is
        # raised again once the task run has ended).
        on_interrupt=box.defer(stopped) if box.deferring else None,
        inputs=spec.inputs,
        root=where,
        units=box.units,
        reuse_units=spec.reuse_units,
        origin=CachedFrom(item=spec.claim.item, milestone=spec.claim.milestone.name, attempt=spec.claim.attempt),
        watch=_budget_watch(spec),
    )


def _run_judged(spec: GateSpec, box: SpecBox, stopped: threading.Event) -> GateResult:
    """A doer's attempt: its judge made here (gates/judge.py: the checkout of
    its committed result, its set-up run or reused, the import rule), its
    commands run there, the judge released; or the attempt's failure."""
    assert spec.judge is not None
    made = make_judge(spec.judge, spec.commands, spec.env, Path(spec.log_path), stopped)
    if isinstance(made, GateResult):
        spec.files.write_result(made)
        return made
    judged, extra = made
    try:
        return _run(spec, box, stopped, judged.path, {**spec.env, **extra})
    finally:
        judged.release()


def _lease_lost(spec: GateSpec) -> GateResult:
    """The verdict of an attempt whose lease another driver took over
    before it started (this drive stalled past the lease's expiry after
    its claim): not started, so the attempt runs once, under the driver
    that took it over and recorded it. Not written to the attempt's files,
    which are that driver's record now."""
    now = datetime.now(UTC)
    why = f"interrupted: not started, its lease passed to another driver before its {spec.kind.value} started"
    return GateResult(outcome=Outcome.INTERRUPTED, reason=why, log_path=spec.log_path, started_at=now, finished_at=now)


def task_state(claim: Claim, kind: TaskKind, result: GateResult) -> State[Any]:
    """The gate task run's final state, named for what it means to the
    milestone (the UI shows the name): a failure that spends the last of the
    budget reads ``Stuck``, an earlier one ``Needs fix``; an interrupted
    attempt is ``Interrupted`` (cancelled), not a failure of the work."""
    m = claim.milestone
    what = "re-proof" if claim.reproof and kind is TaskKind.GATE else kind.value
    what = f"{what} of {m.name!r} (attempt {claim.attempt}): {result.reason}"
    if result.outcome is Outcome.CACHED:
        return Completed(name="Cached", message=what)
    if result.passed:
        return Completed(message=what)
    if result.outcome is Outcome.INTERRUPTED:
        return Cancelled(name="Interrupted", message=what)
    if kind is TaskKind.DO:
        return Failed(name="Do failed", message=what)
    if kind is not TaskKind.GATE:
        return Failed(name="Fix failed", message=what)
    last = m.attempts + 1 >= m.max_attempts
    name = "Stuck" if last else ("Re-proof failed" if claim.reproof else "Needs fix")
    return Failed(name=name, message=what + ("; retry budget spent" if last else ""))


def forward_output(spec: GateSpec, logger: Any, passed: bool) -> None:
    """Send a gate's output, from its log, to a task-run ``logger`` as its
    task would have (a first gate recorded before the flow run began: its
    task run is made in its final state, flows/plan_nodes.ran_node)."""
    _Watched(spec, logger, MAX_LOG_LINES).finish(passed)


class SpecBox:
    """A gate task's parameter: its :class:`GateSpec` in a box Prefect does
    not open. Before it runs a task, Prefect walks the task's parameters
    (for futures to wait on and to record as inputs), a pydantic model field
    by field and twice: for a spec with its milestone that cost milliseconds
    per gate. The spec holds no future (a gate's deps go in ``wait_for``).

    In the driver's process the box is also the drive's one in-memory path
    to and from its task: the drive's units of proof and gate monitor go in;
    the verdict (:attr:`verdict`; the file beside the log is its durable
    record) and the gate's end (:meth:`end`) come out. Pickled to a Dask
    worker, only the spec travels: the loop reads the file when Prefect has
    ended the task run."""

    __slots__ = (
        "_end_lock",
        "confirm",
        "deferring",
        "early",
        "interrupt",
        "lost",
        "monitor",
        "on_end",
        "spec",
        "units",
        "verdict",
    )

    def __init__(
        self,
        spec: GateSpec,
        units: UnitBook | None = None,
        monitor: _Monitor | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self.spec = spec
        self.units = units  # the drive's units of proof (this process only: a Dask worker gets None)
        self.monitor = monitor  # the drive's gate monitor (None: the task watches its gate itself)
        self.on_end = on_end  # the loop's ear, told of the gate's end once (see end)
        self._end_lock = threading.Lock()
        self.verdict: GateResult | None = None
        # Run by call_inline: an interrupt stops the gate and is raised again once its task run has ended.
        self.deferring = False
        self.interrupt: BaseException | None = None
        self.early: EarlyGate | None = None  # the gate's command, started before the flow run (flows/early.py)
        # Whether the claim's lease is still the drive's, asked right before the gate starts (None: not asked).
        self.confirm: Callable[[], bool] | None = None
        self.lost = False  # it was not: another driver took the attempt over, nothing started

    def __reduce__(self) -> tuple[type[SpecBox], tuple[GateSpec]]:
        return (SpecBox, (self.spec,))

    def keep(self, result: GateResult) -> GateResult:
        self.verdict = result
        return result

    def end(self) -> None:
        """Tell the loop that the gate has ended, once, whoever tells first:
        the task in this process as soon as its verdict is kept (the loop
        goes on while Prefect ends the task run), or its end as Prefect saw
        it (a task on a Dask worker, a task that died without a verdict, a
        task the drive never ran). Every later call does nothing."""
        with self._end_lock:
            told, self.on_end = self.on_end, None
        if told is not None:
            told()

    def defer(self, stopped: threading.Event) -> Callable[[BaseException], None]:
        def take(e: BaseException) -> None:
            self.interrupt = e
            stopped.set()

        return take


def call_inline(kind: TaskKind, box: SpecBox, wait_for: Sequence[Any]) -> State[Any]:
    """Run a gate (or fix) task in this thread, as a task called in its flow:
    its final state. A drive of one gate at a time on threads does so: handed
    to a pool's thread, each gate cost two hand-overs between threads and the
    loop's writes ran beside Prefect's end of the task run, all under one
    interpreter lock (docs/benchmarks.md). The task run is the same: named,
    with its deps' runs as ``wait_for``.

    An interrupt (Ctrl-C, SIGTERM) while its command runs stops the gate as
    the drive's stop file does in a pool's thread (the attempt interrupted,
    its verdict written, its task run ``Interrupted``) and is raised again
    here once the task run has ended."""
    box.deferring, box.interrupt = True, None
    try:
        state: State[Any] = GATE_TASKS[kind](box, wait_for=wait_for, return_state=True)
    finally:
        box.deferring = False
    interrupt, box.interrupt = box.interrupt, None
    if interrupt is not None:
        raise interrupt
    return state


def run_boxed_spec(box: SpecBox) -> State[Any]:
    """The body of :data:`gate_task` (module level, for Dask's pickle)."""
    state = run_gate_spec(box.spec, box=box)
    box.end()
    return state


gate_task = task(name="gate", cache_policy=NO_CACHE, persist_result=False, log_prints=False)(run_boxed_spec)


def task_run_name(parameters: dict[str, Any]) -> str:
    """A gate task run's name: its milestone's (a fix hook's ``fix NAME``, a doer's ``do NAME``)."""
    spec: GateSpec = parameters["box"].spec
    name = spec.claim.milestone.name
    return name if spec.kind is TaskKind.GATE else f"{spec.kind.value} {name}"


# Configured once: ``with_options`` builds a new task (it reads the function's
# source), which cost as much as a task run's own bookkeeping per milestone.
# (Prefect's type for a callable name wants a classmethod on it; it calls any callable with ``parameters``.)
GATE_TASKS = {
    kind: gate_task.with_options(name=kind.value, task_run_name=task_run_name)  # type: ignore[arg-type]
    for kind in TaskKind
}
