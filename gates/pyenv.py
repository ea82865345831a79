"""The Python environment a gate runs in, as an input (``env:`` entries).

An entry ``env:NAME`` names an interpreter the way a gate starts it: a
command found on ``PATH`` (``env:python3``, ``env:pytest``), or a path,
relative to the workspace root or absolute (``env:.venv/bin/python``). A
script (``.venv/bin/pytest``) stands for the interpreter of its shebang
(``#!/usr/bin/env python3`` is looked up on ``PATH`` in turn). The entry
stands for:

* the interpreter: its real path and ``sys.version``, as the key
  ``env:NAME``;
* every distribution installed where it imports from (each folder of its
  ``sys.path`` outside the workspace, and its user site folder): one key
  ``env:NAME[dist]`` per distribution, its version the content. So adding,
  removing or upgrading one changes the fingerprint, and putting it back
  restores it (the gate cache serves it again). The folders themselves
  are not part of it: the same distributions elsewhere are the same
  environment.

Checked cheaply: the interpreter is asked (a subprocess, once) for its
version and ``sys.path`` only while its file, its ``pyvenv.cfg`` and the
variables that move its path (``PYTHONPATH``, ``PYTHONHOME``,
``PYTHONNOUSERSITE``, ``PYTHONUSERBASE``) are as they were; each folder of its
path is read again (the names of its ``*.dist-info``/``*.egg-info``) only
when its own stat changed (installing, removing or upgrading a distribution
adds or removes an entry there, so its mtime moves). What was found is kept
in ``.milepost/cache/envs.json``; a folder changed in the last 2 seconds is
read every time until it settles (as the stat cache does with files).

Which interpreters a gate uses (:func:`gate_entries`): the first word of
each simple command of its ``run`` (split at ``&&``, ``||``, ``;``, ``|``),
after ``VAR=value`` assignments and an ``env``, ``exec`` or ``command``
prefix, when it is a Python interpreter by name (``python``, ``python3.12``,
``pypy3``) or a script whose shebang names one; resolved with ``PATH`` as
the gate sees it, relative paths from the command's ``cwd``.

No Prefect, no store.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from milepost.graph.models import ENV_PREFIX

__all__ = ["ENV_CACHE_FILE", "EnvFacts", "EnvProbe", "gate_entries", "gate_entry", "interpreter_of", "is_env_entry"]

ENV_CACHE_FILE = Path("cache") / "envs.json"  # under the workspace's .milepost/
FORMAT = "milepost-envs-1"
RACY_SECONDS = 2.0
PROBE_TIMEOUT = 60.0
# The variables that move an interpreter's sys.path (part of the probe's key).
PATH_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE")
PYTHON_NAME = re.compile(r"(?:python|pypy)[0-9.]*(?:[dmt]*)(?:\.exe)?")  # fullmatch a file name
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=.*", re.S)
_PROBE = (
    "import json, os, site, sys\n"
    "paths = [p for p in sys.path if p]\n"
    "user = site.getusersitepackages() if site.ENABLE_USER_SITE else None\n"
    "print(json.dumps({'version': sys.version, 'executable': os.path.realpath(sys.executable),"
    " 'path': paths + ([user] if user and user not in paths else [])}))\n"
)


def is_env_entry(entry: str) -> bool:
    return entry.startswith(ENV_PREFIX)


def _read_head(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(512)
    except OSError:
        return b""


def shebang(path: str, path_env: str | None) -> tuple[str | None, list[str]]:
    """The interpreter a script's shebang names, and the options it gives it
    (``#!/usr/bin/env python3 -I``: found on ``path_env``; pip's ``/bin/sh``
    trampoline for long paths too); (None, []) for no shebang or no word."""
    head = _read_head(path)
    if not head.startswith(b"#!"):
        return None, []
    lines = head.decode("utf-8", "replace").splitlines()
    words = lines[0][2:].split()
    if not words:
        return None, []
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return (shutil.which(rest[0], path=path_env), rest[1:]) if rest else (None, [])
    if os.path.basename(words[0]) == "sh" and len(lines) > 1 and lines[1].startswith("'''exec' "):
        with contextlib.suppress(ValueError):
            return shlex.split(lines[1][len("'''exec' ") :])[0], []
        return None, []
    return words[0], words[1:]


def interpreter_of(name: str, root: Path, path_env: str | None) -> tuple[str | None, str]:
    """The interpreter ``name`` (an ``env:`` entry's body) stands for: (its path, "") or (None, why)."""
    if "/" in name:
        where = name if os.path.isabs(name) else os.path.join(root, name)
        if not os.path.isfile(where):
            return None, f"{name}: no such file"
    else:
        found = shutil.which(name, path=path_env)
        if found is None:
            return None, f"{name}: not found on PATH"
        where = found
    if PYTHON_NAME.fullmatch(os.path.basename(where)):
        return where, ""
    target = shebang(where, path_env)[0]
    if target is None or not PYTHON_NAME.fullmatch(os.path.basename(target)):
        return None, f"{name}: neither a Python interpreter nor a script whose shebang names one"
    if not os.path.isfile(target):
        return None, f"{name}: its interpreter {target} does not exist"
    return target, ""


SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})  # what ends a simple command


