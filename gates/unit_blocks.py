"""Units that know the code they ran: a pytest unit of proof (see
:mod:`.units`) runs under coverage.py, and what it executed decides when it
must run again.

A unit whose command runs pytest on a ``.py`` file runs with a small pytest
plugin (written to ``.milepost/cache/pytest-plugin/``, put on
``PYTHONPATH`` and loaded with ``PYTEST_ADDOPTS=-p milepost_unit_blocks``)
that measures the run with coverage.py and writes the lines it executed in
the workspace's files. A run that passed leaves a **record**
(``.milepost/cache/units/<key>.json``, the unit's last ten): the blocks it
executed, by fingerprint (:mod:`.blocks`: module-level code and each
function, method and class body, from the syntax tree), the unit's own files
by content (the test file, the ``conftest.py`` files pytest reads for it, the
root's ``pytest.ini``, ``pyproject.toml``, ``tox.ini``, ``setup.cfg``) and,
for each file it executed, the workspace modules its imports resolve to. The
record's digest is the unit's digest; its pass is kept in the store under it.

Before a unit runs, its records are checked, newest first: one whose blocks,
files and imports are all as they are now names the unit's state, so its pass
stands (a comment, or an edit of a function the unit never called, runs
nothing). When none matches, the unit's digest is that of its import-derived
inputs (:func:`.units.unit_digest`) and ``why`` says what changed since its
newest record (``src/kv/store.py: Store.get changed``). A record that cannot
be read, or whose digest does not match its own content, is ignored: the unit
runs. Where coverage cannot run (not pytest, not a ``.py`` file) or left no
record (a run that did not reach pytest), the import-derived digest stays the
unit's. The test interpreter must have coverage.py: where it does not, the
unit fails with one line naming the install.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milepost.gates.blocks import MODULE, Block, blocks_from_json, blocks_of, blocks_to_json, executed
from milepost.gates.inputs import Snapshot, StatCache, names_content, spec_digest
from milepost.gates.listing import NEVER
from milepost.gates.outcome import CommandResult, Outcome
from milepost.gates.units import import_tag, unit_command, unit_digest, unit_env_inputs
from milepost.graph.models import GateCommand

__all__ = [
    "PLUGIN",
    "Record",
    "UnitState",
    "Watch",
    "coverable",
    "read_records",
    "static_inputs",
    "unit_key",
    "unit_state",
]

FORMAT = "milepost-unit-blocks-1"
KEEP = 10  # records kept per unit: a revert to any of its last ten passing states runs nothing
CONFIG_FILES = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
PLUGIN_NAME = "milepost_unit_blocks"
_PYTEST = re.compile(r"(?<![\w.-])pytest(?![\w-])")
# A command that names its own PYTHONPATH would hide the plugin's folder from pytest (see Watch.env).
_OWN_PYTHONPATH = re.compile(r"(?<![\w])PYTHONPATH=")

# The pytest plugin, run in the test's own interpreter (any environment): it imports nothing of milepost's.
PLUGIN = '''\
"""milepost: measures this pytest run with coverage.py for its unit of proof (see milepost.gates.unit_blocks)."""
import hashlib
import json
import os
import sys
import warnings

import pytest

_OUT = os.environ.get("MILEPOST_UNIT_BLOCKS")
_ROOT = os.environ.get("MILEPOST_UNIT_ROOT")
_SESSION = os.environ.get("MILEPOST_UNIT_SESSION") == "1"  # several test files, each its own unit
_cov = None
_label = None  # the coverage context now: "run|FILE", "setup" (shared) or None (collection, shared)
_read = set()  # the files this run opened for reading (data files are inputs by content)
_units = {}  # session: test file -> {"failed": bool, "tests": n, "duration": s, "failures": [text]}
_config = []


def _audit(event, args):
    if event != "open" or _cov is None:
        return
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if isinstance(path, str) and (
        (mode is not None and not any(c in mode for c in "wax+"))
        or (mode is None and isinstance(flags, int) and not flags & (os.O_WRONLY | os.O_RDWR))
    ):
        _read.add(os.path.abspath(path))


if _OUT and _ROOT:
    try:
        import coverage
    except ImportError:
        coverage = None
    if coverage is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _cov = coverage.Coverage(data_file=None, config_file=False, source=[_ROOT],
                                     omit=["*/site-packages/*", "*/dist-packages/*", "*/.milepost/*"])
            _cov.start()
        sys.addaudithook(_audit)


def _unit(path):
    return _units.setdefault(str(path), {"failed": False, "tests": 0, "duration": 0.0, "failures": []})


def _switch(label):
    global _label
    if _cov is not None and _SESSION and label != _label:
        _label = label
        _cov.switch_context(label)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _switch("run|" + str(item.path))  # a file's tests, their fixtures and teardowns: that file's own
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    # A fixture that outlives a file (session or package scope) serves every file after it: what its set-up
    # runs counts for every file of the session. Switching only here and when the file changes keeps
    # coverage's flushes to a few per file rather than three per test (docs/benchmarks.md, bench_blocks).
    if str(getattr(fixturedef, "scope", "function")) not in ("session", "package"):
        yield
        return
    before = _label
    _switch("setup")
    yield
    _switch(before)


def pytest_runtest_logreport(report):
    if not _SESSION or not _config:
        return
    unit = _unit(os.path.join(str(_config[0].rootpath), report.nodeid.split("::")[0]))
    unit["duration"] += report.duration
    if report.when == "call" or (report.when == "setup" and not report.passed):
        unit["tests"] += 1
    if report.failed:
        unit["failed"] = True
        unit["failures"].append(f"{report.nodeid} ({report.when}):\\n{report.longreprtext[-2000:]}")


def pytest_collectreport(report):
    if not (_SESSION and _config) or report.passed or "::" in report.nodeid or not report.nodeid:
        return
    unit = _unit(os.path.join(str(_config[0].rootpath), report.nodeid))
    if report.skipped:  # a module skipped as a whole (importorskip): a file that ran, as `pytest FILE` says
        unit["tests"] += 1
    else:
        unit["failed"] = True
        unit["failures"].append(f"{report.nodeid} (collection):\\n{report.longreprtext[-2000:]}")


def pytest_configure(config):
    _config.append(config)
    if _OUT and _ROOT and _cov is None:
        raise pytest.UsageError(
            f"milepost: coverage.py is not installed in {sys.executable}, and milepost runs each pytest unit"
            f" under it to record the code it executes: install it there ({sys.executable} -m pip install"
            " coverage), or give the milestone `cache: false`"
        )


def _session_units(data, files):
    """Each test file's own lines (its tests' calls and teardowns) and the shared ones (imports, collection,
    fixtures' setup), a test file's own module code counting for itself only."""
    own = {}
    shared = {}
    for measured in files:
        for line, contexts in (data.contexts_by_lineno(measured) or {}).items():
            for c in contexts:
                if c.startswith("run|"):
                    own.setdefault(c[4:], {}).setdefault(measured, set()).add(line)
                else:
                    shared.setdefault(measured, set()).add(line)
    out = {}
    for test, unit in _units.items():
        ran = {}
        for measured, seen in files.items():
            lines = set(own.get(test, {}).get(measured, ()))
            if measured == test or measured not in _units:
                lines |= shared.get(measured, set())
            if lines:
                ran[measured] = {"sha": seen["sha"], "lines": sorted(lines)}
        out[test] = dict(unit, files=ran)
    return out


def pytest_unconfigure(config):
    global _cov
    if _cov is None:
        return
    cov, _cov = _cov, None
    if hasattr(config, "workerinput"):  # a pytest-xdist worker (its environment may be inherited: not that)
        cov.stop()
        return  # (the controller says the run's record is incomplete: the tests ran in other processes)
    workers = getattr(config.option, "numprocesses", None) or getattr(config.option, "dist", "no") != "no"
    plugins = config.pluginmanager
    if workers or (plugins.hasplugin("_cov") and getattr(config.option, "cov_source", None)):
        cov.stop()
        units = {t: dict(u, files={}) for t, u in _units.items()}  # (outcomes: the workers report them here)
        with open(_OUT, "w") as f:  # pytest-xdist workers, or pytest-cov's own tracer: what ran is not all here
            json.dump({"format": "milepost-unit-run-1", "incomplete": True, "units": units}, f)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cov.stop()
        data = cov.get_data()
    files = {}
    if os.path.exists(_OUT):
        try:
            with open(_OUT) as f:
                files = json.load(f)["files"]
        except (OSError, ValueError, KeyError, TypeError):
            files = {}
    for measured in data.measured_files():
        try:
            with open(measured, "rb") as f:
                sha = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            continue
        lines = set(data.lines(measured) or ())
        old = files.get(measured)
        if old and old.get("sha") == sha:
            lines |= set(old.get("lines", ()))
        files[measured] = {"sha": sha, "lines": sorted(lines)}
    read = {}
    for path in sorted(_read):
        if path.endswith((".py", ".pyc")) or not path.startswith(os.path.join(_ROOT, "")):
            continue
        try:
            with open(path, "rb") as f:
                read[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            continue
    units = {}
    if _SESSION:
        units = _session_units(data, files)
    tmp = f"{_OUT}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"format": "milepost-unit-run-1", "files": files, "read": read, "units": units}, f)
    os.replace(tmp, _OUT)
'''


def coverable(cmd: GateCommand, path: str) -> bool:
    """Whether the unit runs pytest on a Python file (so coverage can say what
    it executed) with the plugin's folder on its path: a command line that
    sets ``PYTHONPATH`` itself (``PYTHONPATH=src pytest ...``; a step's
    ``env:`` is joined with the plugin's folder) keeps its import-derived inputs."""
    if _OWN_PYTHONPATH.search(cmd.run) is not None:
        return False
    return path.endswith(".py") and _PYTEST.search(cmd.run) is not None


def unit_key(cmd: GateCommand, path: str, default_timeout: float | None, env_tag: str = "") -> str:
    """What names a unit whatever the state of its code: its command as run
    (with ``{file}``), its file, and its environment (``env_tag``: see
    :func:`env_tag`): records of another environment never stand in."""
    spec = spec_digest([unit_command(cmd, path)], default_timeout)
    text = f"milepost-unit-key-2\n{spec}\n{path}\n{env_tag}"
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def env_tag(snap: Snapshot, cmd: GateCommand, env: Mapping[str, str] | None = None) -> str:
    """The environment a unit's command runs in, as one digest: its
    interpreters and their installed distributions (the ``env:`` entries of
    :func:`milepost.gates.units.unit_env_inputs`); '' when it starts no
    Python, 'unknown' when they cannot be read; then, after a ``|``, where it
    imports code from first when that is not the default
    (:func:`milepost.gates.units.import_tag`)."""
    imports = import_tag(snap.root, cmd, env)
    suffix = "|" + hashlib.sha256(imports.encode("utf-8", "surrogateescape")).hexdigest()[:32] if imports else ""
    entries = unit_env_inputs(snap, cmd, env)
    if not entries:
        return suffix
    seen = {**(os.environ if env is None else env), **cmd.env}
    return (snap.fingerprint(entries, "", seen).digest or "unknown") + suffix


def static_inputs(path: str) -> list[str]:
    """A test file's own inputs, by content: itself, the ``conftest.py`` files above it, the root's configuration."""
    out = [path if "/" in path else f"./{path}"]
    folder = path.rpartition("/")[0]
    while folder:
        out.append(f"{folder}/conftest.py")
        folder = folder.rpartition("/")[0]
    return out + [f"./{name}" for name in ("conftest.py", *CONFIG_FILES)]


@dataclass(frozen=True)
class Record:
    """What one passing run of a unit executed, and the state of its own files then."""

    digest: str
    static: dict[str, str]  # file -> content digest
    blocks: dict[str, dict[str, str]]  # file -> block name -> fingerprint
    imports: dict[str, list[str]]  # executed file -> the workspace files its imports resolve to
    data: dict[str, str]  # the workspace's other files the run read -> content digest

    @staticmethod
    def digest_of(
        key: str,
        static: Mapping[str, str],
        blocks: Mapping[str, Mapping[str, str]],
        imports: Mapping[str, list[str]],
        data: Mapping[str, str],
    ) -> str:
        body = json.dumps([key, static, blocks, imports, data], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(f"{FORMAT}\n{body}".encode("utf-8", "surrogateescape")).hexdigest()

    def to_json(self) -> dict[str, object]:
        return {
            "digest": self.digest,
            "static": self.static,
            "blocks": self.blocks,
            "imports": self.imports,
            "data": self.data,
        }

    @classmethod
    def from_json(cls, key: str, data: object) -> Record | None:
        """The record, or None when it is damaged (a field missing or of the wrong type, or a digest that is
        not its content's): a damaged record is never trusted."""
        try:
            assert isinstance(data, dict)
            static = {str(k): str(v) for k, v in data["static"].items()}
            blocks = {str(f): {str(n): str(fp) for n, fp in b.items()} for f, b in data["blocks"].items()}
            imports = {str(f): [str(x) for x in v] for f, v in data["imports"].items()}
            read = {str(k): str(v) for k, v in data["data"].items()}
            digest = str(data["digest"])
        except (AssertionError, KeyError, TypeError, AttributeError, ValueError):
            return None
        if cls.digest_of(key, static, blocks, imports, read) != digest:
            return None
        return cls(digest, static, blocks, imports, read)


def records_path(root: Path, key: str) -> Path:
    return root / ".milepost" / "cache" / "units" / f"{key}.json"


def read_records(root: Path, key: str, cache: StatCache | None = None) -> tuple[list[Record], bool]:
    """The unit's records, newest first, and whether one (or the file) was damaged. With ``cache`` (the
    workspace's stat cache), what a read found is kept in the process while the file's stat is as it was
    (as the stat cache keeps digests: not for a file written within its racy window). Each gate of a drive
    looks up every one of its units: on click, a no-op drive read the same records 300 times
    (docs/benchmarks.md)."""
    path = records_path(root, key)
    try:
        st = path.stat()
        stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        kept = cache.records.get(key) if cache is not None else None
        if kept is not None and kept[0] == stamp:
            return list(kept[1]), kept[2]
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return [], False
    except (OSError, ValueError):
        return [], True
    raw = data.get("records") if isinstance(data, dict) and data.get("format") == FORMAT else None
    if not isinstance(raw, list):
        return [], True
    found = [Record.from_json(key, r) for r in raw]
    records, damaged = [r for r in found if r is not None], any(r is None for r in found)
    if cache is not None and time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) >= cache.racy_ns:
        cache.records[key] = (stamp, tuple(records), damaged)
    return records, damaged


def _write_records(root: Path, key: str, new: Record) -> None:
    """Put ``new`` first among the unit's records (best effort: a lost record costs a run)."""
    old, _ = read_records(root, key)
    keep = [new, *(r for r in old if r.digest != new.digest)][:KEEP]
    path = records_path(root, key)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"format": FORMAT, "records": [r.to_json() for r in keep]}))
        tmp.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


