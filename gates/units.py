"""Units of proof: a gate command run once per file (``each:``), each run a
unit whose result is kept under the digest of its command and its inputs.

A unit's **digest** covers what it runs (the command with ``{file}``
replaced, ``cwd``, ``env``, the effective timeout) and the content of its
inputs: for a ``.py`` file, what ``module:FILE`` stands for (the file, what
it imports at run time and, for a test file, its ``conftest.py`` files and
pytest's configuration; see :mod:`.imports` and :mod:`.runner_config`); for
any other file, the file itself; and the environment its command starts
(:func:`unit_env_inputs`: the ``env:`` entry of its interpreter, see
:mod:`.pyenv`), and where its Python looks first for code (:func:`import_tag`:
the ``PYTHONPATH`` it inherits, the import rule's outside the workspace, each
folder relative to the unit's root when inside it), so that a pass that
imported one checkout's code never stands for a run importing another's. It
does not depend on
which milestone's gate runs it: every gate that includes the same unit in
the same state shares one result.

A :class:`UnitBook` is where a gate finds a unit's result before running it:
a pass kept in the store (``lookup``, given by the service layer), or a run
of this book's (one drive, one ``done``, one ``verify``): a unit another
gate of the same book is running is waited for, not run twice, and a unit
that failed in this book fails again without running (the same state fails
the same way). A unit whose inputs cannot be read has no digest: it always
runs and is never shared.

**Ahead.** With two or more workers, a drive gives its book the units of
the milestones it has yet to run (:meth:`UnitBook.ahead`): while a worker
is idle and no gate's unit waits for one, the book runs the next of them
ahead of its gate. Units that can share one process (the drive's
``together`` says which: pytest on ``.py`` files with the same step and
timeout) run as one batch of up to :data:`AHEAD_BATCH`, split over the
workers idle at that moment (the drive weighs each by its file's size:
:func:`split`), each part one run (one pytest session): a first drive pays
pytest's start-up, coverage's and the package's import a few times, not
once per milestone. A pass is kept for the first gate that
asks for that unit in the same state, which takes it as its own run (its
output goes into that attempt's log; later gates find it cached from that
attempt). A run ahead that fails or is interrupted is dropped: the gate
runs that unit itself, after its dependencies (a dependency may prepare
what the unit needs). Nothing run ahead is kept in the store unless a
gate takes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from milepost.gates.inputs import Snapshot, spec_digest
from milepost.gates.outcome import CachedFrom, CommandResult, Outcome
from milepost.gates.unit_locks import UnitLocks
from milepost.graph.models import GateCommand

__all__ = [
    "AHEAD_BATCH",
    "Adopted",
    "AheadJob",
    "AheadRun",
    "Together",
    "UnitBook",
    "Weight",
    "import_tag",
    "split",
    "unit_command",
    "unit_digest",
    "unit_env_inputs",
]

FORMAT = "milepost-unit-1"

AHEAD_BATCH = 32  # units run ahead in one run at most: a gate waiting on one of them waits for the whole run


def unit_command(cmd: GateCommand, path: str) -> GateCommand:
    """The one command a unit runs: ``{file}`` replaced by ``path`` (quoted)."""
    return GateCommand(name=cmd.name, run=cmd.unit_run(path), cwd=cmd.cwd, env=cmd.env, timeout=cmd.timeout)


def unit_inputs(path: str) -> list[str]:
    """A unit's input entries: a Python file with what it imports, any other file alone."""
    if path.endswith(".py"):
        return [f"module:{path}"]
    return [path if "/" in path else f"./{path}"]


def unit_env_inputs(snap: Snapshot, cmd: GateCommand, env: Mapping[str, str] | None = None) -> list[str]:
    """The environment a unit runs in, as input entries: the ``env:`` entries of
    the interpreters its command starts (see :func:`milepost.gates.pyenv.gate_entries`),
    found with ``PATH`` as the gate sees it (once per snapshot); none when it starts no Python."""
    return snap.step_entries(cmd, {**(os.environ if env is None else env), **cmd.env})


