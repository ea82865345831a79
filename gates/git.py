"""The git layer of doers (docs/doers.md, issue 30): the workspace's
repository, a worktree per attempt, what a doer changed, and the merge into
the integration branch. Every call is a ``git`` subprocess (never a shell,
``check=False`` and a :class:`GitError` naming the command and git's own
words); nothing here knows the store, Prefect or a milestone. Decisions:

- **Commits milepost makes** (an attempt's commit, a merge commit) carry the
  identity git is configured with (``user.name`` and ``user.email`` at any
  config level, or ``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` in the environment);
  when git has none, ``milepost <milepost@localhost>``. They run no hooks
  (``--no-verify``) and are never signed: a doer's work is judged by its
  gate, not by a pre-commit hook, and no passphrase prompt may stall a drive.
- **``.milepost/`` never counts** as a change, a dirty path or part of a
  commit, at any depth, whether ``.gitignore`` names it or not.
- **The integration checkout** (:func:`integration_checkout`) is the
  workspace when it has the base branch checked out and nothing
  uncommitted; else a *detached* worktree under ``<home>/worktrees/integration``
  (git refuses a branch checked out twice): the merge is made there and the
  branch moved by ``git update-ref`` against the tip it was made from (moved
  meanwhile: merged again from the new tip). A user's files are never
  written: a workspace on the base branch keeps its uncommitted work, its
  index then lagging its branch (``git status`` shows the merged work as
  staged and undone) until its user updates it. :func:`merge` refuses an
  attached checkout with uncommitted changes: call
  :func:`integration_checkout` before each merge (it is cheap).
- **One writer at a time**: a merge holds an exclusive ``fcntl.flock`` on
  ``<git common dir>/milepost-merge.lock`` (threads and processes alike: each
  lock is its own open file); worktrees are made under ``milepost-worktrees.lock``.
- **A reused worktree** is reset to its branch's tip and cleaned of untracked
  files, not of ignored ones: what ``doer.setup`` installed stays.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from milepost.gates.listing import FileIndex
from milepost.graph.errors import MilepostError, NotFoundError

__all__ = ["MILEPOST_IDENT", "GitError", "MergeResult", "Repo", "UnknownRefError", "Worktree", "Worktrees"]
__all__ += ["integration_checkout", "merge", "protected_changes"]

MILEPOST_IDENT = ("milepost", "milepost@localhost")
_HOME = ".milepost"
_NOT_HOME = f":(exclude,glob)**/{_HOME}/**"
_CONFLICT_LINES = 200
_BASE_MARK = "milepost-integration-base"  # in an integration worktree's own git dir: the branch it merges into
# Set by a git hook or a parent git command: they would point every call at another repository.
_LEAKY = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX", "GIT_OBJECT_DIRECTORY")
_QUIET_COMMIT = ("-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null")


class GitError(MilepostError):
    """git missing, or a git command that failed: the environment, exit 3."""

    exit_code = 3
    kind = "git"


class UnknownRefError(GitError, NotFoundError):
    """A branch, tag or commit named that the repository does not have: bad input, exit 2."""

    exit_code = 2
    kind = "unknown_ref"


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.update(extra or {})
    return env


def _git(
    cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, env=_env(env), check=False, timeout=600
        )
    except FileNotFoundError:
        raise GitError("git is not installed (no 'git' on PATH): install git to run doers in worktrees") from None
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GitError(f"git {' '.join(args[:2])} in {cwd} did not run: {e}") from None
    if check and done.returncode != 0:
        words = [a for a in args if not a.startswith("-") and "=" not in a][:2]
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise GitError(
            f"git {' '.join(words)} in {cwd} failed (exit {done.returncode}): {said[-1] if said else 'no message'}"
        )
    return done


def _out(cwd: Path, *args: str) -> str:
    return _git(cwd, *args).stdout.decode(errors="replace").strip()


def _names(data: bytes) -> list[str]:
    return [os.fsdecode(n) for n in data.split(b"\0") if n]


def _branch_of(cwd: Path) -> str:
    """The branch checked out at ``cwd``; '' when HEAD is detached."""
    return _git(cwd, "symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.decode(errors="replace").strip()


def _counted(rel: str) -> bool:
    return _HOME not in rel.split("/")


def _common_dir(cwd: Path) -> Path:
    return (cwd / _out(cwd, "rev-parse", "--git-common-dir")).resolve()


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock`` (threads and processes alike)."""
    with open(lock, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _identity(cwd: Path) -> dict[str, str]:
    """What a commit by milepost adds to its environment: nothing when git has
    an identity, else milepost's own (see the module's docstring)."""
    if all(_git(cwd, "config", key, check=False).returncode == 0 for key in ("user.name", "user.email")):
        return {}
    name, email = MILEPOST_IDENT
    given = {
        f"GIT_{who}_{what}": v for who in ("AUTHOR", "COMMITTER") for what, v in (("NAME", name), ("EMAIL", email))
    }
    return {k: v for k, v in given.items() if k not in os.environ}


@dataclass(frozen=True)
class Repo:
    """A git work tree, at its top folder ``root``."""

    root: Path

    @classmethod
    def find(cls, path: Path) -> Repo | None:
        """The repository whose work tree holds ``path``, or None."""
        if not path.is_dir():
            return None
        done = _git(path, "rev-parse", "--show-toplevel", check=False)
        top = done.stdout.decode(errors="replace").strip()
        return cls(Path(top).resolve()) if done.returncode == 0 and top else None

    def current_branch(self) -> str | None:
        """The branch checked out in the work tree; None when HEAD is detached."""
        return _branch_of(self.root) or None

    def branch_exists(self, name: str) -> bool:
        return _git(self.root, "show-ref", "--verify", "-q", f"refs/heads/{name}", check=False).returncode == 0

    def tip(self, ref: str) -> str:
        """The commit ``ref`` names (a branch first, then any revision), as a full sha."""
        for spelling in (f"refs/heads/{ref}", ref):
            done = _git(self.root, "rev-parse", "-q", "--verify", f"{spelling}^{{commit}}", check=False)
            if done.returncode == 0:
                return done.stdout.decode().strip()
        raise UnknownRefError(
            f"{ref!r} names no commit in {self.root}: give a branch, tag or commit (git branch --list)"
        )

    def dirty_paths(self) -> list[str]:
        """Modified, staged and untracked (not ignored) paths, relative to ``root``; ``.milepost/`` never."""
        return _status(self.root)

    def common_dir(self) -> Path:
        return _common_dir(self.root)


def _status(cwd: Path) -> list[str]:
    done = _git(
        cwd, "status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all", env={"GIT_OPTIONAL_LOCKS": "0"}
    )
    return sorted({p[3:] for p in _names(done.stdout) if _counted(p[3:])})


@dataclass(frozen=True)
class Worktree:
    """An attempt's worktree at ``path`` on ``branch`` (made by
    :meth:`Worktrees.ensure`); ``start`` is the commit (sha) the attempt
    started from, what its changes are measured against."""

    path: Path
    branch: str
    start: str

    def exists(self) -> bool:
        return (self.path / ".git").exists()

    def head(self) -> str:
        return _out(self.path, "rev-parse", "--verify", "HEAD^{commit}")

    def branch_paths(self, ref: str) -> list[str]:
        """Every path the branch's commits change since it left ``ref`` (its
        merge base with ``ref``): what a merge of the branch would bring in,
        commits a doer made itself included."""
        fork = _out(self.path, "merge-base", ref, "HEAD")
        changed = _git(self.path, "diff", "--name-only", "-z", "--no-renames", fork, "HEAD", "--").stdout
        return sorted({p for p in _names(changed) if _counted(p)})

    def ahead_of(self, ref: str) -> int:
        """How many commits the worktree's HEAD has that ``ref`` has not (an
        earlier attempt's work not merged yet)."""
        return int(_out(self.path, "rev-list", "--count", f"{ref}..HEAD"))

    def changed_paths(self) -> list[str]:
        """Every path the doer changed since ``start``: committed by it or not,
        staged or not, deleted, untracked (not ignored); sorted."""
        tracked = _git(self.path, "diff", "--name-only", "-z", "--no-renames", self.start, "--").stdout
        untracked = _git(self.path, "ls-files", "-z", "--others", "--exclude-standard").stdout
        return sorted({p for p in _names(tracked) + _names(untracked) if _counted(p)})

    def diff_digest(self, exclude: Sequence[str] = ()) -> str:
        """sha256 of the binary diff from ``start`` to the working tree,
        untracked files included, paths matching the gitignore patterns
        ``exclude`` left out. The same change gives the same digest, in any
        worktree, at any time; the worktree's own index is not touched."""
        changed = self.changed_paths()
        kept = set(changed) - set(protected_changes(changed, exclude))
        digest = hashlib.sha256()
        if not kept:
            return digest.hexdigest()
        with tempfile.TemporaryDirectory(prefix="milepost-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            _git(self.path, "read-tree", self.start, env=env)
            literal = {**env, "GIT_LITERAL_PATHSPECS": "1"}
            _git(self.path, "add", "-A", "--", *sorted(kept), env=literal)
            diff = _git(
                self.path,
                *("diff", "--cached", "--binary", "--full-index", "--no-renames", "--no-color", "--no-ext-diff"),
                *("--src-prefix=a/", "--dst-prefix=b/", self.start, "--"),
                *sorted(kept),
                env=literal,
            )
        digest.update(diff.stdout)
        return digest.hexdigest()

    def discard(self, paths: Sequence[str]) -> None:
        """Put ``paths`` back as they are at ``start`` (in the index and the
        files); a path ``start`` does not have is deleted."""
        if not paths:
            return
        literal = {"GIT_LITERAL_PATHSPECS": "1"}
        known = set(_names(_git(self.path, "ls-tree", "-r", "-z", "--name-only", self.start, "--", *paths).stdout))
        if known:
            _git(self.path, "checkout", "-q", self.start, "--", *sorted(known), env=literal)
        extra = [p for p in paths if p not in known]
        if extra:
            _git(self.path, "rm", "-q", "-r", "--cached", "--ignore-unmatch", "--", *extra, env=literal)
        for rel in extra:
            target = self.path / rel
            if target.is_file() or target.is_symlink():
                target.unlink()

    def commit_all(self, message: str) -> str | None:
        """Stage every change (``.milepost/`` aside) and commit it on
        ``branch``: the branch's new head, or None when there was nothing to
        commit and the doer committed nothing itself."""
        branch = _branch_of(self.path)
        if branch != self.branch:
            raise GitError(
                f"worktree {self.path} is on {branch or 'a detached HEAD'!r}, not on {self.branch!r}:"
                " a doer must leave its worktree on its branch"
            )
        _git(self.path, "add", "-A", "--", ".", _NOT_HOME, f":(exclude){_HOME}")
        if _git(self.path, "diff", "--cached", "--quiet", check=False).returncode != 0:
            _git(self.path, *_QUIET_COMMIT, "commit", "-q", "--no-verify", "-m", message, env=_identity(self.path))
        head = self.head()
        return None if head == _out(self.path, "rev-parse", "--verify", f"{self.start}^{{commit}}") else head

    def diff_stat(self, base: str, head: str) -> str:
        """``git diff --shortstat base head``: '2 files changed, 5 insertions(+)'."""
        return _out(self.path, "diff", "--shortstat", base, head)


@dataclass(frozen=True)
class Worktrees:
    """The worktrees milepost makes in ``repo``."""

    repo: Repo

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        return _locked(self.repo.common_dir() / "milepost-worktrees.lock")

    def _ours(self, path: Path) -> bool:
        """Whether ``path`` is the top of a worktree of this repository."""
        if not (path / ".git").exists():
            return False
        top = _git(path, "rev-parse", "--show-toplevel", check=False)
        if top.returncode != 0 or Path(top.stdout.decode().strip()).resolve() != path.resolve():
            return False
        return _common_dir(path) == self.repo.common_dir()

    def ensure(self, path: Path, branch: str, start: str) -> Worktree:
        """The worktree at ``path`` on ``branch``, ready for an attempt: made
        (the branch made at ``start`` when it does not exist; an existing
        branch is checked out as it is: a retry builds on what the last
        attempt left), or reused after a reset to the branch's tip and a clean
        (a killed attempt's junk goes), or made again when it was deleted."""
        with self._lock():
            if self._ours(path):
                _to_branch(path, branch, start if not self.repo.branch_exists(branch) else None)
            elif self.repo.branch_exists(branch):
                self._add(path, branch)
            else:
                self._add(path, self.repo.tip(start), "-b", branch)
        return Worktree(path, branch, _out(path, "rev-parse", "--verify", "HEAD^{commit}"))

    def _add(self, path: Path, target: str, *options: str) -> None:
        """``git worktree add options path target`` in an empty or missing folder."""
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise GitError(
                f"{path} exists and is not a git worktree of {self.repo.root}: milepost makes worktrees"
                " only in an empty or missing folder; delete it"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        _git(self.repo.root, "worktree", "prune")
        _git(self.repo.root, "worktree", "add", "-q", *options, str(path), target)

    def reset_branch(self, path: Path, branch: str, start: str) -> Worktree:
        """``branch`` starts again at ``start`` (its commits dropped), its worktree at ``path`` with it."""
        tip = self.repo.tip(start)
        wt = self.ensure(path, branch, tip)
        with self._lock():
            _git(path, "reset", "-q", "--hard", tip)
        return Worktree(wt.path, branch, tip)

    def remove(self, path: Path) -> None:
        """Remove the worktree at ``path`` (its branch stays); nothing when there is none."""
        with self._lock():
            if self._ours(path):
                _git(self.repo.root, "worktree", "remove", "--force", str(path))
            _git(self.repo.root, "worktree", "prune")

    def drop(self, path: Path, branch: str) -> None:
        """Remove the worktree at ``path`` and delete ``branch`` (once merged:
        its commits stay reachable from the branch it was merged into)."""
        self.remove(path)
        with self._lock():
            _git(self.repo.root, "branch", "-D", branch, check=False)


def _to_branch(path: Path, branch: str, create_at: str | None) -> None:
    """The worktree at ``path`` on ``branch`` at its tip, clean (``create_at``: make the branch there)."""
    if create_at is not None:
        _git(path, "checkout", "-q", "-f", "-b", branch, create_at)
    elif _branch_of(path) != branch:
        _git(path, "checkout", "-q", "-f", branch)
    _git(path, "reset", "-q", "--hard", "HEAD")
    _git(path, "clean", "-q", "-f", "-d")


def protected_changes(paths: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The ``paths`` that the gitignore-style ``patterns`` match (the rules
    of a milestone's inputs: :class:`milepost.gates.listing.FileIndex`), sorted."""
    return FileIndex(list(paths)).match(list(patterns)) if patterns and paths else []


# -- the merge ---------------------------------------------------------------------


@dataclass(frozen=True)
class MergeResult:
    """A merge's end: ``ok`` with the merge commit, or the conflict (which
    files and their hunks, at most 200 lines) with the checkout left as it was."""

    ok: bool
    commit: str | None = None
    conflict: str | None = None


def integration_checkout(repo: Repo, base: str, home: Path) -> Path:
    """Where merges into ``base`` are made: the workspace when it has
    ``base`` checked out and nothing uncommitted (``.milepost/`` aside),
    else a detached worktree at ``base``'s tip under
    ``home/worktrees/integration`` (see the module's docstring)."""
    if not repo.branch_exists(base):
        raise UnknownRefError(f"{base!r} is not a branch of {repo.root}: name an existing branch (git branch --list)")
    if repo.current_branch() == base and not repo.dirty_paths():
        return repo.root
    path = home / "worktrees" / "integration"
    worktrees = Worktrees(repo)
    with worktrees._lock():
        if worktrees._ours(path):
            _git(path, "checkout", "-q", "-f", "--detach", repo.tip(base))
            _git(path, "reset", "-q", "--hard")  # a merge killed half way leaves MERGE_HEAD: gone
        else:
            worktrees._add(path, repo.tip(base), "--detach")
        _git(path, "clean", "-q", "-f", "-d")
        mark = (path / _out(path, "rev-parse", "--git-dir")).resolve() / _BASE_MARK
        mark.write_text(base + "\n", encoding="utf-8")
    return path


def merge(integration: Path, branch: str, message: str) -> MergeResult:
    """Merge ``branch`` into the integration branch in the checkout
    ``integration`` (``git merge --no-ff``: one merge commit, ``message``).
    On a conflict the merge is aborted: the checkout and the branch stay as
    they were and the result holds the conflict. One merge at a time per
    repository (an exclusive ``flock`` on ``<git common dir>/milepost-merge.lock``)."""
    with _locked(_common_dir(integration) / "milepost-merge.lock"):
        attached = _branch_of(integration)
        if attached:
            dirty = _status(integration)
            if dirty:
                raise GitError(
                    f"the integration checkout {integration} has uncommitted changes ({', '.join(dirty[:3])}):"
                    " milepost never merges over a person's work; merge in integration_checkout()'s worktree"
                )
            return _merge_here(integration, branch, message, attached)
        mark = (integration / _out(integration, "rev-parse", "--git-dir")).resolve() / _BASE_MARK
        if not mark.exists():
            raise GitError(f"{integration} has a detached HEAD and is no integration worktree of milepost's")
        return _merge_detached(integration, branch, message, mark.read_text(encoding="utf-8").strip())


def _merge_here(cwd: Path, branch: str, message: str, into: str) -> MergeResult:
    args = (*_QUIET_COMMIT, "merge", "--no-ff", "--no-verify", "--no-edit", "-m", message, branch)
    done = _git(cwd, *args, env=_identity(cwd), check=False)
    if done.returncode == 0:
        return MergeResult(True, commit=_out(cwd, "rev-parse", "HEAD"))
    if _git(cwd, "rev-parse", "-q", "--verify", "MERGE_HEAD", check=False).returncode != 0:
        said = (done.stderr + done.stdout).decode(errors="replace").strip().splitlines()
        raise GitError(f"git merge of {branch!r} into {into!r} in {cwd} failed: {said[0] if said else 'no message'}")
    conflict = _conflict_text(cwd, branch, into)
    _git(cwd, "merge", "--abort")
    return MergeResult(False, conflict=conflict)


def _merge_detached(cwd: Path, branch: str, message: str, base: str) -> MergeResult:
    """Merge at ``base``'s tip in a detached worktree, then move ``base``
    there if no one moved it meanwhile (else merge again from its new tip)."""
    for _ in range(5):
        old = _out(cwd, "rev-parse", "--verify", f"refs/heads/{base}^{{commit}}")
        behind = _out(cwd, "rev-parse", "--verify", "HEAD^{commit}") != old
        if behind or _git(cwd, "diff", "--quiet", "HEAD", check=False).returncode != 0:
            # (at the tip and clean, as after milepost's own merge: the drive's gates may be running here)
            _git(cwd, "reset", "-q", "--hard", old)  # detached: HEAD moves, a half-done merge goes
            _git(cwd, "clean", "-q", "-f", "-d")
        result = _merge_here(cwd, branch, message, base)
        if not result.ok or result.commit is None:
            return result
        moved = _git(cwd, "update-ref", "-m", message, f"refs/heads/{base}", result.commit, old, check=False)
        if moved.returncode == 0:
            return result
    raise GitError(f"branch {base!r} kept moving while milepost merged {branch!r} into it: drive again")


def _conflict_text(cwd: Path, branch: str, into: str) -> str:
    files = _names(_git(cwd, "diff", "--name-only", "-z", "--diff-filter=U").stdout)
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    head = f"{len(files)} file(s) conflict merging {branch} into {into}: {shown}"
    hunks = _git(cwd, "diff", "--no-color", "--no-ext-diff", check=False).stdout.decode(errors="replace").splitlines()
    lines = [head, *hunks]
    if len(lines) > _CONFLICT_LINES:
        lines = [*lines[: _CONFLICT_LINES - 1], f"... ({len(lines) - _CONFLICT_LINES + 1} more lines)"]
    return "\n".join(lines)