class _Reader:
    """The workspace's files as one snapshot sees them: their blocks and their imports, each read once."""

    def __init__(self, snap: Snapshot, path: str) -> None:
        self.snap = snap
        self.roots = snap.imports.roots_of([f"module:{path}"])
        self._blocks: dict[str, list[Block] | None] = {}

    def blocks(self, rel: str) -> list[Block] | None:
        if rel not in self._blocks:
            self._blocks[rel] = self._parse(rel)
        return self._blocks[rel]

    def _parse(self, rel: str) -> list[Block] | None:
        """The file's blocks, parsed once per content: kept in this process (the workspace's stat cache) and
        on disk (``.milepost/cache/blocks/``, one file per content: a drive reads the blocks of the files it did
        not change instead of parsing them; docs/benchmarks.md, bench_blocks)."""
        digest = self.snap.content_digest(rel)
        key = f"blocks:{digest}"
        memo = self.snap.cache.parsed
        if digest is not None and key in memo:
            return memo[key]  # type: ignore[return-value]
        kept = self.snap.root / ".milepost" / "cache" / "blocks" / f"{digest[:32]}.json" if digest else None
        found = _kept_blocks(kept)
        if found is not None:
            memo[key] = found
            return found
        try:
            source = (self.snap.root / rel).read_bytes()
        except OSError:
            return None
        found = blocks_of(source)
        if digest is not None and found is not None and names_content(digest, source):
            memo[key] = found  # (only when what was read is what the digest names)
            _keep_blocks(kept, found)
        return found

    def imports(self, rel: str, names: Iterable[str]) -> list[str]:
        """Where the imports in the blocks ``names`` of ``rel`` resolve to now."""
        wanted = set(names)
        lines = {n for b in self.blocks(rel) or [] if b.name in wanted for n in b.lines}
        return self.snap.imports.imported_by_lines(rel, self.roots, lines)

    def static(self, path: str) -> dict[str, str]:
        return self.files(static_inputs(path))

    def files(self, paths: Iterable[str]) -> dict[str, str]:
        """The content digests of the files ``paths`` name (as patterns: ``./x`` for one at the root)."""
        return self.snap.fingerprint([p if "/" in p else f"./{p}" for p in paths], "").files