def import_tag(root: Path, cmd: GateCommand, env: Mapping[str, str] | None = None) -> str:
    """Where a unit's Python looks first for code, as a part of its key: the
    ``PYTHONPATH`` it runs with (``env``, the gate's, then the step's
    ``env:``), each folder relative to ``root`` when inside it (a relative one
    is taken from the command's folder), others as they are; milepost's own
    (``.milepost/``: coverage's plugin) left out; '' when none. A gate outside
    the workspace gets its checkout's source roots there (the import rule,
    :func:`milepost.gates.judge.import_rule`): ``src`` in every such checkout,
    nothing in a workspace that imports its code through an editable install,
    so a pass run with one never stands for a run with the other."""
    value = {**(os.environ if env is None else env), **cmd.env}.get("PYTHONPATH", "")
    if not value:
        return ""
    top = os.path.realpath(root)
    base = os.path.join(top, cmd.cwd) if cmd.cwd else top
    out: list[str] = []
    for entry in value.split(os.pathsep):
        if not entry:
            continue
        where = os.path.realpath(os.path.join(base, entry))
        rel = os.path.relpath(where, top)
        if rel == ".." or rel.startswith("../"):
            out.append(where)
        elif rel.split("/")[0] != ".milepost":
            out.append(rel)
    return os.pathsep.join(out)


def unit_digest(
    snap: Snapshot, cmd: GateCommand, path: str, default_timeout: float | None, env: Mapping[str, str] | None = None
) -> str | None:
    """The unit's digest now, or None when its inputs cannot all be read (or its file is missing).
    ``env``: the gate's environment (default this process's), where its interpreter is found."""
    seen = {**(os.environ if env is None else env), **cmd.env}
    inputs = unit_inputs(path) + unit_env_inputs(snap, cmd, env)
    spec = spec_digest([unit_command(cmd, path)], default_timeout)
    tag = import_tag(snap.root, cmd, env)
    fp = snap.fingerprint(inputs, f"{spec}\nimports:{tag}" if tag else spec, seen)
    if fp.digest is None or path not in fp.files:
        return None
    return hashlib.sha256(f"{FORMAT}\n{fp.digest}".encode()).hexdigest()


@dataclass
class _Slot:
    done: threading.Event = field(default_factory=threading.Event)
    result: CommandResult | None = None
    origin: CachedFrom | None = None
    ahead: bool = False  # a pass run ahead, not yet taken by a gate
    ahead_log: Path | None = None  # its output
    claimed: str | None = None  # the digest it was run ahead under, when its record's differs (a second key)


@dataclass(frozen=True)
class AheadJob:
    """A unit a gate of the drive will run: its step, its file, for which milestone."""

    cmd: GateCommand
    path: str
    milestone: str
    timeout: float | None  # the milestone's (the unit's digest counts it)


@dataclass(frozen=True)
class Adopted:
    """A unit's pass run ahead, taken by the gate that asked first: its result and output."""

    result: CommandResult
    log: Path | None


# How a drive runs units ahead, in one run: (jobs, their digests, stop) -> each one's result (None: the run said
# nothing of it) and its log file.
AheadRun = Callable[
    [Sequence[AheadJob], Sequence[str], threading.Event], Sequence[tuple[CommandResult | None, Path | None]]
]
# Which units run ahead may share one run: units with the same key do; None: it runs alone.
Together = Callable[[AheadJob], Hashable | None]
# How long a unit run ahead is expected to take, relative to the others (its test file's size, say): a batch is
# split over the idle workers so that each part weighs about the same.
Weight = Callable[[AheadJob], float]


def split(batch: list[tuple[AheadJob, str]], parts: int, weight: Weight | None) -> list[list[tuple[AheadJob, str]]]:
    """``batch`` in at most ``parts`` runs: the heaviest unit first into the lightest part (each part keeps the
    batch's order), or taken in turn without ``weight``. A no-op edit in click's ``termui.confirm`` ran
    test_termui.py (70 KB) with test_echo.py in one session and the two small files in the other: the drive
    waited on the first, 1.1 s of pytest against 0.6 s (docs/benchmarks.md)."""
    count = min(parts, len(batch))
    if weight is None or count < 2:
        return [batch[k::count] for k in range(count)]
    heavy = sorted(range(len(batch)), key=lambda i: -weight(batch[i][0]))  # (stable: the batch's order breaks ties)
    loads = [0.0] * count
    members: list[list[int]] = [[] for _ in range(count)]
    for i in heavy:
        k = loads.index(min(loads))
        loads[k] += weight(batch[i][0])
        members[k].append(i)
    return [[batch[i] for i in sorted(m)] for m in members if m]


