"""A doer's worktrees (docs/doers.md): one per attempt, on the branch
``milepost/<item>/<milestone>``, outside the workspace (:func:`item_folder`:
under the user's cache folder, keyed by the repository, so no store is in
a parent folder of a doer), made, reused (reset to its branch's tip and
cleaned of untracked files, not of ignored ones: what ``doer.setup``
installed stays) and removed by milepost; what a doer changed in one (every
path, a digest of the change, protected paths) and its commit. Every git
call goes through :mod:`milepost.gates.git`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from milepost.gates.git import (
    _HOME,
    _NOT_HOME,
    _QUIET_COMMIT,
    GitError,
    Repo,
    _branch_of,
    _common_dir,
    _counted,
    _git,
    _identity,
    _locked,
    _names,
    _out,
)
from milepost.gates.listing import FileIndex

__all__ = [
    "WORKTREE_MARK",
    "Worktree",
    "Worktrees",
    "doer_branch",
    "item_folder",
    "protected_changes",
    "repo_key",
    "worktrees_root",
]

# In the own git dir of every worktree milepost makes (``.git/worktrees/<name>/``): a milepost command run
# inside one acts as the agent ``doer`` wherever the worktrees live (milepost/cli/_base.py reads it).
WORKTREE_MARK = "milepost-worktree"


def worktrees_root(setting: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Where milepost's worktrees live: ``setting`` (``MILEPOST_WORKTREES``)
    when given, else ``$XDG_CACHE_HOME/milepost/worktrees``, else
    ``~/.cache/milepost/worktrees``; absolute."""
    env = os.environ if env is None else env
    if setting:
        return Path(setting).expanduser().absolute()
    cache = env.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and Path(cache).is_absolute() else Path(env.get("HOME") or Path.home()) / ".cache"
    return base / "milepost" / "worktrees"


def repo_key(repo: Repo) -> str:
    """The folder of ``repo``'s worktrees under the root: its name and a short
    hash of the real path of its common git dir (``shapes-3f2a9c01d4e5``),
    the same from the workspace and from any of its worktrees."""
    common = repo.common_dir().resolve()
    top = common.parent.name if common.name == ".git" else common.name.removesuffix(".git")
    digest = hashlib.sha256(os.fsencode(str(common))).hexdigest()[:12]
    return f"{top or 'repo'}-{digest}"


def doer_branch(item: int, milestone: str) -> str:
    """The branch of ``milestone``'s attempts: ``milepost/<item>/<milestone>``;
    a milestone named ``integration`` gets ``milepost/<item>/_integration``
    (``milepost/<item>/integration`` is the item's integration branch, and no
    milestone's name starts with '_')."""
    return f"milepost/{item}/{'_integration' if milestone == 'integration' else milestone}"


def item_folder(repo: Repo, root: Path, item: int) -> Path:
    """The folder of work item ``item``'s worktrees: ``root/<repo key>/item-<item>``."""
    return root / repo_key(repo) / f"item-{item}"


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
                "--no-textconv",
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

    def files_between(self, base: str, head: str) -> list[str]:
        """The paths the commits from ``base`` to ``head`` change, sorted (``.milepost/`` never)."""
        changed = _git(self.path, "diff", "--name-only", "-z", "--no-renames", base, head, "--").stdout
        return sorted({p for p in _names(changed) if _counted(p)})

    def diff_stat(self, base: str, head: str) -> str:
        """``git diff --shortstat base head``: '2 files changed, 5 insertions(+)'."""
        return _out(self.path, "diff", "--shortstat", "--no-ext-diff", "--no-textconv", base, head)


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
        own = (path / _out(path, "rev-parse", "--git-dir")).resolve()
        (own / WORKTREE_MARK).write_text(f"{self.repo.root}\n", encoding="utf-8")

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

    def remove_under(self, folder: Path) -> list[Path]:
        """Remove every worktree of this repository under ``folder`` (their
        branches stay): where milepost kept them before (``.milepost/worktrees``),
        so a branch checked out there can be checked out again outside."""
        if not folder.is_dir():
            return []
        listed = _out(self.repo.root, "worktree", "list", "--porcelain")
        paths = [Path(line.removeprefix("worktree ")) for line in listed.splitlines() if line.startswith("worktree ")]
        gone = [p for p in paths if p.resolve().is_relative_to(folder.resolve()) and self._ours(p)]
        for p in gone:
            self.remove(p)
        return gone

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