def _kept_blocks(path: Path | None) -> list[Block] | None:
    """The blocks kept on disk for a content, None when there are none (or they cannot be read: parsed again)."""
    if path is None:
        return None
    try:
        return blocks_from_json(path.read_text())
    except (OSError, ValueError):  # (bytes that are no text: parsed again, and kept again)
        return None


def _keep_blocks(path: Path | None, blocks: list[Block]) -> None:
    """Keep a content's blocks on disk (best effort: a lost file costs a parse)."""
    if path is None:
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(blocks_to_json(blocks))
        tmp.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def first_change(reader: _Reader, record: Record, static_now: Mapping[str, str]) -> str | None:
    """What differs between ``record`` and the workspace now (None: nothing it depends on changed)."""
    for rel in sorted(record.static.keys() | static_now.keys()):
        if record.static.get(rel) != static_now.get(rel):
            return f"{rel} {'added' if rel not in record.static else 'removed' if rel not in static_now else 'changed'}"
    if record.data:
        now = reader.files(record.data)
        for rel in sorted(record.data):
            if now.get(rel) != record.data[rel]:
                return f"{rel} {'removed' if rel not in now else 'changed'} (read when it ran)"
    for rel, names in sorted(record.blocks.items()):
        blocks = reader.blocks(rel)
        if blocks is None:
            return f"{rel} is gone or does not parse"
        now = {b.name: b.fingerprint for b in blocks}
        for name, fp in sorted(names.items()):
            if now.get(name) != fp:
                return f"{rel}: {name} {'removed' if name not in now else 'changed'}"
    for rel, targets in sorted(record.imports.items()):
        now_targets = reader.imports(rel, record.blocks.get(rel, {}))
        if now_targets != targets:
            new = sorted(set(now_targets) - set(targets)) or sorted(set(targets) - set(now_targets))
            return f"{rel}: its imports now resolve to other files ({', '.join(new[:3])})"
    return None


