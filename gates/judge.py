"""The judge of a doer's attempt (docs/doers.md, issue 38): a checkout
milepost makes of the doer's *committed* result, where the attempt's gate
runs, and the rule that makes a gate import the code it judges.

**The judge's checkout** is a detached git worktree in a folder beside the
attempt's worktree (``<worktree's folder>/.judge/<n>``, :func:`judge_folder`),
one of a small pool: an attempt takes the first free one (an ``flock`` on
``<n>.lock``, held until its gate ended: threads and processes alike). It is
checked out at the attempt's result commit and cleaned, so no untracked or
ignored file the doer wrote is there (the doer never runs in it); paths
matched by ``doer.protect`` are restored from the integration tip (removed
where the tip lacks them). No git hook runs.

**The judge's set-up** (``doer.judge_setup``, else ``doer.setup``) runs there
before the gate. What it leaves (the untracked and ignored paths it made: a
``.venv``) is kept, with its *key*, in ``<n>.setup.json``: the digest of the
command and of the files ``doer.judge_key`` names (gitignore patterns,
default :data:`DEFAULT_KEY_FILES`) as the judged commit has them. The next
attempt in that checkout keeps those outputs while its key is the same, and
removes them and runs the set-up again when it differs (or they are gone).

**The import rule** (:func:`import_rule`): a gate that runs outside the
workspace (the judge's checkout, the drive's integration worktree) gets the
checkout's source roots first on ``PYTHONPATH`` (for the packages the plan's
``module:`` entries name that the checkout holds: ``src/`` or its root), and
its interpreter is asked where each resolves (``importlib.util.find_spec``,
in a subprocess with the gate's environment and folder). One that resolves
outside the checkout (an editable install whose ``.pth`` puts the workspace
first, a gate that sets its own ``PYTHONPATH``, ``python -I``) refuses the
attempt: it would prove other code than the code it names.

The gate's interpreter (:func:`gate_interpreter`): in each command, the first
simple command (split at ``&&``, ``||``, ``;``, ``|``; leading ``VAR=value``
words and ``env`` skipped) whose program is a python (``python``,
``python3``, ``python3.12``, a path to one), or whose program is a script
whose shebang names one (``#!/path/python``, ``#!/usr/bin/env python3``:
``pytest``, ``.venv/bin/pytest``). A command with neither is not checked.

The drive's loop hands the gate task of a doer's attempt a
:class:`JudgeOrder`; the task makes the judge there (:func:`make_judge`),
runs the gate in it and releases it. No Prefect, no store.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from milepost.gates.command import run_gate
from milepost.gates.doer_env import doer_env
from milepost.gates.git import GitError, _common_dir, _git, _locked, _names, _out
from milepost.gates.imports import DEFAULT_ROOTS
from milepost.gates.listing import FileIndex
from milepost.gates.outcome import GateResult, Outcome
from milepost.gates.pyenv import PYTHON_NAME, SHELL_OPERATORS, shebang
from milepost.gates.worktrees import protected_changes
from milepost.graph.models import MODULE_PREFIX, GateCommand

__all__ = [
    "DEFAULT_KEY_FILES",
    "ImportRule",
    "Judge",
    "JudgeOrder",
    "SetupFailed",
    "SetupSpec",
    "gate_interpreter",
    "import_rule",
    "judge_env",
    "judge_folder",
    "make_judge",
    "named_packages",
    "open_judge",
    "setup_key",
    "source_roots",
]

JUDGE_DIR = ".judge"  # beside an attempt's worktree (a milestone's name starts with a letter: never this)
# What a judge's set-up is built from, unless doer.judge_key says: the usual manifests and lock files.
DEFAULT_KEY_FILES = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "*.lock",
    "package.json",
    "package-lock.json",
)
_LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PREFIXES = ("env", "exec", "command")  # words before a program that leave it the program
_PROBE = """import importlib.util, json, sys
if sys.argv[1] == "script" and sys.path and sys.path[0] in ("", "."):
    del sys.path[0]
found = {}
for name in sys.argv[2:]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    where = None
    if spec is not None:
        where = spec.origin if spec.origin not in (None, "namespace", "frozen", "built-in") else None
        if where is None and spec.submodule_search_locations:
            where = list(spec.submodule_search_locations)[0]
    found[name] = where
print(json.dumps(found))
"""


def judge_folder(worktree: Path) -> Path:
    """Where the judges of the attempts whose worktrees are beside ``worktree`` live."""
    return worktree.parent / JUDGE_DIR


def judge_env(inherited: Mapping[str, str], allowed: Sequence[str], given: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a judge's set-up and gate: the doer's scrub
    (milepost's own variables and likely secrets removed, ``doer.env``
    kept: :mod:`milepost.gates.doer_env`), then ``given``. It runs the doer's
    code: a milepost command it runs acts as the doer."""
    return doer_env(inherited, allowed, given)


