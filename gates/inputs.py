"""Inputs and fingerprints: what a gate's proof is bound to.

A milestone's ``inputs`` are gitignore-style patterns relative to the
workspace root (matched with ``pathspec``, git's own rules). When its gate
runs, the attempt records a **fingerprint**: a digest of the gate's spec
(each command's ``run``, ``cwd``, ``env`` and effective ``timeout``) and of
the content of every file the patterns match, tracked by git or not. Never
counted: ``.milepost/`` and ``.git/``, any ``__pycache__`` folder (a test run
that writes bytecode must not make its own milestone stale) and, in a git
work tree, what git ignores. Content decides, not modification times: a
``touch`` changes nothing. A symbolic link counts as the text it points to
(as git stores it), an executable bit as part of the content.

Besides files: a test file among the inputs brings pytest's configuration
sections (``pyproject.toml[tool.pytest]``, see :mod:`.runner_config`), and an
``env:NAME`` entry the interpreter it names and its installed distributions
(``env:NAME[dist]``, see :mod:`.pyenv`), each a key of the file list. A
gate's fingerprint (:func:`gate_fingerprint`) adds the environment of each of
its ``each:`` steps, as its units key it (the ``env:`` entries of the
interpreters the step starts), unless its inputs name that entry already.

A **stat cache** (path, size, mtime, ctime, inode -> content digest) in the
workspace's ``.milepost/cache/`` keeps unchanged files from being hashed
again; a missing, stale or unwritable cache only costs time. A file whose
content cannot be read makes the fingerprint incomplete (``digest`` None):
it names the file, and an incomplete fingerprint equals nothing, so the
milestone reads as stale rather than silently unchanged.

This module does I/O (the workspace's files, ``git ls-files``) and imports
no Prefect; :mod:`milepost.graph` stays pure.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milepost.gates.import_memo import ImportMemo
from milepost.gates.imports import ImportIndex, is_module_entry, is_test_file
from milepost.gates.listing import NEVER, FileIndex, git_files, walk_files
from milepost.gates.pyenv import ENV_CACHE_FILE, PATH_VARIABLES, EnvProbe, gate_entries, interpreter_of, is_env_entry
from milepost.gates.runner_config import config_inputs, section_digest
from milepost.graph.models import GateCommand

__all__ = [
    "CACHE_FILE",
    "Fingerprint",
    "Snapshot",
    "StatCache",
    "changed_paths",
    "describe_changes",
    "gate_fingerprint",
    "names_content",
    "spec_digest",
]

# Bumped when what a fingerprint covers changes: every proof made before reads as stale once.
FORMAT = "milepost-fingerprint-1"
DIGEST_CHARS = 32  # of a file's sha256: 128 bits tell contents apart
CACHE_FILE = Path("cache") / "inputs-stat.json"  # under the workspace's .milepost/
IMPORTS_CACHE_FILE = Path("cache") / "imports.json"
# A file changed within this many seconds may change again within the same
# timestamp tick: it is hashed every time until it has settled (git's "racy clean").
RACY_SECONDS = 2.0


def spec_digest(commands: Sequence[GateCommand], default_timeout: float | None = None) -> str:
    """A digest of what a gate runs: each command's ``run``, ``cwd``, ``env``
    and effective timeout (names are labels, not part of the proof)."""
    spec = [
        {
            "run": c.run,
            "cwd": c.cwd,
            "env": dict(sorted(c.env.items())),
            "timeout": c.timeout if c.timeout is not None else default_timeout,
        }
        | ({"each": c.each} if c.each else {})  # (absent when empty: earlier proofs keep their digest)
        for c in commands
    ]
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """What a gate attempt is proven on: its spec and its inputs' contents."""

    spec: str
    files: dict[str, str]  # path (relative, '/'-separated) -> content digest
    unreadable: dict[str, str] = field(default_factory=dict)  # path -> why it could not be read

    @functools.cached_property
    def inputs_digest(self) -> str:
        """A digest of the files alone (the key of the stored file list)."""
        h = hashlib.sha256()
        for path in sorted(self.files):
            h.update(f"{path}\t{self.files[path]}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    @property
    def complete(self) -> bool:
        return not self.unreadable

    @functools.cached_property
    def digest(self) -> str | None:
        """The fingerprint; None when a file could not be read (it equals nothing)."""
        if self.unreadable:
            return None
        return hashlib.sha256(f"{FORMAT}\n{self.spec}\n{self.inputs_digest}".encode()).hexdigest()

    def problems(self, limit: int = 3) -> str:
        """The unreadable files, for a reason: ``a.py (permission denied), ...``."""
        shown = [f"{p} ({why})" for p, why in sorted(self.unreadable.items())[:limit]]
        more = len(self.unreadable) - len(shown)
        return ", ".join(shown) + (f" and {more} more" if more else "")


def names_content(digest: str | None, data: bytes) -> bool:
    """Whether ``data`` is the content a file's content ``digest`` names: what was read after the digest was
    taken may be newer, and what is kept by digest must be what it names."""
    return digest is not None and hashlib.sha256(data).hexdigest()[:DIGEST_CHARS] == digest[:DIGEST_CHARS]


def _counted_path(rel: str) -> bool:
    return not any(part in NEVER for part in rel.split("/"))


def changed_paths(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """Paths added, removed or changed between two file lists, sorted."""
    return sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p))