@dataclass(frozen=True)
class UnitState:
    """A unit's digest now, and, when it must run, why (None: its inputs are not watched by coverage)."""

    digest: str | None
    why: str | None = None
    key: str | None = None
    env_tag: str = ""  # its environment's (see :func:`env_tag`)


def unit_state(
    snap: Snapshot, cmd: GateCommand, path: str, default_timeout: float | None, env: Mapping[str, str] | None = None
) -> UnitState:
    """The unit's digest: its newest record (of its environment: ``env``, the
    gate's) whose code is unchanged, else its import-derived inputs'."""
    if not coverable(cmd, path):
        return UnitState(unit_digest(snap, cmd, path, default_timeout, env))
    tag = env_tag(snap, cmd, env)
    key = unit_key(cmd, path, default_timeout, tag)
    records, damaged = read_records(snap.root, key, snap.cache)
    why = "its record of the code it ran could not be read" if damaged else "no record of the code it ran"
    if records:
        reader = _Reader(snap, path)
        static_now = reader.static(path)
        kept = _Answer.kept(snap, key, records, static_now)
        if kept is not None:
            return kept
        for n, record in enumerate(records):
            change = first_change(reader, record, static_now)
            if change is None:
                state = UnitState(record.digest, None, key, tag)
                _Answer.keep(snap, key, records, n, static_now, state)
                return state
            if n == 0:
                why = change
    return UnitState(unit_digest(snap, cmd, path, default_timeout, env), why, key, tag)