# -- the judge's checkout ----------------------------------------------------------------


@dataclass(frozen=True)
class SetupSpec:
    """The judge's set-up: its command (None: none) and what its key is built from."""

    command: str | None
    key_files: Sequence[str] = DEFAULT_KEY_FILES
    timeout: float | None = None


@dataclass
class Judge:
    """A judge's checkout, held (its slot's lock) until :meth:`release`."""

    path: Path
    commit: str
    lock: IO[bytes] | None
    restored: list[str] = field(default_factory=list)  # protected paths put back from the tip
    setup_ran: bool = False  # False: none, or its outputs reused
    seconds: float = 0.0  # what making it took, the set-up included

    def release(self) -> None:
        if self.lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self.lock, fcntl.LOCK_UN)
            self.lock.close()
            self.lock = None


class SetupFailed(Exception):
    """The judge's set-up failed: its result (log, exit, reason)."""

    def __init__(self, result: GateResult) -> None:
        super().__init__(result.reason)
        self.result = result


def _take_slot(folder: Path) -> tuple[Path, IO[bytes]]:
    """The first free checkout of the pool in ``folder``, its lock held."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    while True:
        lock = open(folder / f"{n}.lock", "a+b")  # noqa: SIM115 (held until the judge is released)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            n += 1
            continue
        return folder / str(n), lock


def open_judge(
    repo_root: Path,
    folder: Path,
    commit: str,
    tip: str,
    protect: Sequence[str],
    setup: SetupSpec,
    env: Mapping[str, str],
    log_path: Path,
    stop: threading.Event | None = None,
) -> Judge:
    """A judge's checkout in ``folder`` at ``commit``: cleaned, protected paths
    restored from ``tip``, its set-up run (or its outputs reused; ``stop``
    stops it). Raises :class:`GitError` (git refused) or :class:`SetupFailed`;
    the slot is released on any error."""
    t0 = time.monotonic()
    path, lock = _take_slot(folder)
    judge = Judge(path, commit, lock)
    try:
        state_file = folder / f"{path.name}.setup.json"
        state = _read_state(state_file)
        kept = list(state.outputs)
        _checkout(repo_root, path, commit, kept)
        judge.restored = _restore(path, commit, tip, protect)
        if setup.command:
            judge.setup_ran = _set_up(path, setup, state, state_file, env, log_path, stop)
        elif kept:
            _clean(path, [])
            state_file.unlink(missing_ok=True)
    except BaseException:
        judge.release()
        raise
    judge.seconds = time.monotonic() - t0
    return judge


@dataclass(frozen=True)
class _State:
    """What the last set-up in a judge's checkout left: its key and its outputs."""

    key: str | None = None
    outputs: tuple[str, ...] = ()


def _read_state(path: Path) -> _State:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return _State()
    if not isinstance(data, dict):
        return _State()
    outputs = data.get("outputs")
    kept = tuple(o for o in outputs if isinstance(o, str)) if isinstance(outputs, list) else ()
    key = data.get("key")
    return _State(key if isinstance(key, str) else None, kept)


def _is_checkout(path: Path) -> bool:
    if not (path / ".git").is_file():
        return False
    top = _git(path, "rev-parse", "--show-toplevel", check=False)
    return top.returncode == 0 and Path(top.stdout.decode().strip()).resolve() == path.resolve()


def _checkout(repo_root: Path, path: Path, commit: str, kept: Sequence[str]) -> None:
    """``path`` a detached worktree at ``commit``, clean but for ``kept`` (set-up outputs)."""
    if _is_checkout(path):
        _clean(path, kept)
        _git(path, "checkout", "-q", "-f", "--detach", commit)
        _git(path, "reset", "-q", "--hard", commit)
        return
    if path.exists():
        shutil.rmtree(path)  # (milepost's own folder: a judge git no longer knows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(_common_dir(repo_root) / "milepost-worktrees.lock"):  # (the lock gates/worktrees.py takes)
        _git(repo_root, "worktree", "prune")
        _git(repo_root, "worktree", "add", "-q", "--detach", str(path), commit)


def _clean(path: Path, kept: Sequence[str]) -> None:
    """Remove every untracked and ignored file under ``path`` but ``kept``."""
    keep = [x for k in kept for x in ("-e", "/" + k.strip("/") + ("/" if k.endswith("/") else ""))]
    _git(path, "clean", "-q", "-f", "-f", "-d", "-x", *keep)