class UnitBook:
    """The units of one drive (or ``done``, or ``verify``): their results, and
    the passes kept in the store through ``lookup`` (digest -> where it passed)."""

    def __init__(self, lookup: Callable[[str], CachedFrom | None] | None = None, workers: int = 1) -> None:
        self._lookup = lookup
        self.workers = 1
        self.slots = threading.BoundedSemaphore(1)
        self.set_workers(workers)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # told when a worker frees or a unit starts waiting
        self._slots: dict[str, _Slot] = {}
        self._busy = 0  # units running in a worker (ahead or not)
        self._queued = 0  # gates' units waiting for a worker
        self.ran = 0  # units run by this book's gates
        self.reused = 0  # units answered without running
        self.ran_ahead = 0  # units run ahead of their gate (taken by one or not)
        self._started = threading.Event()  # the units run ahead started their first run (or had none)
        self._started.set()  # (none run ahead yet)

    def set_workers(self, n: int) -> None:
        """Up to ``n`` units run at once, across every gate of this book (the drive's ``--max-parallel``).
        The same count again changes nothing: units running (ahead, or a first gate's) keep their workers."""
        if max(1, n) == self.workers:
            return
        self.workers = max(1, n)
        self.slots = threading.BoundedSemaphore(self.workers)

    @contextlib.contextmanager
    def worker(self) -> Iterator[None]:
        """Hold one of the book's workers while a gate's unit runs."""
        sem = self.slots  # (set_workers may put another in its place meanwhile)
        with self._idle:
            self._queued += 1
        try:
            sem.acquire()
        finally:
            with self._idle:
                self._queued -= 1
        self._took()
        try:
            yield
        finally:
            self._freed(sem)

    def _took(self) -> None:
        with self._idle:
            self._busy += 1

    def _freed(self, sem: threading.BoundedSemaphore) -> None:
        sem.release()
        with self._idle:
            self._busy -= 1
            self._idle.notify_all()

    shared: UnitLocks | None = None  # the workspace's unit locks: units shared with other drivers (unit_locks.py)

    def begin(self, digest: str, *, wait: bool = True) -> tuple[Outcome, CachedFrom] | Adopted | bool | None:
        """How the unit went before (passed in the store, or passed or failed in
        this book), waiting while another gate of this book runs it; a pass
        run ahead is the asker's own (:class:`Adopted`: it must call
        :meth:`end`); None: the caller runs it and must call :meth:`end`."""
        while True:
            with self._lock:
                slot = self._slots.get(digest)
                if slot is None:
                    self._slots[digest] = _Slot()
                    break
            slot.done.wait()
            with self._lock:
                if slot.ahead and slot.result is not None:
                    # Run ahead and not yet taken: this gate takes it; others wait for its end().
                    slot.ahead = False
                    slot.done.clear()
                    return Adopted(slot.result, slot.ahead_log)
            if slot.result is not None and slot.origin is not None:
                with self._lock:
                    self.reused += 1
                return slot.result.outcome, slot.origin
            # Its run was interrupted (or failed ahead): take it over (the loop claims the free slot).
        try:
            source = self._lookup(digest) if self._lookup is not None else None
        except Exception:  # the store cannot say (a lost connection): the unit runs, that is all
            source = None
        if source is None and self.shared is not None:
            across = self._across(self.shared, digest, wait)
            if across is False:  # another driver runs it now, and the caller does not wait
                with self._lock:
                    slot = self._slots.pop(digest)
                slot.done.set()
                return False
            source = across
        if source is not None:
            with self._lock:  # nothing ran: the store's answer is this book's for the next asker too
                slot = self._slots[digest]
                slot.result, slot.origin = _passed(), source
                self.reused += 1
            slot.done.set()
            return Outcome.PASSED, source
        return None

    def begin_now(self, digest: str) -> tuple[Outcome, CachedFrom] | Adopted | bool | None:
        """As :meth:`begin`, but False at once when another gate of this book runs the unit now (a gate that
        holds units for one pytest session must not wait for another's while holding them)."""
        with self._lock:
            slot = self._slots.get(digest)
            if slot is not None and not slot.done.is_set():
                return False
        return self.begin(digest, wait=False)

    def _across(self, shared: UnitLocks, digest: str, wait: bool) -> CachedFrom | Literal[False] | None:
        """Another driver's pass of the unit; None once its lock is held here; False: another driver runs it
        now (with ``wait``: waited for, then its pass, or the lock)."""
        found = shared.passed(digest)
        if found is not None:
            return found
        if shared.take(digest, wait=False):
            return None
        if not wait:
            return False
        shared.take(digest, wait=True)
        found = shared.passed(digest)
        if found is None:
            with contextlib.suppress(Exception):
                found = self._lookup(digest) if self._lookup is not None else None
        if found is not None:
            shared.release(digest)
        return found

    def end(self, digest: str, result: CommandResult | None, origin: CachedFrom | None) -> None:
        """The unit begun here ended: ``result`` (None when interrupted: another gate may run it)."""
        with self._lock:
            slot = self._slots.get(digest)
            if slot is None:
                return
            if result is None or origin is None or result.outcome not in (Outcome.PASSED, Outcome.FAILED):
                for key in [k for k, v in self._slots.items() if v is slot]:  # (its second key too)
                    del self._slots[key]  # nothing another gate may take (interrupted, or no origin to name)
            else:
                slot.result, slot.origin = result, origin
                self.ran += 1
        if self.shared is not None:
            with self._lock:  # (run ahead under another digest, or its record's: those locks too)
                keys = {digest, slot.claimed or digest} | {k for k, v in self._slots.items() if v is slot}
            for d in keys:
                if result is not None and origin is not None and result.outcome is Outcome.PASSED:
                    self.shared.keep(d, origin)
                self.shared.release(d)
        slot.done.set()

    def hold(self, digest: str) -> None:
        """Before a unit's record with ``digest`` is written: its lock taken, so another driver that reads the
        record and asks for that digest waits for this pass instead of running the unit again. Let go by
        :meth:`also` (or, run ahead, by the gate's :meth:`end`)."""
        if self.shared is not None:
            self.shared.take(digest, wait=False)
            self.shared.recording.add(digest)

    def also(self, digest: str, result: CommandResult, origin: CachedFrom | None) -> None:
        """A pass known under a second digest too (its record's, once it ran under coverage: gates/unit_blocks.py)."""
        try:
            if origin is None or result.outcome is not Outcome.PASSED:
                return
            if self.shared is not None:
                self.shared.keep(digest, origin)
            with self._lock:
                if digest in self._slots:
                    return
                slot = self._slots[digest] = _Slot(result=result, origin=origin)
            slot.done.set()
        finally:
            self._let_go(digest)

    def close(self) -> None:
        """The book's drive (or verify) ended: every unit lock it holds let go, so another driver, or the next
        drive of this process, never waits on a pass nobody will take or a record nobody will tell."""
        if self.shared is not None:
            self.shared.release_all()

    def _let_go(self, digest: str) -> None:
        """The lock :meth:`hold` took, let go unless a gate of this book runs ``digest`` now (its end does)."""
        with self._lock:
            slot = self._slots.get(digest)
        if self.shared is not None and (slot is None or slot.done.is_set()):
            self.shared.release(digest)

    # -- ahead of the gates ---------------------------------------------------------

    @contextlib.contextmanager
    def ahead(
        self,
        jobs: Sequence[AheadJob],
        digest: Callable[[AheadJob], str | None],
        run: AheadRun,
        together: Together | None = None,
        weight: Weight | None = None,
    ) -> Iterator[None]:
        """While the block runs, run ``jobs`` in order whenever a worker is idle
        (see the module's doc; a batch split by ``weight``, see :func:`split`); at its end, stop (units
        running ahead are stopped and dropped). :meth:`wait_started` waits for the first run."""
        started = self._started = threading.Event()
        if self.workers < 2 or not jobs:
            started.set()
            yield
            return
        stop = threading.Event()

        def runs() -> None:
            try:
                self._ahead(list(jobs), digest, run, together or (lambda job: None), weight, stop, started)
            finally:
                started.set()  # (however the thread ends: nobody waits for a first run that never comes)

        thread = threading.Thread(target=runs, name="milepost-units-ahead", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            with self._idle:
                self._idle.notify_all()
            thread.join(timeout=5)

    def _ahead(
        self,
        jobs: list[AheadJob],
        digest: Callable[[AheadJob], str | None],
        run: AheadRun,
        together: Together,
        weight: Weight | None,
        stop: threading.Event,
        started: threading.Event,
    ) -> None:
        while jobs:
            with self._idle:  # a worker idle and no gate's unit waiting for one
                while not stop.is_set() and (self._queued or self._busy >= self.workers):
                    self._idle.wait(0.5)
                idle = self.workers - self._busy
            if stop.is_set():
                return
            batch = self._batch(jobs, digest, together)
            parts = split(batch, idle, weight)
            runs = []
            for n, part in enumerate(parts):  # each run's worker taken here, before it is said to have started
                sem = self.slots
                sem.acquire()
                if stop.is_set():  # (the drive ended meanwhile: the units claimed for the runs not started, dropped)
                    sem.release()
                    for _, d in [unit for rest in parts[n:] for unit in rest]:
                        self._ran_ahead(d, None, None)
                    break
                self._took()
                runs.append(threading.Thread(target=self._run_ahead, args=(part, run, stop, sem), daemon=True))
                runs[-1].start()
            started.set()  # (the first runs hold their workers, or none had to run)
            for t in runs:
                t.join()

    def wait_started(self, timeout: float) -> bool:
        """Wait until the units run ahead (:meth:`ahead`) started their first
        run, or found none to run: whether they did within ``timeout``."""
        return self._started.wait(timeout)

    def _batch(
        self, jobs: list[AheadJob], digest: Callable[[AheadJob], str | None], together: Together
    ) -> list[tuple[AheadJob, str]]:
        """The next units to run ahead, claimed (taken off ``jobs``): the first free one, and with it
        the free ones that may share its run, up to :data:`AHEAD_BATCH`."""
        batch: list[tuple[AheadJob, str]] = []
        key: Hashable | None = None
        rest: list[AheadJob] = []
        for job in jobs:
            if batch and (key is None or len(batch) >= AHEAD_BATCH or together(job) != key):
                rest.append(job)
                continue
            try:
                d = digest(job)
                if d is None or not self._claim_ahead(d):
                    continue
            except Exception:  # its inputs could not be read: its gate will say so
                continue
            if not batch:
                key = together(job)
            batch.append((job, d))
        jobs[:] = rest
        return batch

    def _claim_ahead(self, digest: str) -> bool:
        """Whether ``digest`` is free to run ahead (nobody ran or runs it, the store has no pass). Not one whose
        record a gate of this book is writing (:meth:`hold`): its pass is told to the book a moment later. A
        scan that began as a gate's session ended (its worker free) read the new records and ran a unit again
        (click's first drive, test_formatting.py twice)."""
        with self._lock:
            if digest in self._slots or (self.shared is not None and digest in self.shared.recording):
                return False
            self._slots[digest] = _Slot()
        try:
            kept = self._lookup(digest) if self._lookup is not None else None
        except Exception:
            kept = None
        if kept is not None:
            with self._lock:
                slot = self._slots[digest]
                slot.result, slot.origin = _passed(), kept
            slot.done.set()
            return False
        if self.shared is not None and (self.shared.passed(digest) or not self.shared.take(digest, wait=False)):
            with self._lock:  # another driver ran it or runs it: its gate here will ask again
                slot = self._slots.pop(digest)
            slot.done.set()
            return False
        return True

    def _run_ahead(
        self, part: list[tuple[AheadJob, str]], run: AheadRun, stop: threading.Event, sem: threading.BoundedSemaphore
    ) -> None:
        """One run of ``part`` in the worker taken for it (``sem``'s); each pass is kept for its gate, the rest
        dropped."""
        found: Sequence[tuple[CommandResult | None, Path | None]] = []
        try:
            found = run([job for job, _ in part], [d for _, d in part], stop)
        except Exception:
            found = []
        finally:
            for n, (_, d) in enumerate(part):  # (told before the worker is free: see _ran_ahead)
                result, log = found[n] if n < len(found) else (None, None)
                self._ran_ahead(d, result, log)
            self._freed(sem)

    def _ran_ahead(self, digest: str, result: CommandResult | None, log: Path | None) -> None:
        """A unit run ahead ended: its pass kept for its gate, under its record's digest too (a gate, and
        this book's next batch, ask under that one once the record is written), or dropped."""
        with self._lock:
            slot = self._slots[digest]
            self.ran_ahead += 1
            if result is not None and result.outcome is Outcome.PASSED:
                slot.result, slot.ahead, slot.ahead_log = result, True, log
                if result.unit is not None and result.unit != digest and result.unit not in self._slots:
                    # It ran under coverage: its gate asks under its record's digest now (gates/unit_blocks.py);
                    # the record's lock (hold) is let go with the other when the gate takes the pass (end).
                    slot.claimed = digest
                    self._slots[result.unit] = slot
                    known = None
                else:
                    known = result.unit if result.unit not in (None, digest) else None
            else:  # dropped: the gate runs it itself
                del self._slots[digest]
                known = None
        if self.shared is not None and (result is None or result.outcome is not Outcome.PASSED):
            self.shared.release(digest)  # (a pass keeps it until its gate takes it: end())
        slot.done.set()
        if known is not None:  # its record's digest was this book's already: that slot's lock, not this one's
            self._let_go(known)


def _passed() -> CommandResult:
    return CommandResult(name="unit", run="", outcome=Outcome.PASSED, reason="exit 0")
