"""Running the units of one ``each`` step of a gate attempt (see
:mod:`.units`): each unit found in the attempt's book (a pass of the store,
or a run of another gate of the same drive) or run here, in order."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from functools import partial
from pathlib import Path
from typing import TypeVar

from milepost.gates import log_room
from milepost.gates.attempt import AttemptFiles
from milepost.gates.inputs import Snapshot
from milepost.gates.log_room import command_header
from milepost.gates.outcome import CachedFrom, CommandResult, Outcome
from milepost.gates.unit_blocks import UnitState, coverable, unit_state, watched
from milepost.gates.unit_session import Session
from milepost.gates.units import Adopted, UnitBook, unit_command
from milepost.graph.models import GateCommand

__all__ = ["CACHED_UNIT", "UnitRuns"]

# How the log of an attempt says a unit was answered by a pass (after the unit's header, on a line of its own that
# begins "milepost: "): the drive forwards no line of such a unit to Prefect (flows/gate_task.py).
CACHED_UNIT = "cached: passed as "

_T = TypeVar("_T")


class UnitRuns:
    """The units of one ``each`` command of an attempt: found in the book, or run."""

    def __init__(
        self,
        root: Path,
        book: UnitBook | None,
        origin: CachedFrom | None,
        default_timeout: float | None,
        *,
        reuse: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self.book = book
        self.origin = origin
        self.default_timeout = default_timeout
        # False (cache: false, --no-cache, --fresh): every unit runs; none is looked up or offered to others.
        self.reuse = reuse
        self.env = env  # the gate's environment (PATH finds the unit's interpreter; a pytest unit's gets coverage's)
        self.why: dict[str, str] = {}  # path -> why the unit runs (what changed in the code it ran)
        self.env_tag = ""  # the environment the step's units run in (gates/unit_blocks.py: env_tag)
        self.halted = False  # a session of this step's units was interrupted
        self.snap: Snapshot | None = None  # the gate's, when nothing ran since it was taken (gates/command.py)

    def _digest(self, snap: Snapshot, cmd: GateCommand, path: str, fd: int) -> str | None:
        try:
            state = unit_state(snap, cmd, path, self.default_timeout, self.env)
        except Exception as e:  # the unit still runs: it is only not shared
            log_room.note(fd, f"could not fingerprint unit {path}: {type(e).__name__}: {e}")
            state = UnitState(None)
        if state.why is not None:
            self.why[path] = state.why
        self.env_tag = state.env_tag  # (the command's, the same for each of its files)
        return state.digest

    def run(
        self,
        cmd: GateCommand,
        run_one: Callable[..., CommandResult],
        first: int,
        fd: int,
        stop: threading.Event | None,
        log_path: Path,
        on_interrupt: Callable[[BaseException], None] | None = None,
    ) -> list[CommandResult]:
        """The step's units; ``run_one(index=, cmd=)`` runs one (``first``: the
        index of the first). With a book of several workers (``--max-parallel``),
        up to that many units run at once, each into a log of its own that is
        added to the attempt's log when it ends."""
        snap = self.snap if self.snap is not None and self.snap.root == self.root else Snapshot(self.root)
        digests = [self._digest(snap, cmd, path, fd) for path in cmd.each]
        snap.save()
        workers = self.book.workers if self.book is not None else 1
        if len(cmd.each) > 1 and all(coverable(cmd, p) for p in cmd.each):
            return self._in_sessions(cmd, run_one, first, fd, stop, log_path, digests, on_interrupt)
        if workers > 1 and len(cmd.each) > 1:
            return self._side_by_side(cmd, run_one, first, fd, stop, log_path, digests, on_interrupt)
        out: list[CommandResult] = []
        book = self.book

        def run(c: GateCommand, i: int, **kw: object) -> CommandResult:
            if book is None:
                return run_one(index=i, cmd=c, **kw)
            with book.worker():  # one of the drive's workers, as every unit
                return run_one(index=i, cmd=c, **kw)

        for n, path in enumerate(cmd.each):
            halted = (out and out[-1].outcome is Outcome.INTERRUPTED) or (stop is not None and stop.is_set())
            out.append(self._one(cmd, n, path, digests[n], fd, run, first, halted=bool(halted), stop=stop))
        return out

    def _one(
        self,
        cmd: GateCommand,
        n: int,
        path: str,
        digest: str | None,
        fd: int,
        run: Callable[..., CommandResult],
        first: int,
        *,
        halted: bool,
        write: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
    ) -> CommandResult:
        """One unit: skipped when halted (or ``stop`` is set once the book said to run it: an interrupt while
        it waited for another run of it, a run ahead stopped by that interrupt say), answered by the book, or
        run."""
        one = unit_command(cmd, path)
        if halted:
            return _skipped(one, path)
        shared = self.book is not None and digest is not None and self.reuse
        before = self.book.begin(digest) if shared and self.book is not None and digest is not None else None
        if isinstance(before, tuple):
            return _reused(one, path, digest, *before, write or (lambda text: log_room.write(fd, text)))
        if before is None and stop is not None and stop.is_set():
            if shared and self.book is not None and digest is not None:
                self.book.end(digest, None, None)
            return _skipped(one, path)
        try:
            if isinstance(before, Adopted):
                r = _adopted(before, write or (lambda text: log_room.write(fd, text)))
            else:
                r = self._watched(cmd, path, one, first + n, run, write or (lambda text: log_room.write(fd, text)))
            r = r.model_copy(update={"file": path, "unit": r.unit or digest})
        except BaseException:
            if shared and self.book is not None and digest is not None:
                self.book.end(digest, None, None)
            raise
        if shared and self.book is not None and digest is not None:
            self.book.end(digest, r, self.origin)
        self._also(digest, r)
        return r

    def _also(self, digest: str | None, r: CommandResult) -> None:
        """A pass known under its record's digest too; told whenever a record was written (its lock, taken by
        :meth:`_hold`, is let go there), whether or not the unit had a digest before it ran."""
        if self.reuse and self.book is not None and r.unit is not None and r.unit != digest:
            self.book.also(r.unit, r, self.origin)

    def _watched(
        self,
        cmd: GateCommand,
        path: str,
        one: GateCommand,
        index: int,
        run: Callable[..., CommandResult],
        write: Callable[[str], None],
    ) -> CommandResult:
        """Run one unit: under coverage when it runs pytest (its record kept, see :mod:`.unit_blocks`)."""
        why = self.why.get(path)
        if why is not None:
            write(f"milepost: {path} runs: {why}\n")
        watch = watched(self.root, cmd, path, self.default_timeout, self.env_tag, self._hold())
        if watch is None:
            r = run(one, index)
        else:
            r = watch.finish(run(one, index, env=watch.env(self.env if self.env is not None else os.environ)))
        return r.model_copy(update={"ran_because": why}) if why is not None else r

    def _side_by_side(
        self,
        cmd: GateCommand,
        run_one: Callable[..., CommandResult],
        first: int,
        fd: int,
        stop: threading.Event | None,
        log_path: Path,
        digests: list[str | None],
        on_interrupt: Callable[[BaseException], None] | None,
    ) -> list[CommandResult]:
        assert self.book is not None
        book = self.book
        halt = threading.Event()  # set by an interrupt, or when the attempt's stop is
        lock = threading.Lock()  # the attempt's log: one unit's output at a time

        def write(text: str) -> None:
            with lock:
                log_room.write(fd, text)

        def unit(n: int, path: str) -> CommandResult:
            own = AttemptFiles(log_path).unit(first + n)

            def run(c: GateCommand, i: int, **kw: object) -> CommandResult:
                ufd = os.open(own.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    with book.worker():  # within --max-parallel, whichever gate runs it
                        return run_one(index=i, cmd=c, log_fd=ufd, log_path=own.log, stop=halt, on_interrupt=None, **kw)
                finally:
                    os.close(ufd)
                    _append(own, fd, lock)

            return self._one(cmd, n, path, digests[n], fd, run, first, halted=halt.is_set(), write=write, stop=halt)

        jobs = [partial(unit, n, path) for n, path in enumerate(cmd.each)]
        return _all_of(jobs, book.workers, "milepost-unit", stop, halt, on_interrupt)

    def _in_sessions(
        self,
        cmd: GateCommand,
        run_one: Callable[..., CommandResult],
        first: int,
        fd: int,
        stop: threading.Event | None,
        log_path: Path,
        digests: list[str | None],
        on_interrupt: Callable[[BaseException], None] | None,
    ) -> list[CommandResult]:
        """The step's pytest units: those no pass answers run in one pytest session per worker (see
        :mod:`.unit_session`); a unit another gate runs now is waited for afterwards, as usual."""
        book = self.book
        lock = threading.Lock()

        def write(text: str) -> None:
            with lock:
                log_room.write(fd, text)

        out: dict[int, CommandResult] = {}
        mine: list[int] = []  # begun here: this gate runs them
        later: list[int] = []  # another gate runs them now
        for n, path in enumerate(cmd.each):
            d = digests[n]
            before = book.begin_now(d) if self.reuse and book is not None and d is not None else None
            if before is False:
                later.append(n)
            elif isinstance(before, tuple):
                out[n] = _reused(unit_command(cmd, path), path, d, *before, write)
            elif isinstance(before, Adopted):
                out[n] = self._ended(n, path, d, _adopted(before, write))
            else:
                mine.append(n)
        ended: dict[int, CommandResult] = {}  # told to the book as their session ended

        def told(found: dict[int, CommandResult]) -> None:
            ended.update({n: self._ended(n, cmd.each[n], digests[n], r) for n, r in found.items()})

        try:
            ran = self._sessions(cmd, mine, run_one, first, fd, stop, log_path, on_interrupt, write, told)
            self._alone(cmd, [n for n in mine if n not in ran], ran, run_one, first, stop, write)
        except BaseException:
            for n in mine:
                if n not in ended and self.reuse and book is not None and digests[n] is not None:
                    book.end(digests[n], None, None)  # type: ignore[arg-type]
            raise
        for n in mine:
            out[n] = ended[n] if n in ended else self._ended(n, cmd.each[n], digests[n], ran[n])
        for n in later:
            out[n] = self._one(
                cmd, n, cmd.each[n], digests[n], fd, self._runner(run_one), first, halted=self.halted, stop=stop
            )
        return [out[n] for n in range(len(cmd.each))]

    def _alone(
        self,
        cmd: GateCommand,
        units: list[int],
        ran: dict[int, CommandResult],
        run_one: Callable[..., CommandResult],
        first: int,
        stop: threading.Event | None,
        write: Callable[[str], None],
    ) -> None:
        """The units a session said nothing of, run one by one (skipped once the attempt is interrupted)."""
        for n in units:
            one = unit_command(cmd, cmd.each[n])
            if self.halted or (stop is not None and stop.is_set()):
                ran[n] = _skipped(one, cmd.each[n])
            else:
                ran[n] = self._watched(cmd, cmd.each[n], one, first + n, self._runner(run_one), write)

    def _hold(self) -> Callable[[str], object] | None:
        """What a record's writer calls first (the book's lock on its digest), when results are shared."""
        return self.book.hold if self.book is not None and self.reuse else None

    def _runner(self, run_one: Callable[..., CommandResult]) -> Callable[..., CommandResult]:
        book = self.book

        def run(c: GateCommand, i: int, **kw: object) -> CommandResult:
            if book is None:
                return run_one(index=i, cmd=c, **kw)
            with book.worker():
                return run_one(index=i, cmd=c, **kw)

        return run

    def _ended(self, n: int, path: str, digest: str | None, r: CommandResult) -> CommandResult:
        """A unit begun here ended with ``r``: told to the book (under its record's digest too)."""
        r = r.model_copy(update={"file": path, "unit": r.unit or digest})
        if self.reuse and self.book is not None and digest is not None:  # (cache: false: nothing offered)
            self.book.end(digest, r, self.origin)
        self._also(digest, r)
        return r

    def _sessions(
        self,
        cmd: GateCommand,
        units: list[int],
        run_one: Callable[..., CommandResult],
        first: int,
        fd: int,
        stop: threading.Event | None,
        log_path: Path,
        on_interrupt: Callable[[BaseException], None] | None,
        write: Callable[[str], None],
        told: Callable[[dict[int, CommandResult]], None],
    ) -> dict[int, CommandResult]:
        """Run ``units`` in up to the book's workers pytest sessions; each file's result, by index. A
        session's results are ``told`` before its worker is free: an idle worker of the drive asks for
        a unit under its record's digest, which only its result names (else it ran it again, ahead)."""
        if not units:
            return {}
        workers = min(self.book.workers if self.book is not None else 1, len(units))
        groups = [units[k::workers] for k in range(workers)]
        halt = threading.Event()
        base = self.env if self.env is not None else os.environ
        lock = threading.Lock()

        def one(group: list[int]) -> dict[int, CommandResult]:
            session = Session(
                self.root, cmd, [cmd.each[n] for n in group], self.default_timeout, self.env_tag, self._hold()
            )
            for n in group:
                why = self.why.get(cmd.each[n])
                if why is not None:
                    write(f"milepost: {cmd.each[n]} runs: {why}\n")
            own = AttemptFiles(log_path).unit(first + group[0])
            with self.book.worker() if self.book is not None else contextlib.nullcontext():
                ufd = os.open(own.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    ran = run_one(
                        index=first + group[0],
                        cmd=session.command(),
                        env=session.env(base),
                        timeout=session.timeout(),
                        log_fd=ufd,
                        log_path=own.log,
                        stop=halt,
                        on_interrupt=None,
                    )
                finally:
                    os.close(ufd)
                    _append(own, fd, lock)
                found = session.results(ran)
                results = {
                    n: found[cmd.each[n]].model_copy(update={"ran_because": self.why.get(cmd.each[n])})
                    for n in group
                    if cmd.each[n] in found
                }
                told(results)
            return results

        out: dict[int, CommandResult] = {}
        for found in _all_of([partial(one, g) for g in groups], workers, "milepost-session", stop, halt, on_interrupt):
            out.update(found)
        self.halted = halt.is_set()
        return out


def _all_of(
    jobs: Sequence[Callable[[], _T]],
    workers: int,
    name: str,
    stop: threading.Event | None,
    halt: threading.Event,
    on_interrupt: Callable[[BaseException], None] | None,
) -> list[_T]:
    """``jobs`` run in up to ``workers`` threads, their results in order. ``halt`` is set when the
    attempt's ``stop`` is, or on an interrupt (every running unit's process group is then stopped):
    an interrupt goes to ``on_interrupt`` once every job ended (raised when there is none)."""
    with ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
        futures = [pool.submit(job) for job in jobs]
        try:
            pending = set(futures)
            while pending:
                _, pending = wait(pending, timeout=0.2)
                if stop is not None and stop.is_set():
                    halt.set()
        except BaseException as e:
            halt.set()
            wait(futures)
            if on_interrupt is None or isinstance(e, Exception):
                raise
            on_interrupt(e)
    return [f.result() for f in futures]


def _skipped(one: GateCommand, path: str) -> CommandResult:
    return CommandResult(
        name=one.name, run=one.run, outcome=Outcome.SKIPPED, reason="skipped: the attempt was interrupted", file=path
    )


def _append(part: AttemptFiles, fd: int, lock: threading.Lock) -> None:
    """A unit's own log into the attempt's, then gone (best effort: a full disk loses the copy, not the verdict)."""
    with lock, contextlib.suppress(OSError), open(part.log, "rb") as f:
        while chunk := f.read(1 << 20):
            os.write(fd, chunk)
    part.discard()


def _adopted(found: Adopted, write: Callable[[str], None]) -> CommandResult:
    """A unit's pass run ahead of this gate: its output into the attempt's log, its result this attempt's."""
    write(f"milepost: {found.result.run!r} ran ahead of this gate (a worker was idle); its output:\n")
    if found.log is not None:
        with contextlib.suppress(OSError), open(found.log, "rb") as f:
            write(f.read().decode("utf-8", "replace"))
        for leftover in found.log.parent.glob(f"{found.log.stem}*"):
            with contextlib.suppress(OSError):
                leftover.unlink()
    return found.result.model_copy(update={"reason": f"{found.result.reason} (ran ahead of its gate)"})


def _reused(
    cmd: GateCommand, path: str, digest: str | None, outcome: Outcome, source: CachedFrom, write: Callable[[str], None]
) -> CommandResult:
    """A unit answered without running: passed (``cached``) or failed where ``source`` ran it."""
    if outcome is Outcome.PASSED:
        reason = f"{CACHED_UNIT}{source.shown()} on the same command and inputs"
        out = Outcome.CACHED
    else:
        reason = f"failed as {source.shown()} on the same command and inputs (not run again)"
        out = Outcome.FAILED
    write(f"{command_header(cmd)}milepost: {reason}\n")
    return CommandResult(
        name=cmd.name, run=cmd.run, outcome=out, reason=reason, tail=reason, file=path, unit=digest, cached_from=source
    )