def _restore(path: Path, commit: str, tip: str, protect: Sequence[str]) -> list[str]:
    """Put the protected paths ``commit`` changed back as ``tip`` has them (removed where it lacks them)."""
    if not protect:
        return []
    fork = _out(path, "merge-base", tip, commit)
    changed = _names(_git(path, "diff", "--name-only", "-z", "--no-renames", fork, commit, "--").stdout)
    hit = protected_changes(changed, list(protect))
    if not hit:
        return []
    known = set(_names(_git(path, "ls-tree", "-r", "-z", "--name-only", tip, "--", *hit, env=_LITERAL).stdout))
    if known:
        _git(path, "checkout", "-q", tip, "--", *sorted(known), env=_LITERAL)
    extra = [p for p in hit if p not in known]
    if extra:
        _git(path, "rm", "-q", "-f", "--ignore-unmatch", "--", *extra, env=_LITERAL)
    return hit


def setup_key(path: Path, setup: SetupSpec) -> str:
    """The key of the set-up's outputs in the checkout at ``path``: its command
    and the blobs of the files ``setup.key_files`` match."""
    listing = _git(path, "ls-files", "-s", "-z").stdout
    blobs: dict[str, str] = {}
    for entry in _names(listing):
        meta, _, name = entry.partition("\t")
        blobs[name] = meta.split()[1] if len(meta.split()) > 1 else ""
    digest = hashlib.sha256(f"{setup.command}\n".encode())
    for name in FileIndex(sorted(blobs)).match(list(setup.key_files)):
        digest.update(f"{name}\t{blobs[name]}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _set_up(
    path: Path,
    setup: SetupSpec,
    state: _State,
    state_file: Path,
    env: Mapping[str, str],
    log: Path,
    stop: threading.Event | None,
) -> bool:
    """Run the set-up unless its outputs for this key are there; whether it ran."""
    key = setup_key(path, setup)
    outputs = list(state.outputs)
    tracked = bool(outputs) and bool(_git(path, "ls-files", "-z", "--", *outputs, env=_LITERAL).stdout)
    if state.key == key and all((path / o).exists() for o in outputs) and not tracked:
        return False
    state_file.unlink(missing_ok=True)
    _clean(path, [])  # (outputs of another key, or touched by a tracked path: built again)
    assert setup.command is not None
    result = run_gate(
        [GateCommand(name="judge-setup", run=setup.command)],
        log,
        default_cwd=path,
        env=dict(env),
        inherit_env=False,
        default_timeout=setup.timeout,
        stop=stop,
    )
    if not result.passed:
        raise SetupFailed(result)
    made = _names(_git(path, "ls-files", "-z", "--others", "--directory").stdout)
    state_file.write_text(json.dumps({"key": key, "command": setup.command, "outputs": sorted(made)}))
    return True


# -- the import rule -----------------------------------------------------------------------


def named_packages(entries: Iterable[str]) -> list[str]:
    """The top-level names the ``module:`` entries among ``entries`` name:
    ``module:kv.mod_c`` -> ``kv``; ``module:src/kv/mod_c.py`` -> ``kv``
    (the file's top package; a file in no package names nothing)."""
    names: dict[str, None] = {}
    for entry in entries:
        if not entry.startswith(MODULE_PREFIX):
            continue
        body = entry[len(MODULE_PREFIX) :]
        if body.endswith(".py") or "/" in body:
            parts = body.split("/")[:-1]
            top = _top_package(parts)
            if top is not None:
                names[top] = None
        elif body:
            names[body.split(".")[0]] = None
    return list(names)


def _top_package(folders: Sequence[str]) -> str | None:
    """The top package of a file in ``folders`` by name alone: the first
    folder after a source root (``src``) or the first folder; None at the root."""
    rest = [f for f in folders if f not in ("", ".")]
    if rest and rest[0] == "src":
        rest = rest[1:]
    return rest[0] if rest else None


def source_roots(checkout: Path, packages: Sequence[str]) -> tuple[list[Path], list[str]]:
    """The folders of ``checkout`` (its root, ``src/``) that hold the
    ``packages`` (a package folder or a module file), in the order found;
    and the packages found there. With no ``packages``, those of ``src/``
    and the root (folders with an ``__init__.py``)."""
    wanted = list(packages) or _packages_in(checkout)
    roots: dict[Path, None] = {}
    found: list[str] = []
    for name in wanted:
        for sub in DEFAULT_ROOTS:
            base = checkout / sub if sub else checkout
            if (base / name / "__init__.py").is_file() or (base / f"{name}.py").is_file():
                roots[base] = None
                found.append(name)
                break
    return list(roots), found