@dataclass(frozen=True)
class _Answer:
    """A unit whose record matched, as found: kept in the process (with what its import index found out, while
    the folders it looked in are as they were) and taken again while the unit's records, its own files and
    every file the records it went through name (the blocks' files, the data read, the importing files) are
    as they were. Each gate of a drive looks up every one of its units: on click a no-op drive made 306 lookups
    of 34 units (docs/benchmarks.md)."""

    records: tuple[str, ...]  # the digests of the unit's records, newest first
    static: dict[str, str]  # the unit's own files then
    files: dict[str, str | None]  # the content digest of each file the records gone through name
    state: UnitState

    @staticmethod
    def kept(snap: Snapshot, key: str, records: list[Record], static_now: dict[str, str]) -> UnitState | None:
        found = snap.imports.known.units.get(key)
        if not isinstance(found, _Answer) or found.records != tuple(r.digest for r in records):
            return None
        if found.static != static_now or any(snap.content_digest(f) != d for f, d in found.files.items()):
            return None
        return found.state

    @staticmethod
    def keep(
        snap: Snapshot, key: str, records: list[Record], n: int, static_now: dict[str, str], state: UnitState
    ) -> None:
        """``records[n]`` matched: the answer, with the files of the records gone through (up to it)."""
        files = {f for r in records[: n + 1] for f in (*r.data, *r.blocks, *r.imports)}
        answer = _Answer(
            tuple(r.digest for r in records), dict(static_now), {f: snap.content_digest(f) for f in files}, state
        )
        snap.imports.known.units[key] = answer


