"""The integration branch (docs/doers.md): where a passed attempt's branch is
merged (:func:`integration_checkout`), and the merge itself (:func:`merge`),
one writer at a time. Every git call goes through :mod:`milepost.gates.git`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from milepost.gates.git import (
    _BASE_MARK,
    _CONFLICT_LINES,
    _QUIET_COMMIT,
    GitError,
    Repo,
    UnknownRefError,
    _branch_of,
    _common_dir,
    _git,
    _identity,
    _locked,
    _names,
    _out,
    _status,
)
from milepost.gates.worktrees import Worktrees

__all__ = ["MergeResult", "integration_checkout", "merge"]


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