def _packages_in(checkout: Path) -> list[str]:
    names: list[str] = []
    for sub in ("src", ""):
        base = checkout / sub if sub else checkout
        with contextlib.suppress(OSError):
            names += sorted(
                p.parent.name for p in base.glob("*/__init__.py") if not p.parent.name.startswith((".", "_"))
            )
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Interpreter:
    """A gate command's python, and whether it runs a script (its folder, not the cwd, first on sys.path)."""

    python: Path
    script: bool
    env: dict[str, str]  # the command's own assignments (VAR=value words, ``env`` arguments)
    flags: tuple[str, ...] = ()  # options that change sys.path (-I, -E, -s, -S, -P), given to the probe too


def _simple_commands(run: str) -> list[list[str]]:
    try:
        lexer = shlex.shlex(run, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return []
    out: list[list[str]] = [[]]
    for w in words:
        if w in SHELL_OPERATORS:
            out.append([])
        else:
            out[-1].append(w)
    return [c for c in out if c]


def _which(program: str, cwd: Path, env: Mapping[str, str]) -> Path | None:
    if "/" in program:
        p = Path(program) if Path(program).is_absolute() else cwd / program
        return p if p.is_file() else None
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    return Path(found) if found else None


def gate_interpreter(run: str, cwd: Path, env: Mapping[str, str]) -> Interpreter | None:
    """The python a gate command runs (see the module's docstring), or None."""
    for words in _simple_commands(run):
        assigned: dict[str, str] = {}
        i = 0
        while i < len(words) and (_ASSIGNMENT.match(words[i]) or words[i] in _PREFIXES):
            if words[i] not in _PREFIXES:
                k, _, v = words[i].partition("=")
                assigned[k] = v
            i += 1
        if i >= len(words):
            continue
        path_env = {**env, **assigned}
        program = _which(words[i], cwd, path_env)
        if program is None:
            continue
        if PYTHON_NAME.fullmatch(Path(words[i]).name):
            return Interpreter(program, False, assigned, _path_flags(words[i + 1 :]))
        named, options = shebang(str(program), path_env.get("PATH", os.defpath))
        target = Path(named) if named else None
        if target is not None and PYTHON_NAME.fullmatch(target.name):
            return Interpreter(target, True, assigned, _path_flags(options))
    return None


def _path_flags(args: Sequence[str]) -> tuple[str, ...]:
    """Of python's options before its module, command or script, those that change where it imports from."""
    flags: list[str] = []
    for a in args:
        if not a.startswith("-") or a in ("-", "--") or a.startswith(("-m", "-c")):
            break
        if a in ("-W", "-X"):
            break  # (an option with a value: rare before these; stop looking)
        flags += [f"-{ch}" for ch in a[1:] if ch in "IEsSP"]
    return tuple(dict.fromkeys(flags))


@dataclass(frozen=True)
class ImportRule:
    """What a gate outside the workspace is given (``env``: ``PYTHONPATH``),
    or why it is refused (``refusal``: one line)."""

    env: dict[str, str]
    refusal: str | None = None
    checked: int = 0  # interpreters asked


def _under(path: str, root: Path) -> bool:
    try:
        Path(path).resolve().relative_to(root)
    except ValueError:
        return False
    return True


def resolve(python: Interpreter, packages: Sequence[str], cwd: Path, env: Mapping[str, str]) -> dict[str, str | None]:
    """Where ``python`` imports each of ``packages`` from, run in ``cwd`` with ``env`` (None: nowhere)."""
    run_env = {k: v for k, v in {**env, **python.env}.items() if k != "PYTHONSTARTUP"}
    if "PYTHONPATH" in python.env:  # (an assignment such as PYTHONPATH=src is relative to the command's folder)
        run_env["PYTHONPATH"] = os.pathsep.join(
            str(cwd / p) if p and not os.path.isabs(p) else p for p in python.env["PYTHONPATH"].split(os.pathsep)
        )
    try:
        done = subprocess.run(
            [str(python.python), *python.flags, "-c", _PROBE, "script" if python.script else "python", *packages],
            cwd=cwd,
            env=run_env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        found = json.loads(done.stdout.decode(errors="replace").strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}
    return {k: v if isinstance(v, str) else None for k, v in found.items()} if isinstance(found, dict) else {}


def import_rule(
    checkout: Path,
    packages: Sequence[str],
    commands: Sequence[GateCommand],
    env: Mapping[str, str],
) -> ImportRule:
    """The import rule for a gate whose commands run in ``checkout`` (not the
    workspace) with ``env`` (its whole environment): the checkout's source
    roots first on ``PYTHONPATH``, and each command's python asked where the
    packages resolve; one outside the checkout is a refusal."""
    roots, found = source_roots(checkout, packages)
    if not roots:
        return ImportRule({})
    before = env.get("PYTHONPATH", "")
    added = {"PYTHONPATH": os.pathsep.join([*(str(r) for r in roots), *([before] if before else [])])}
    run_env = {**env, **added}
    top = checkout.resolve()
    asked: set[tuple[Path, bool, str, str]] = set()
    for c in commands:
        cwd = checkout / c.cwd if c.cwd else checkout
        cmd_env = {**run_env, **c.env}
        python = gate_interpreter(c.run, cwd, cmd_env)
        if python is None:
            continue
        seen = (python.python, python.script, str(cwd), json.dumps(python.env, sort_keys=True))
        if seen in asked:
            continue
        asked.add(seen)
        for name, where in resolve(python, found, cwd, cmd_env).items():
            if where is not None and not _under(where, top):
                return ImportRule(added, _refusal(python.python, name, where, checkout, c), len(asked))
    return ImportRule(added, None, len(asked))


def _refusal(python: Path, name: str, where: str, checkout: Path, c: GateCommand) -> str:
    return (
        f"refused: the gate's python {python} imports {name} from {where}, outside {checkout} where its gate"
        f" runs (command {c.name or c.run!r}): it would prove other code than the code it judges; let the gate"
        " import from its folder (no python -I or -E, no PYTHONPATH of its own without the checkout's source"
        " roots) or build the gate's environment in the checkout (doer.judge_setup)"
    )


# -- the judge of one attempt, made where its gate runs -----------------------------------


@dataclass(frozen=True)
class JudgeOrder:
    """What the gate task of a doer's attempt needs to make its judge
    (:func:`make_judge`): plain values, pickled with the task's spec."""

    repo_root: str
    folder: str  # the pool (judge_folder of the attempt's worktree)
    commit: str  # the attempt's result
    tip: str  # the integration tip protected paths are restored from
    protect: tuple[str, ...] = ()
    setup: str | None = None
    key_files: tuple[str, ...] = DEFAULT_KEY_FILES
    packages: tuple[str, ...] = ()  # what the plan's module: entries name
    log: str = ""  # the set-up's own log (attempt-N.judge.log)
    setup_timeout: float | None = None  # seconds its set-up may take (the milestone's timeout)


def make_judge(
    order: JudgeOrder,
    commands: Sequence[GateCommand],
    env: Mapping[str, str],
    attempt_log: Path,
    stop: threading.Event | None = None,
) -> tuple[Judge, dict[str, str]] | GateResult:
    """The judge of ``order`` made, its set-up run or reused, and the import
    rule applied for ``commands`` run with ``env``: the judge (held: release
    it once the gate ended) and what the gate's environment adds; or the
    attempt's failure (git refused, the set-up failed, a package resolves
    outside), its reason in ``attempt_log`` too."""
    setup = SetupSpec(order.setup, order.key_files, order.setup_timeout)
    try:
        j = open_judge(
            Path(order.repo_root), Path(order.folder), order.commit, order.tip, order.protect, setup, env,
            Path(order.log), stop,
        )  # fmt: skip
    except (GitError, OSError) as e:
        return _failed(attempt_log, f"judge not made: {e}")
    except SetupFailed as e:
        text = Path(order.log).read_text(errors="replace") if Path(order.log).exists() else ""
        r = e.result
        return _failed(attempt_log, f"judge set-up failed: {r.reason}", text, r)
    given = {"MILEPOST_WORKSPACE": str(j.path)}
    rule = import_rule(j.path, order.packages, commands, {**env, **given})
    if rule.refusal is not None:
        j.release()
        return _failed(attempt_log, rule.refusal)
    return j, {**given, **rule.env}


def _failed(log: Path, reason: str, text: str = "", ran: GateResult | None = None) -> GateResult:
    """An attempt that failed before its gate ran: ``reason`` (and ``text``) appended to its ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"=== {reason}\n{text}")
    now = datetime.now(UTC)
    return GateResult(
        outcome=ran.outcome if ran is not None and ran.outcome is Outcome.INTERRUPTED else Outcome.FAILED,
        reason=reason,
        exit_code=ran.exit_code if ran is not None else None,
        duration=ran.duration if ran is not None else 0.0,
        tail=ran.tail if ran is not None and ran.tail else reason,
        started_at=ran.started_at if ran is not None else now,
        finished_at=now,
        log_path=str(log),
    )
