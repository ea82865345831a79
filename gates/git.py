"""The git layer of doers (docs/doers.md, issue 30): the workspace's
repository, a worktree per attempt, what a doer changed, and the merge into
the integration branch. Every call is a ``git`` subprocess (never a shell,
``check=False`` and a :class:`GitError` naming the command and git's own
words); nothing here knows the store, Prefect or a milestone. Decisions:

- **Commits milepost makes** (an attempt's commit, a merge commit) carry the
  identity git is configured with (``user.name`` and ``user.email`` at any
  config level, or ``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` in the environment);
  when git has none, ``milepost <milepost@localhost>``. They are never signed: a doer's work is judged by its
  gate, not by a pre-commit hook, and no passphrase prompt may stall a drive.
- **No side doors**: every git command milepost runs (:func:`_git`, the one
  runner) disables hooks (``core.hooksPath=/dev/null``: a hook a doer wrote
  into the common git dir never runs with the driver's environment) and
  fsmonitor (``core.fsmonitor=false``); a doer's work is judged by its gate,
  not by a pre-commit hook. Diffs run no textconv, merges verify no
  signature (no program a doer configured runs). git runs with the driver's
  environment scrubbed as a doer's is (:func:`milepost.gates.doer_env.
  scrubbed_env`): a filter driver a doer configured (``filter.*.clean``,
  which git runs on ``add`` and ``checkout`` and which cannot be disabled
  without naming it) sees no store URL and no secret.
- **``.milepost/`` never counts** as a change, a dirty path or part of a
  commit, at any depth, whether ``.gitignore`` names it or not.
- **Never a branch moved under a working tree** (docs/doers.md, issue 38):
  merges land in the workspace only when it has the base branch checked
  out and nothing uncommitted (``git merge`` updates its files); a base
  branch checked out nowhere is moved by ``git update-ref`` from a detached
  worktree of milepost's; otherwise the work goes to the item's integration
  branch ``milepost/<item>/integration``, in a worktree of its own, and its
  user brings it in with one ``git merge``
  (:func:`milepost.gates.integration.integration_checkout`). A user's files,
  index and checked-out branch are never written.
- **One writer at a time**: a merge holds an exclusive ``fcntl.flock`` on
  ``<git common dir>/milepost-merge.lock`` (threads and processes alike: each
  lock is its own open file); worktrees are made under ``milepost-worktrees.lock``.
- **A reused worktree** is reset to its branch's tip and cleaned of untracked
  files, not of ignored ones: what ``doer.setup`` installed stays.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from milepost.gates.doer_env import scrubbed_env
from milepost.graph.errors import MilepostError, NotFoundError

__all__ = ["MILEPOST_IDENT", "NO_SIDE_DOORS", "GitError", "Repo", "UnknownRefError"]

MILEPOST_IDENT = ("milepost", "milepost@localhost")
_HOME = ".milepost"
_NOT_HOME = f":(exclude,glob)**/{_HOME}/**"
_CONFLICT_LINES = 200
_BASE_MARK = "milepost-integration-base"  # in an integration worktree's own git dir: the branch it merges into
# Set by a git hook or a parent git command: they would point every call at another repository.
_LEAKY = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX", "GIT_OBJECT_DIRECTORY")
_QUIET_COMMIT = ("-c", "commit.gpgsign=false")
# Before every command (issue 38): no hook runs (a doer may write one into the common git dir, and it would run
# with the driver's environment), no fsmonitor daemon is asked (core.fsmonitor names a program to run).
NO_SIDE_DOORS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


class GitError(MilepostError):
    """git missing, or a git command that failed: the environment, exit 3."""

    exit_code = 3
    kind = "git"


class UnknownRefError(GitError, NotFoundError):
    """A branch, tag or commit named that the repository does not have: bad input, exit 2."""

    exit_code = 2
    kind = "unknown_ref"


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """git's environment: the driver's, scrubbed as a doer's is (no store URL,
    no secrets: whatever git itself may run, say a filter driver a doer
    configured, never sees them), without variables that would point git at
    another repository."""
    env = {k: v for k, v in scrubbed_env(os.environ, ()).items() if k not in _LEAKY}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.update(extra or {})
    return env


def _git(
    cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    try:
        done = subprocess.run(
            ["git", *NO_SIDE_DOORS, "-C", str(cwd), *args], capture_output=True, env=_env(env), check=False, timeout=600
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

    def merging(self) -> bool:
        """Whether the work tree is in the middle of a merge (``MERGE_HEAD`` exists)."""
        return _git(self.root, "rev-parse", "-q", "--verify", "MERGE_HEAD", check=False).returncode == 0

    def commits_missing(self, into: str, branch: str) -> int:
        """How many commits ``branch`` has that ``into`` lacks (``git rev-list --count into..branch``)."""
        return int(_out(self.root, "rev-list", "--count", f"{into}..{branch}"))

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