def describe_changes(paths: Sequence[str], limit: int = 3) -> str:
    """``a.py, b.py, c.py and 4 more``."""
    shown = ", ".join(paths[:limit])
    more = len(paths) - limit
    return shown + (f" and {more} more" if more > 0 else "")


# -- the stat cache ---------------------------------------------------------------------


class StatCache:
    """path -> (size, mtime, ctime, inode, content digest), kept in one JSON
    file per workspace and shared by the threads of a process. Whatever goes
    wrong with it (missing, damaged, unwritable, written by another process
    meanwhile) costs only time: an entry is used only while every stat
    field still matches, and then the content it names is what is there."""

    def __init__(self, path: Path | None, *, racy_seconds: float = RACY_SECONDS) -> None:
        self.path = path
        self.racy_ns = racy_seconds * 1e9
        self._entries: dict[str, list[int | str]] | None = None
        self._dirty = False
        self._lock = threading.Lock()
        self.hashed = 0  # files hashed (a cache miss each): for tests and benchmarks
        self.imports = ImportMemo(racy_seconds * 1e9)  # what import indexes found, for the next snapshot
        self.parsed: dict[str, object] = {}  # content digest -> what a parse of it found (gates/unit_blocks.py)
        # A unit's records file -> its stat when read, and what the read found (gates/unit_blocks.py: read_records).
        self.records: dict[str, tuple[tuple[int, int, int, int], tuple[Any, ...], bool]] = {}

    def _load(self) -> dict[str, list[int | str]]:
        if self._entries is None:
            entries: dict[str, list[int | str]] = {}
            if self.path is not None:
                with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                    data = json.loads(self.path.read_text())
                    if data.get("format") == FORMAT:
                        entries = dict(data["entries"])
            self._entries = entries
        return self._entries

    def get(self, rel: str, st: os.stat_result) -> str | None:
        entries = self._entries
        if entries is None:
            with self._lock:
                entries = self._load()
        e = entries.get(rel)  # a dict read needs no lock
        if e is not None and e[:4] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]:
            return str(e[4])
        return None

    def put(self, rel: str, st: os.stat_result, digest: str) -> None:
        self.hashed += 1
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < self.racy_ns:
            return  # may change again within its timestamp's tick: hash it next time too
        with self._lock:
            self._load()[rel] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, digest]
            self._dirty = True

    def save(self) -> None:
        with self._lock:
            if not self._dirty or self.path is None or self._entries is None:
                return
            data = json.dumps({"format": FORMAT, "entries": self._entries}, separators=(",", ":"))
            self._dirty = False
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(data)
            tmp.replace(self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()


_CACHES: dict[Path, StatCache] = {}
_CACHES_LOCK = threading.Lock()


def shared_cache(root: Path) -> StatCache:
    """The process's stat cache of the workspace at ``root``."""
    path = root / ".milepost" / CACHE_FILE
    with _CACHES_LOCK:
        cache = _CACHES.get(path)
        if cache is None:
            cache = _CACHES[path] = StatCache(path)
        return cache


class Snapshot:
    """The workspace's files as they are now, listed once and hashed on
    demand (through the stat cache): fingerprints of many milestones, one pass."""

    def __init__(self, root: Path, cache: StatCache | None = None) -> None:
        self.root = root
        self._root = str(root)
        self.cache = cache if cache is not None else shared_cache(root)
        self._listed: FileIndex | None = None
        self._git: bool | None = None
        self._digests: dict[str, tuple[str | None, str | None]] = {}
        self._imports: ImportIndex | None = None
        self._probe: EnvProbe | None = None
        # What this snapshot found of the environments and the runner's configuration, once each.
        self._envs: dict[tuple[str, ...], tuple[dict[str, str], str | None]] = {}
        self._sections: dict[tuple[str, str], str] = {}
        self._steps: dict[tuple[str, str | None, str | None], list[str]] = {}  # a step's env: entries

    @property
    def envs(self) -> EnvProbe:
        """The interpreters ``env:`` entries stand for (probed and scanned as their stats allow)."""
        if self._probe is None:
            self._probe = EnvProbe(self.root, self.root / ".milepost" / ENV_CACHE_FILE)
        return self._probe

    @property
    def imports(self) -> ImportIndex:
        """The workspace's modules and their imports, read as they are now (``module:`` entries)."""
        if self._imports is None:
            self._imports = ImportIndex(
                self.root,
                lambda rel: self._digest(rel)[0],
                self.root / ".milepost" / IMPORTS_CACHE_FILE,
                self.cache.imports,
            )
        return self._imports

    def _index(self, patterns: Sequence[str]) -> FileIndex:
        if self._git is None:
            found = git_files(self.root)
            self._git = found is not None
            self._listed = FileIndex(found) if found is not None else None
        if self._listed is not None:
            return self._listed
        return FileIndex(walk_files(self.root, patterns))  # outside git: the folders these patterns reach

    def matching(self, patterns: Sequence[str]) -> list[str]:
        """The files ``patterns`` match, sorted (``module:`` entries: the files they stand for now)."""
        return sorted(self.resolve(patterns)[0])

    def resolve(self, patterns: Sequence[str]) -> tuple[set[str], dict[str, str]]:
        """The files ``patterns`` and ``module:`` entries match now, and the
        entries naming no module (entry -> why)."""
        if not patterns:
            return set(), {}
        globs = [p for p in patterns if not is_module_entry(p) and not is_env_entry(p)]
        modules = [p for p in patterns if is_module_entry(p)]
        files = set(self._index(globs).match(globs)) if globs else set()
        missing: dict[str, str] = {}
        if modules:
            roots = self.imports.roots_of(modules)
            for entry in modules:
                found = self.imports.expand(entry, roots)
                if found.missing is not None:
                    missing[entry] = found.missing
                files |= {f for f in found.files if _counted_path(f)}
        return files, missing

    def _digest(self, rel: str) -> tuple[str | None, str | None]:
        """(content digest, None), (None, why unreadable), or (None, None) when gone."""
        if rel in self._digests:
            return self._digests[rel]
        path = os.path.join(self._root, rel)
        out: tuple[str | None, str | None]
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            out = (None, None)  # listed by git but deleted: not an input any more
        except OSError as e:
            out = (None, e.strerror or type(e).__name__)
        else:
            out = self._content(rel, path, st)
        self._digests[rel] = out
        return out

    def _content(self, rel: str, path: str, st: os.stat_result) -> tuple[str | None, str | None]:
        if stat.S_ISDIR(st.st_mode):
            return (None, None)  # a submodule's folder: not a file
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(path)
            except OSError as e:
                return (None, e.strerror or type(e).__name__)
            return ("link:" + hashlib.sha256(os.fsencode(target)).hexdigest()[:DIGEST_CHARS], None)
        if not stat.S_ISREG(st.st_mode):
            return (None, "not a regular file")
        digest = self.cache.get(rel, st)
        if digest is None:
            try:
                with open(path, "rb") as f:
                    digest = hashlib.file_digest(f, "sha256").hexdigest()[:DIGEST_CHARS]
            except OSError as e:
                return (None, (e.strerror or type(e).__name__).lower())
            self.cache.put(rel, st, digest)
        return (digest + (":x" if st.st_mode & 0o111 else ""), None)

    def content_digest(self, rel: str) -> str | None:
        """The file's content digest now (None: gone or unreadable)."""
        return self._digest(rel)[0]

    def fingerprint(self, patterns: Sequence[str], spec: str, env: Mapping[str, str] | None = None) -> Fingerprint:
        """``patterns``' fingerprint now; ``env``: the gate's environment
        (``PATH`` finds the interpreters of ``env:`` entries; default this process's)."""
        files: dict[str, str] = {}
        found, missing = self.resolve(patterns)
        unreadable: dict[str, str] = {entry: why.partition(": ")[2] for entry, why in missing.items()}
        for rel in sorted(found):
            digest, why = self._digest(rel)
            if digest is not None:
                files[rel] = digest
            elif why is not None:
                unreadable[rel] = why
        for entry in patterns:
            if is_env_entry(entry):
                keys, why = self.environment(entry, os.environ if env is None else env)
                files.update(keys)
                if why is not None:
                    unreadable[entry] = why
        files.update(self.runner_config(found))
        return Fingerprint(spec=spec, files=files, unreadable=unreadable)

    def runner_config(self, files: Iterable[str]) -> dict[str, str]:
        """The test runner's configuration read for the test files among
        ``files`` (see :mod:`.runner_config`): key -> content digest."""
        out: dict[str, str] = {}
        folders: set[str] = set()
        for rel in files:
            folder = rel.rpartition("/")[0]
            if folder not in folders and is_test_file(rel):
                folders.add(folder)  # (the same folder, the same configuration)
                out.update(config_inputs(rel, lambda r: self._digest(r)[0], self._section))
        return out

    def _section(self, rel: str, name: str, section: str) -> str:
        """The digest of the runner's section of a configuration file: once per snapshot, and once per content
        in the process (a drive takes a snapshot per gate: parsing ``pyproject.toml`` again each time cost more
        than the rest of a unit's lookup; docs/benchmarks.md)."""
        digest = self._digest(rel)[0]
        key = (rel, str(digest))
        if key in self._sections:
            return self._sections[key]
        kept = f"section:{name}:{section}:{digest}"
        if digest is not None and kept in self.cache.parsed:
            self._sections[key] = str(self.cache.parsed[kept])
            return self._sections[key]
        try:
            with open(os.path.join(self._root, rel), "rb") as f:
                data = f.read()
        except OSError as e:
            self._sections[key] = "unreadable:" + (e.strerror or type(e).__name__)
            return self._sections[key]
        self._sections[key] = section_digest(name, section, data)
        if names_content(digest, data):
            self.cache.parsed[kept] = self._sections[key]  # (only when what was read is what the digest names)
        return self._sections[key]

    def environment(self, entry: str, env: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
        """What an ``env:`` entry stands for now: its keys (``env:NAME`` -> the
        interpreter's real path and version, ``env:NAME[dist]`` -> each
        distribution's version), and why it could not be read (or None)."""
        memo = (entry, env.get("PATH") or "", *(env.get(v) or "" for v in PATH_VARIABLES))
        if memo not in self._envs:
            self._envs[memo] = self._environment(entry, env)
        return self._envs[memo]

    def _environment(self, entry: str, env: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
        name = entry[len("env:") :]
        interpreter, why = interpreter_of(name, self.root, env.get("PATH"))
        if interpreter is None:
            return {}, why.partition(": ")[2]
        try:
            facts = self.envs.facts(interpreter, env)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            return {}, f"{interpreter} could not be asked: {e}"
        ident = hashlib.sha256(f"{facts.executable}\n{facts.version}".encode()).hexdigest()[:DIGEST_CHARS]
        keys = {entry: "python:" + ident}
        keys.update({f"{entry}[{dist}]": "dist:" + version for dist, version in facts.distributions.items()})
        return keys, None

    def step_entries(self, cmd: GateCommand, env: Mapping[str, str]) -> list[str]:
        """The ``env:`` entries of the interpreters ``cmd`` starts, found with
        ``env``'s ``PATH`` (see :func:`milepost.gates.pyenv.gate_entries`); once per snapshot."""
        key = (cmd.run, cmd.cwd, env.get("PATH"))
        if key not in self._steps:
            self._steps[key] = gate_entries(cmd.run, cmd.cwd, self.root, env.get("PATH"))
        return self._steps[key]

    def save(self) -> None:
        """Keep what was hashed and parsed for the next time (best effort)."""
        self.cache.save()
        if self._imports is not None:
            self._imports.save()
        if self._probe is not None:
            self._probe.save()


def gate_fingerprint(
    snap: Snapshot,
    inputs: Sequence[str],
    commands: Sequence[GateCommand],
    default_timeout: float | None,
    env: Mapping[str, str] | None = None,
) -> Fingerprint:
    """A gate's fingerprint now: its ``inputs`` and spec, and the environment
    of each of its ``each:`` steps (the ``env:`` entries of the interpreters
    it starts, found with ``PATH`` as the step sees it: ``env``, default this
    process's, then the step's own), as its units key it: adding, removing or
    upgrading a distribution there makes the milestone stale, putting it back
    restores its fingerprint. An entry its inputs name already is not added
    again; one that cannot be read counts as such (a key, not an incomplete
    fingerprint: nothing the user named is missing)."""
    fp = snap.fingerprint(inputs, spec_digest(commands, default_timeout), env)
    named = {e for e in inputs if is_env_entry(e)}
    base = os.environ if env is None else env
    added: dict[str, str] = {}
    for cmd in commands:
        if not cmd.each:
            continue
        seen = {**base, **cmd.env} if cmd.env else base
        for entry in snap.step_entries(cmd, seen):
            if entry in named or entry in added:
                continue
            keys, why = snap.environment(entry, seen)
            added.update(keys if why is None else {entry: f"unreadable: {why}"})
    if not added:
        return fp
    return Fingerprint(spec=fp.spec, files={**added, **fp.files}, unreadable=fp.unreadable)


def fingerprint_of(
    root: Path, patterns: Sequence[str], commands: Sequence[GateCommand], default_timeout: float | None
) -> Fingerprint:
    """One milestone's fingerprint, now (a snapshot of its own)."""
    snap = Snapshot(root)
    try:
        return gate_fingerprint(snap, patterns, commands, default_timeout)
    finally:
        snap.save()