@dataclass
class Watch:
    """One run of a unit under coverage: the environment it runs with, and its record afterwards."""

    root: Path
    cmd: GateCommand
    path: str
    default_timeout: float | None
    env_tag: str = ""  # the environment it runs in (see :func:`env_tag`): part of its records' key
    # Called with a record's digest before the record is written (a book holds that digest's unit lock, so
    # another driver that reads the record waits for the pass rather than run the unit again: units.py).
    hold: Callable[[str], object] | None = None
    out: Path = field(init=False)

    def __post_init__(self) -> None:
        self.out = self.root / ".milepost" / "cache" / "unit-runs" / f"{uuid.uuid4().hex}.json"

    def env(self, base: Mapping[str, str], session: bool = False) -> dict[str, str]:
        """``base`` with the plugin loaded by pytest (``session``: several test files, each its own unit)."""
        folder = self.root / ".milepost" / "cache" / "pytest-plugin"
        plugin = folder / f"{PLUGIN_NAME}.py"
        with contextlib.suppress(OSError):
            if not plugin.is_file() or plugin.read_text() != PLUGIN:
                folder.mkdir(parents=True, exist_ok=True)
                tmp = plugin.with_name(f"{plugin.name}.{os.getpid()}.{threading.get_ident()}.tmp")
                tmp.write_text(PLUGIN)
                tmp.replace(plugin)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        opts = [base.get("PYTEST_ADDOPTS"), f"-p {PLUGIN_NAME}"]
        if session:
            opts.append("--continue-on-collection-errors")  # a file that does not import hides no other's result
        return {
            **base,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), base.get("PYTHONPATH")])),
            "PYTEST_ADDOPTS": " ".join(filter(None, opts)),
            "MILEPOST_UNIT_BLOCKS": str(self.out),
            "MILEPOST_UNIT_ROOT": str(self.root),
            "MILEPOST_UNIT_SESSION": "1" if session else "0",
        }

    def finish(self, result: CommandResult) -> CommandResult:
        """After the run: a pass's record kept, and its digest the unit's (``result`` as it was when none)."""
        try:
            if result.outcome is not Outcome.PASSED:
                return result
            record = self._record()
        except Exception:  # a record is an optimisation: without one the unit keeps its import-derived digest
            return result
        finally:
            with contextlib.suppress(OSError):
                self.out.unlink()
        if record is None:
            return result
        self.keep(record)
        return result.model_copy(update={"unit": record.digest})

    def _record(self) -> Record | None:
        try:
            found = json.loads(self.out.read_text())
            if found.get("incomplete"):
                return None
            ran, read = dict(found["files"]), dict(found.get("read", {}))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return self.record_of(ran, read)

    def keep(self, record: Record) -> None:
        if self.hold is not None:
            self.hold(record.digest)
        _write_records(self.root, unit_key(self.cmd, self.path, self.default_timeout, self.env_tag), record)

    def record_of(self, ran: Mapping[str, Any], read: Mapping[str, str]) -> Record | None:
        """The record of a run that executed ``ran`` (file -> sha and lines) and read ``read`` (file -> sha)."""
        snap = Snapshot(self.root)
        reader = _Reader(snap, self.path)
        blocks: dict[str, dict[str, str]] = {}
        imports: dict[str, list[str]] = {}
        root = os.path.realpath(self.root)
        for measured, seen in sorted(ran.items()):
            rel = self._workspace_file(snap, root, measured)
            if rel is None or not rel.endswith(".py"):
                continue
            source = (self.root / rel).read_bytes()
            if hashlib.sha256(source).hexdigest() != seen["sha"]:
                return None  # changed while the unit ran: what ran is not what is there
            found = reader.blocks(rel)
            if found is None:
                return None
            names = executed(found, seen["lines"])
            if names and MODULE not in names:
                # Its module-level code ran in this process, if not in this unit's context (imported by an
                # earlier file of the session, lazily): a change there must run this unit again too.
                names.update({b.name: b.fingerprint for b in found if b.name == MODULE})
            if names:
                blocks[rel] = names
                imports[rel] = reader.imports(rel, names)
        if self.path not in blocks:
            return None  # pytest never ran the test file here: coverage saw something else
        data: list[str] = []
        for opened, sha in sorted(read.items()):
            rel = self._workspace_file(snap, root, opened)
            if rel is None or rel in blocks:
                continue
            if hashlib.sha256((self.root / rel).read_bytes()).hexdigest() != sha:
                return None  # changed while the unit ran
            data.append(rel)
        static = reader.static(self.path)
        contents = {k: v for k, v in reader.files(data).items() if k not in static}
        snap.save()
        key = unit_key(self.cmd, self.path, self.default_timeout, self.env_tag)
        return Record(Record.digest_of(key, static, blocks, imports, contents), static, blocks, imports, contents)

    @staticmethod
    def _workspace_file(snap: Snapshot, root: str, path: str) -> str | None:
        """``path`` relative to the workspace, when it is one of its files (listed by git, not ignored)."""
        rel = os.path.relpath(os.path.realpath(path), root).replace(os.sep, "/")
        if rel.startswith("../") or any(p in NEVER for p in rel.split("/")):
            return None
        return rel if snap.matching([rel if "/" in rel else f"./{rel}"]) else None


def watched(
    root: Path,
    cmd: GateCommand,
    path: str,
    default_timeout: float | None,
    env_tag: str = "",
    hold: Callable[[str], object] | None = None,
) -> Watch | None:
    """A :class:`Watch` for the unit when coverage can say what it runs, else None."""
    return Watch(root, cmd, path, default_timeout, env_tag, hold) if coverable(cmd, path) else None