def _programs(run: str) -> list[str]:
    """The programs a shell command starts: the first word of each simple
    command (after ``VAR=value`` assignments and an ``env``/``exec``/``command``
    prefix), in order; one that is not a plain word (``$X``, a subshell's) is left out."""
    lexer = shlex.shlex(run, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return []
    out: list[str] = []
    start = True
    for w in words:
        if w in SHELL_OPERATORS:
            start = True
            continue
        if set(w) <= set("&|;()<>"):
            continue  # a redirection's operator
        if not start or _ASSIGNMENT.fullmatch(w) or w in ("env", "exec", "command"):
            continue
        start = False
        if not any(c in w for c in "$`*?[]{}"):
            out.append(w)
    return out


def gate_entries(run: str, cwd: str | None, root: Path, path_env: str | None) -> list[str]:
    """The ``env:`` entries of the interpreters a gate command starts (each
    simple command of it that is a Python by name or a script whose shebang
    names one), or none (``make``, ``uv run ...``)."""
    found = (_entry(prog, cwd, root, path_env) for prog in _programs(run))
    return list(dict.fromkeys(e for e in found if e is not None))


def gate_entry(run: str, cwd: str | None, root: Path, path_env: str | None) -> str | None:
    """The first of :func:`gate_entries`, or None."""
    return next(iter(gate_entries(run, cwd, root, path_env)), None)


def _entry(prog: str, cwd: str | None, root: Path, path_env: str | None) -> str | None:
    if "/" in prog and not os.path.isabs(prog):
        rel = os.path.normpath(os.path.join(cwd or "", prog))
        if rel.startswith(".."):
            rel = os.path.normpath(os.path.join(root, rel))
        prog = rel if "/" in rel else f"./{rel}"
    elif os.path.isabs(prog):
        with contextlib.suppress(ValueError):
            inside = os.path.relpath(prog, root)
            if not inside.startswith(".."):
                prog = inside if "/" in inside else f"./{inside}"
    if PYTHON_NAME.fullmatch(os.path.basename(prog)):
        return ENV_PREFIX + prog
    found, _ = interpreter_of(prog, root, path_env)
    return ENV_PREFIX + prog if found is not None else None


@dataclass(frozen=True)
class EnvFacts:
    """What an interpreter is now: its real path and version, its distributions (name -> version)."""

    executable: str
    version: str
    distributions: dict[str, str]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _egg_version(path: str) -> str:
    info = os.path.join(path, "PKG-INFO") if os.path.isdir(path) else path
    with contextlib.suppress(OSError), open(info, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
            if not line.strip():
                break
    return "?"


def scan_folder(folder: str) -> dict[str, str]:
    """The distributions installed in one folder: name -> version, from the
    names of its ``*.dist-info`` and ``*.egg-info`` entries (and ``.egg-link``)."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError), os.scandir(folder) as it:
        for e in it:
            n = e.name
            if n.endswith(".dist-info"):
                name, _, version = n[: -len(".dist-info")].partition("-")
                out.setdefault(_norm(name), version or "?")
            elif n.endswith(".egg-info"):
                stem = n[: -len(".egg-info")]
                name, _, rest = stem.partition("-")
                version = rest.split("-py")[0] if rest else _egg_version(e.path)
                out.setdefault(_norm(name), version)
            elif n.endswith(".egg-link"):
                out.setdefault(_norm(n[: -len(".egg-link")]), "develop")
    return out


def _stat_key(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size]


@dataclass
class EnvProbe:
    """The interpreters of one workspace, probed and scanned as cheaply as
    their stats allow; kept in ``path`` (best effort) between processes. One
    per snapshot (a run object): nothing is kept in a module global."""

    root: Path
    path: Path | None
    racy_ns: float = RACY_SECONDS * 1e9
    probes: int = 0  # interpreters asked (a subprocess each): for tests and benchmarks
    scans: int = 0  # folders read
    _data: dict[str, dict[str, object]] | None = None
    _dirty: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _load(self) -> dict[str, dict[str, object]]:
        if self._data is None:
            data: dict[str, dict[str, object]] = {"interpreters": {}, "folders": {}}
            if self.path is not None:
                with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, KeyError):
                    raw = json.loads(self.path.read_text())
                    if raw.get("format") == FORMAT:
                        data = {"interpreters": dict(raw["interpreters"]), "folders": dict(raw["folders"])}
            self._data = data
        return self._data

    def facts(self, interpreter: str, env: Mapping[str, str]) -> EnvFacts:
        """What ``interpreter`` is now (OSError or ValueError when it cannot be asked)."""
        with self._lock:
            data = self._load()
            info = self._interpreter(data, interpreter, env)
            dists: dict[str, str] = {}
            folders = info["path"]
            assert isinstance(folders, list)
            for folder in folders:
                if _workspace_code(str(folder), self.root):
                    continue  # (the workspace's own files are inputs of their own: module: entries, patterns)
                for name, version in self._folder(data, str(folder)).items():
                    dists.setdefault(name, version)  # the first on the path is the one imported
            return EnvFacts(str(info["executable"]), str(info["version"]), dists)

    def _interpreter(
        self, data: dict[str, dict[str, object]], interpreter: str, env: Mapping[str, str]
    ) -> dict[str, object]:
        real = os.path.realpath(interpreter)
        here = os.path.dirname(os.path.abspath(interpreter))
        cfg = [
            _stat_key(os.path.join(here, "pyvenv.cfg")),
            _stat_key(os.path.join(os.path.dirname(here), "pyvenv.cfg")),
        ]
        key = json.dumps([os.path.abspath(interpreter), [env.get(v) for v in PATH_VARIABLES]])
        ident = [real, _stat_key(real), cfg]
        known = data["interpreters"].get(key)
        if isinstance(known, dict) and known.get("ident") == ident:
            return known
        self.probes += 1
        probe_env = dict(env)
        out = subprocess.run(
            [interpreter, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            env=probe_env,
            cwd=self.root,
            check=False,
        )
        if out.returncode != 0:
            raise ValueError(f"{interpreter} could not be asked for its version (exit {out.returncode})")
        found = json.loads(out.stdout.strip().splitlines()[-1])
        info: dict[str, object] = {
            "ident": ident,
            "version": str(found["version"]),
            "executable": str(found["executable"]),
            "path": [str(p) for p in found["path"] if os.path.isabs(str(p))],
        }
        data["interpreters"][key] = info
        self._dirty = True
        return info

    def _folder(self, data: dict[str, dict[str, object]], folder: str) -> dict[str, str]:
        st = _stat_key(folder)
        if st is None:
            return {}
        known = data["folders"].get(folder)
        if isinstance(known, dict) and known.get("stat") == st:
            dists_known = known["dists"]
            assert isinstance(dists_known, dict)
            return {str(k): str(v) for k, v in dists_known.items()}
        self.scans += 1
        dists = scan_folder(folder)
        if time.time_ns() - max(st[0], st[1]) >= self.racy_ns:  # settled: another change would move its stat
            data["folders"][folder] = {"stat": st, "dists": dists}
            self._dirty = True
        return dists

    def save(self) -> None:
        with self._lock:
            if not self._dirty or self.path is None or self._data is None:
                return
            text = json.dumps({"format": FORMAT, **self._data}, separators=(",", ":"))
            self._dirty = False
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            tmp.replace(self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()


def _workspace_code(folder: str, root: Path) -> bool:
    """Whether a folder of an interpreter's path is the workspace's own code
    (``src/`` on ``PYTHONPATH``), not an environment in it (``.venv/lib/.../site-packages``)."""
    try:
        inside = Path(folder).resolve().relative_to(root.resolve())
    except (OSError, ValueError):
        return False
    return not ({"site-packages", "dist-packages"} & set(inside.parts))
